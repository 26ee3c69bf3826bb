package recorder

import (
	"bufio"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/internal/elfnote"
)

// LibFile is one libcuda file to attach to. Files are told apart by device
// and inode: the same library seen from several containers is attached
// once.
type LibFile struct {
	Path     string // as the process that maps it names it
	HostPath string // openable by the recorder (through /proc/PID/root when it differs)
	Dev, Ino uint64 // as the recorder's stat(2) of HostPath sees them
	BuildID  string
	// Key is the file as the kernel names it in a mapping (the map hook's
	// attached_files key); zero when unknown.
	Key fileKey
}

// fileKey is a file as the kernel's mappings name it: its device (the
// kernel's dev_t, major << 20 | minor) and inode.
type fileKey struct {
	Dev uint32
	Ino uint64
}

// kernelDev converts a stat(2) device number to the kernel's dev_t.
func kernelDev(st uint64) uint32 { return unix.Major(st)<<20 | unix.Minor(st) }

func isLibCUDA(path string) bool {
	base := filepath.Base(path)
	return base == "libcuda.so" || strings.HasPrefix(base, "libcuda.so.")
}

func statFile(hostPath string) (dev, ino uint64, err error) {
	var st syscall.Stat_t
	if err := syscall.Stat(hostPath, &st); err != nil {
		return 0, 0, err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return 0, 0, fmt.Errorf("%s is not a regular file", hostPath)
	}
	return st.Dev, st.Ino, nil
}

func newLibFile(path, hostPath string) (LibFile, error) {
	dev, ino, err := statFile(hostPath)
	if err != nil {
		return LibFile{}, err
	}
	return LibFile{Path: path, HostPath: hostPath, Dev: dev, Ino: ino, BuildID: elfnote.BuildID(hostPath),
		Key: fileKey{kernelDev(dev), ino}}, nil
}

// explicitLibCUDA opens the files given with --libcuda.
func explicitLibCUDA(paths []string) ([]LibFile, error) {
	var out []LibFile
	seen := map[[2]uint64]bool{}
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, err
		}
		lf, err := newLibFile(abs, abs)
		if err != nil {
			return nil, fmt.Errorf("--libcuda %s: %w", p, err)
		}
		if k := [2]uint64{lf.Dev, lf.Ino}; !seen[k] {
			seen[k] = true
			out = append(out, lf)
		}
	}
	return out, nil
}

// mapLine is one mapping of a libcuda file in /proc/PID/maps.
type mapLine struct {
	Start, End uint64
	Key        fileKey
	Path       string
}

// libCUDAMaps lists a process's mappings of libcuda files (nil when the
// process is gone).
func libCUDAMaps(procRoot string, pid uint32) []mapLine {
	f, err := os.Open(filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10), "maps"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []mapLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m, ok := parseMapLine(sc.Text()); ok && isLibCUDA(strings.TrimSuffix(m.Path, " (deleted)")) {
			out = append(out, m)
		}
	}
	return out
}

// parseMapLine reads "start-end perms offset major:minor inode path".
func parseMapLine(line string) (mapLine, bool) {
	f := strings.Fields(line)
	if len(f) < 6 || !strings.HasPrefix(f[5], "/") {
		return mapLine{}, false
	}
	lo, hi, ok1 := strings.Cut(f[0], "-")
	maj, minor, ok2 := strings.Cut(f[3], ":")
	if !ok1 || !ok2 {
		return mapLine{}, false
	}
	var m mapLine
	var err [5]error
	m.Start, err[0] = strconv.ParseUint(lo, 16, 64)
	m.End, err[1] = strconv.ParseUint(hi, 16, 64)
	ma, err2 := strconv.ParseUint(maj, 16, 32)
	mi, err3 := strconv.ParseUint(minor, 16, 32)
	m.Key.Ino, err[4] = strconv.ParseUint(f[4], 10, 64)
	err[2], err[3] = err2, err3
	for _, e := range err {
		if e != nil {
			return mapLine{}, false
		}
	}
	m.Key.Dev = uint32(ma)<<20 | uint32(mi)
	m.Path = strings.Join(f[5:], " ")
	return m, true
}

// openMapped opens the file of a process's mapping: by its own path when
// the recorder sees the same file there (it outlives the process), else
// through the process's root (a container), else through
// /proc/PID/map_files (a file deleted or replaced since it was mapped).
func openMapped(procRoot string, pid uint32, m mapLine) (LibFile, error) {
	dir := filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10))
	candidates := []string{m.Path, filepath.Join(dir, "root", m.Path),
		filepath.Join(dir, "map_files", fmt.Sprintf("%x-%x", m.Start, m.End))}
	var firstErr error
	for i, host := range candidates {
		lf, err := newLibFile(m.Path, host)
		if err == nil && (lf.Key == m.Key || i == len(candidates)-1) {
			lf.Key = m.Key
			return lf, nil
		}
		if firstErr == nil && err != nil {
			firstErr = err
		}
	}
	return LibFile{}, fmt.Errorf("open %s mapped by pid %d: %w", m.Path, pid, firstErr)
}

// scanLibCUDA reads the libcuda mappings of the given processes (with
// all, of every process), by pid.
func scanLibCUDA(procRoot string, pids []uint32, all bool) map[uint32][]mapLine {
	if all {
		ents, _ := os.ReadDir(procRoot)
		for _, ent := range ents {
			if pid, err := strconv.ParseUint(ent.Name(), 10, 32); err == nil {
				pids = append(pids, uint32(pid))
			}
		}
	}
	out := map[uint32][]mapLine{}
	for _, pid := range pids {
		if ms := libCUDAMaps(procRoot, pid); len(ms) > 0 {
			out[pid] = ms
		}
	}
	return out
}

// exportedFuncs reads an ELF file's defined dynamic function symbols and
// their file offsets (what a uprobe attaches at).
func exportedFuncs(path string) (map[string]uint64, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read ELF %s: %w", path, err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		return nil, fmt.Errorf("dynamic symbols of %s: %w", path, err)
	}
	out := map[string]uint64{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Section == elf.SHN_UNDEF || s.Value == 0 {
			continue
		}
		off := s.Value
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && p.Vaddr <= s.Value && s.Value < p.Vaddr+p.Memsz {
				off = s.Value - p.Vaddr + p.Off
				break
			}
		}
		// Versioned ELF symbols (name@@VER) appear under their plain name.
		name, _, _ := strings.Cut(s.Name, "@")
		out[name] = off
	}
	return out, nil
}

// Coverage compares a library's exports with the symbol table: which rows
// it exports (with their offsets), which it lacks, and which exported names
// of the memory and context families have no row (cuda.Unhooked).
type Coverage struct {
	Attach  map[int]uint64 // symbol id -> file offset
	Absent  []string
	Unknown []string
}

// CoverageOf reads the exports of a libcuda file.
func CoverageOf(path string) (Coverage, error) {
	funcs, err := exportedFuncs(path)
	if err != nil {
		return Coverage{}, err
	}
	c := Coverage{Attach: map[int]uint64{}}
	for id, s := range cuda.Symbols {
		if off, ok := funcs[s.Name]; ok {
			c.Attach[id] = off
		} else {
			c.Absent = append(c.Absent, s.Name)
		}
	}
	for name := range funcs {
		if _, _, ok := cuda.Lookup(name); ok {
			continue
		}
		if cuda.Unhooked(name) {
			c.Unknown = append(c.Unknown, name)
		}
	}
	sort.Strings(c.Unknown)
	return c, nil
}
