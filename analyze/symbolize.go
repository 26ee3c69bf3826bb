package analyze

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/retrivium/forensic/internal/elfnote"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// Symbolizer turns stored stack frames into functions.
type Symbolizer interface {
	// Symbolize names frames of a process. files lists every file the run
	// saw (mapped files, attached libraries, executables); maps are the
	// process's own mappings, for frames stored as bare addresses.
	Symbolize(frames []store.Frame, files []File, maps []store.Mapping) *report.Stack
}

// File is a file the recording saw, with its build id when recorded.
type File struct {
	Path    string // as the process named it
	Open    string // where this machine can read it ("" = Path)
	BuildID string
}

// ELFSymbolizer reads symbol tables of ELF files on this machine. Frames
// stored as (build id, file offset) are resolved in the file with that
// build id; a file whose build id differs is never used for it.
type ELFSymbolizer struct {
	cache map[string]*elfSyms
	ids   map[string]string // path -> build id, computed when not recorded
}

// NewELFSymbolizer returns a symbolizer with an empty cache.
func NewELFSymbolizer() *ELFSymbolizer {
	return &ELFSymbolizer{cache: map[string]*elfSyms{}, ids: map[string]string{}}
}

type elfSym struct {
	name       string
	addr, size uint64
}

type elfSyms struct {
	syms  []elfSym
	loads []elf.ProgHeader
	err   error
}

func (z *ELFSymbolizer) load(path string) *elfSyms {
	if s, ok := z.cache[path]; ok {
		return s
	}
	s := &elfSyms{}
	z.cache[path] = s
	f, err := elf.Open(path)
	if err != nil {
		s.err = err
		return s
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			s.loads = append(s.loads, p.ProgHeader)
		}
	}
	add := func(syms []elf.Symbol) {
		for _, sy := range syms {
			if elf.ST_TYPE(sy.Info) == elf.STT_FUNC && sy.Value != 0 {
				s.syms = append(s.syms, elfSym{name: sy.Name, addr: sy.Value, size: sy.Size})
			}
		}
	}
	if syms, err := f.Symbols(); err == nil {
		add(syms)
	} else if dbg := debugFile(z.buildID(path)); dbg != "" {
		// A stripped library's own functions (static ones included) are
		// in its separate debug file, found by build id as gdb finds it.
		if df, err := elf.Open(dbg); err == nil {
			if syms, err := df.Symbols(); err == nil {
				add(syms)
			}
			df.Close()
		}
	}
	if syms, err := f.DynamicSymbols(); err == nil {
		add(syms)
	}
	sort.Slice(s.syms, func(i, j int) bool { return s.syms[i].addr < s.syms[j].addr })
	return s
}

// vaddr converts a file offset to the ELF's virtual address.
func (s *elfSyms) vaddr(off uint64) (uint64, bool) {
	for _, p := range s.loads {
		if p.Off <= off && off < p.Off+p.Filesz {
			return off - p.Off + p.Vaddr, true
		}
	}
	return 0, false
}

func (s *elfSyms) lookup(v uint64) (elfSym, bool) {
	i := sort.Search(len(s.syms), func(i int) bool { return s.syms[i].addr > v }) - 1
	if i < 0 {
		return elfSym{}, false
	}
	sy := s.syms[i]
	if sy.size != 0 && v >= sy.addr+sy.size {
		return elfSym{}, false
	}
	return sy, true
}

// sameBuildID compares a recorded build id with the kernel's, which pads
// short ids with zeros to 20 bytes.
func sameBuildID(file, kernel string) bool {
	if file == "" || kernel == "" {
		return false
	}
	return strings.TrimRight(kernel, "0") == strings.TrimRight(file, "0")
}

// fileFor finds a readable file with the given build id.
func (z *ELFSymbolizer) fileFor(id string, files []File) (File, bool) {
	for _, f := range files {
		if f.BuildID != "" && sameBuildID(f.BuildID, id) && readable(f.open()) {
			if got := z.buildID(f.open()); sameBuildID(got, id) {
				return f, true
			}
		}
	}
	for _, f := range files {
		if f.BuildID == "" && sameBuildID(z.buildID(f.open()), id) {
			return f, true
		}
	}
	return File{}, false
}

