package pystack

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/retrivium/forensic/unwind"
)

// Version is a CPython version.
type Version struct {
	Major, Minor, Micro int
}

// String returns "3.11.7", or "3.11" when the micro version is unknown.
func (v Version) String() string {
	if v.Micro < 0 {
		return fmt.Sprintf("%d.%d", v.Major, v.Minor)
	}
	return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Micro)
}

// Target is a located CPython interpreter in one process: its version, its
// layout and the addresses a walk starts from.
type Target struct {
	Version Version
	Layout  *Layout
	// Path is the interpreter's file: libpython3.X.so or the python3.X
	// executable that links it statically.
	Path string
	// Runtime is the address of _PyRuntime in the process.
	Runtime uint64
	// CodeType is the address of PyCode_Type, 0 when not exported; a
	// frame whose code object has another type is skipped.
	CodeType uint64
}

// interpreterName matches the file names CPython installs: the library
// libpython3.X.so[.1.0] and the executable python3.X, with the ABI flags
// of special builds ("d" debug, "t" free-threaded).
var interpreterName = regexp.MustCompile(`^(?:libpython|python)(\d)\.(\d+)([a-z]*)(?:\.so.*)?$`)

// IsInterpreterName reports whether a file name is one CPython installs
// its interpreter as (libpython3.X.so*, python3.X), so that a process
// mapping such a file is known to be a Python process even when its
// interpreter could not be located.
func IsInterpreterName(name string) bool {
	return interpreterName.MatchString(name)
}

// Locate finds the CPython interpreter among a process's executable
// mappings: the file whose dynamic symbols export _PyRuntime (or, before
// 3.7, Py_InitializeEx, to name the version it refuses). Files named like
// an interpreter are tried first.
func Locate(maps []unwind.Mapping, files unwind.Files) (*Target, error) {
	seen := map[string]bool{}
	var named, other []unwind.Mapping
	for _, m := range maps {
		if m.Path == "" || m.Path[0] != '/' || seen[m.Path] {
			continue
		}
		seen[m.Path] = true
		if interpreterName.MatchString(filepath.Base(m.Path)) {
			named = append(named, m)
		} else {
			other = append(other, m)
		}
	}
	for _, m := range append(named, other...) {
		t, err := locateIn(m, files)
		if !errors.Is(err, ErrNotPython) {
			return t, err
		}
	}
	return nil, ErrNotPython
}

// locateIn checks one mapped file; ErrNotPython when it is not an
// interpreter.
func locateIn(m unwind.Mapping, files unwind.Files) (*Target, error) {
	r, err := files.Open(m)
	if err != nil {
		return nil, ErrNotPython
	}
	defer r.Close()
	f, err := elf.NewFile(r)
	if err != nil {
		return nil, ErrNotPython
	}
	syms, _ := f.DynamicSymbols()
	addr := map[string]uint64{}
	for _, s := range syms {
		switch s.Name {
		case "_PyRuntime", "Py_Version", "PyCode_Type", "Py_InitializeEx":
			if s.Section != elf.SHN_UNDEF && s.Value != 0 {
				addr[s.Name] = s.Value
			}
		}
	}
	if addr["_PyRuntime"] == 0 && addr["Py_InitializeEx"] == 0 {
		return nil, ErrNotPython
	}
	v, err := versionOf(f, m.Path, addr["Py_Version"])
	if err != nil {
		return nil, err
	}
	if addr["_PyRuntime"] == 0 {
		// An interpreter older than 3.7, which introduced _PyRuntime.
		return nil, fmt.Errorf("%s: CPython %s: %w (supported: %s)", m.Path, v, ErrUnsupported, supported())
	}
	l, err := layoutFor(v.Major, v.Minor)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.Path, err)
	}
	bias, err := loadBias(f, m)
	if err != nil {
		return nil, err
	}
	t := &Target{Version: v, Layout: l, Path: m.Path, Runtime: bias + addr["_PyRuntime"]}
	if a := addr["PyCode_Type"]; a != 0 {
		t.CodeType = bias + a
	}
	return t, nil
}

