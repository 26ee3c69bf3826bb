package unwind

import (
	"debug/elf"
	"errors"
	"fmt"
	"sync"
)

// module is what a walk needs from one ELF file: its load segments (file
// offset to virtual address), its CFI and, loaded on first use, its
// symbols. Modules are cached per build id (or path) for the life of an
// Unwinder; open files are not kept.
type module struct {
	loads  []elf.ProgHeader
	eh     *section // .eh_frame
	debug  *section // .debug_frame, of the file or of its debug file
	err    error    // the file could not be opened or is not ELF
	symsMu sync.Once
	syms   symtab
	load   func() (*elf.File, *elf.File, func()) // reopens the file and its debug file for symbols
}

// loadModule opens and parses the file of m.
func loadModule(files Files, m Mapping) *module {
	mod := &module{}
	mod.load = func() (*elf.File, *elf.File, func()) {
		f, debug, done, _ := openELF(files, m)
		return f, debug, done
	}
	f, debug, done, err := openELF(files, m)
	defer done()
	if err != nil {
		mod.err = err
		return mod
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			mod.loads = append(mod.loads, p.ProgHeader)
		}
	}
	mod.eh = ehFrame(f)
	mod.debug = debugFrame(f)
	if mod.debug == nil && debug != nil {
		mod.debug = debugFrame(debug)
	}
	return mod
}

// openELF opens the file of m and, when there is one, its separate debug
// file. done closes both.
func openELF(files Files, m Mapping) (f, debug *elf.File, done func(), err error) {
	var closers []func() error
	done = func() {
		for _, c := range closers {
			c()
		}
	}
	r, err := files.Open(m)
	if err != nil {
		return nil, nil, done, err
	}
	closers = append(closers, r.Close)
	if f, err = elf.NewFile(r); err != nil {
		return nil, nil, done, fmt.Errorf("%s: %w", m.name(), err)
	}
	if m.BuildID != "" {
		if dr, err := files.OpenDebug(m.BuildID); err == nil {
			closers = append(closers, dr.Close)
			debug, _ = elf.NewFile(dr)
		}
	}
	return f, debug, done, nil
}

// ehFrame reads .eh_frame and indexes it through .eh_frame_hdr, or by
// scanning when the header has no usable table.
func ehFrame(f *elf.File) *section {
	sec := f.Section(".eh_frame")
	if sec == nil || sec.Type == elf.SHT_NOBITS {
		return nil
	}
	data, err := sec.Data()
	if err != nil || len(data) == 0 {
		return nil
	}
	s := &section{data: data, addr: sec.Addr}
	if t := f.Section(".text"); t != nil {
		s.text = t.Addr
	}
	if g := f.Section(".got"); g != nil {
		s.got = g.Addr
	}
	if hdr := f.Section(".eh_frame_hdr"); hdr != nil && hdr.Type != elf.SHT_NOBITS {
		if hb, err := hdr.Data(); err == nil {
			if idx, err := parseHdr(hb, hdr.Addr, sec.Addr, len(data)); err == nil && idx != nil {
				s.index = idx
				return s
			}
		}
	}
	if s.scan() != nil && len(s.index) == 0 {
		return nil
	}
	return s
}

// debugFrame reads and indexes .debug_frame.
func debugFrame(f *elf.File) *section {
	sec := f.Section(".debug_frame")
	if sec == nil || sec.Type == elf.SHT_NOBITS {
		return nil
	}
	data, err := sec.Data() // decompresses SHF_COMPRESSED sections
	if err != nil || len(data) == 0 {
		return nil
	}
	s := &section{data: data, debug: true}
	if s.scan() != nil && len(s.index) == 0 {
		return nil
	}
	return s
}

// vaddr converts a file offset to the file's virtual address.
func (mod *module) vaddr(off uint64) (uint64, bool) {
	for _, p := range mod.loads {
		if p.Off <= off && off < p.Off+p.Filesz {
			return off - p.Off + p.Vaddr, true
		}
	}
	return 0, false
}

// hasCFI reports whether the file has any CFI section.
func (mod *module) hasCFI() bool { return mod.eh != nil || mod.debug != nil }

// fde finds the FDE for a virtual address: .eh_frame first, then
// .debug_frame.
func (mod *module) fde(v uint64) (*fde, *section, error) {
	var firstErr error
	for _, s := range []*section{mod.eh, mod.debug} {
		if s == nil {
			continue
		}
		f, err := s.find(v)
		if err == nil {
			return f, s, nil
		}
		if !errors.Is(err, ErrNoCFI) && firstErr == nil {
			firstErr = err
		}
	}
	if firstErr != nil {
		return nil, nil, firstErr
	}
	return nil, nil, ErrNoCFI
}

// symbols loads the symbol table on first use.
func (mod *module) symbols() symtab {
	mod.symsMu.Do(func() {
		if mod.err != nil {
			return
		}
		f, debug, done := mod.load()
		defer done()
		mod.syms = loadSymtab(f, debug)
	})
	return mod.syms
}