func (f File) open() string {
	if f.Open != "" && readable(f.Open) {
		return f.Open
	}
	return f.Path
}

func readable(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func (z *ELFSymbolizer) buildID(path string) string {
	id, ok := z.ids[path]
	if !ok {
		id = elfnote.BuildID(path)
		z.ids[path] = id
	}
	return id
}

// name resolves a file offset in path to function+offset.
func (z *ELFSymbolizer) name(path string, off uint64, fr *report.Frame) {
	es := z.load(path)
	if v, ok := es.vaddr(off); ok {
		if sy, ok := es.lookup(v); ok {
			fr.Function = sy.name
			fr.Offset = v - sy.addr
		}
	}
}

// Symbolize resolves each frame to function+offset in its library.
func (z *ELFSymbolizer) Symbolize(frames []store.Frame, files []File, maps []store.Mapping) *report.Stack {
	st := &report.Stack{Frames: []report.Frame{}}
	unresolved := 0
	var notes []string
	for i, f := range frames {
		fr := report.Frame{}
		// Frames above the innermost are return addresses: look up the byte
		// before, so a call that ends a function is attributed to it.
		adj := uint64(0)
		if i > 0 {
			adj = 1
		}
		switch {
		case f.BuildID != "":
			fr.Address = f.Offset
			file, ok := z.fileFor(f.BuildID, files)
			if !ok {
				fr.Library = "build-id " + f.BuildID[:min(12, len(f.BuildID))]
				notes = append(notes, "no file with build id "+f.BuildID+" is at hand")
				break
			}
			fr.Library = filepath.Base(file.Path)
			z.name(file.open(), f.Offset-adj, &fr)
		case f.IP != 0:
			fr.Address = f.IP
			var m *store.Mapping
			for j := range maps {
				if maps[j].Start <= f.IP-adj && f.IP-adj < maps[j].End {
					m = &maps[j]
					break
				}
			}
			if m == nil {
				notes = append(notes, "an address outside the recorded mappings")
				break
			}
			fr.Library = filepath.Base(m.Path)
			path := m.Path
			if m.Host != "" && readable(m.Host) {
				path = m.Host
			}
			if m.BuildID != "" {
				if id := z.buildID(path); id != "" && id != m.BuildID {
					notes = append(notes, m.Path+" changed since the recording (build id differs)")
					break
				}
			}
			z.name(path, f.IP-adj-m.Start+m.Offset, &fr)
		}
		if fr.Function == "" {
			unresolved++
		} else if adj == 1 {
			fr.Offset++ // report the return address itself
		}
		st.Frames = append(st.Frames, fr)
	}
	// A walk that reaches main or a thread's start is whole; one that stops
	// before (missing frame pointers) is partial.
	reached := false
	for _, fr := range st.Frames {
		switch fr.Function {
		case "main", "_start", "__libc_start_main", "__libc_start_call_main", "start_thread", "clone", "clone3":
			reached = true
		}
	}
	if !reached {
		st.Partial = true
		st.Note = fmt.Sprintf("the walk stopped after %d frames without reaching main or a thread start (frame pointers missing?)", len(frames))
	}
	if unresolved > 0 {
		n := fmt.Sprintf("%d of %d frames could not be named", unresolved, len(frames))
		if len(notes) > 0 {
			n += ": " + notes[0]
		}
		if st.Note != "" {
			st.Note += "; "
		}
		st.Note += n
	}
	return st
}

// debugRoot is where distributions install separate debug files, by
// build id (Debian's *-dbg and *-dbgsym packages).
const debugRoot = "/usr/lib/debug/.build-id"

// debugFile returns the separate debug file of a build id, "" when there
// is none.
func debugFile(buildID string) string {
	if len(buildID) < 3 {
		return ""
	}
	p := filepath.Join(debugRoot, buildID[:2], buildID[2:]+".debug")
	if readable(p) {
		return p
	}
	return ""
}