// versionOf reads the version from Py_Version (3.11+: PY_VERSION_HEX in
// .rodata) and from the file name, and refuses a disagreement, an unknown
// version and special builds (debug, free-threaded) whose layouts differ.
func versionOf(f *elf.File, path string, pyVersion uint64) (Version, error) {
	v := Version{Micro: -1}
	fromName := interpreterName.FindStringSubmatch(filepath.Base(path))
	if fromName != nil {
		v.Major, _ = strconv.Atoi(fromName[1])
		v.Minor, _ = strconv.Atoi(fromName[2])
		// "m" (pymalloc, up to 3.7) changes nothing; "d" (debug) and "t"
		// (free-threaded) builds have other layouts.
		if strings.ContainsAny(fromName[3], "dt") {
			return v, fmt.Errorf("%s: CPython %s built with ABI flags %q: %w", path, v, fromName[3], ErrUnsupported)
		}
	}
	if pyVersion != 0 {
		hex, err := readUint32(f, pyVersion)
		if err != nil {
			return v, fmt.Errorf("%s: Py_Version: %w", path, err)
		}
		got := Version{Major: int(hex >> 24), Minor: int(hex >> 16 & 0xff), Micro: int(hex >> 8 & 0xff)}
		if fromName != nil && (got.Major != v.Major || got.Minor != v.Minor) {
			return v, fmt.Errorf("%s: Py_Version says %s: %w", path, got, ErrUnsupported)
		}
		return got, nil
	}
	if fromName == nil {
		return v, fmt.Errorf("%s exports _PyRuntime but neither Py_Version nor its name gives its version: %w", path, ErrUnsupported)
	}
	return v, nil
}

// readUint32 reads a little-endian uint32 at a virtual address of the file.
func readUint32(f *elf.File, vaddr uint64) (uint32, error) {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Vaddr <= vaddr && vaddr+4 <= p.Vaddr+p.Filesz {
			var b [4]byte
			if _, err := p.ReadAt(b[:], int64(vaddr-p.Vaddr)); err != nil {
				return 0, err
			}
			return binary.LittleEndian.Uint32(b[:]), nil
		}
	}
	return 0, fmt.Errorf("address %#x is not in the file", vaddr)
}

// loadBias is what the process added to the file's virtual addresses:
// the mapping at m.Start holds file offset m.Offset.
func loadBias(f *elf.File, m unwind.Mapping) (uint64, error) {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Off <= m.Offset && m.Offset < p.Off+p.Filesz {
			return m.Start - (p.Vaddr + m.Offset - p.Off), nil
		}
	}
	return 0, fmt.Errorf("%s: mapping at file offset %#x is in no segment: %w", m.Path, m.Offset, ErrLayout)
}

// NewTarget rebuilds a located interpreter from what a recording kept of
// it: its version ("3.11.2" or "3.11"), its file and the addresses of
// _PyRuntime and PyCode_Type (0: not known). A version without a layout is
// refused as Locate refuses it.
func NewTarget(version, path string, runtime, codeType uint64) (*Target, error) {
	v := Version{Micro: -1}
	parts := strings.Split(version, ".")
	var err error
	if len(parts) < 2 || len(parts) > 3 {
		return nil, fmt.Errorf("CPython version %q: %w", version, ErrUnsupported)
	}
	if v.Major, err = strconv.Atoi(parts[0]); err == nil {
		v.Minor, err = strconv.Atoi(parts[1])
	}
	if err == nil && len(parts) == 3 {
		v.Micro, err = strconv.Atoi(parts[2])
	}
	if err != nil {
		return nil, fmt.Errorf("CPython version %q: %w", version, ErrUnsupported)
	}
	l, err := layoutFor(v.Major, v.Minor)
	if err != nil {
		return nil, err
	}
	return &Target{Version: v, Layout: l, Path: path, Runtime: runtime, CodeType: codeType}, nil
}
