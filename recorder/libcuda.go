package recorder

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/internal/elfnote"
)

// ErrNoLibCUDA: no libcuda could be found to attach to.
var ErrNoLibCUDA = errors.New("no libcuda found: pass --libcuda PATH (the driver's libcuda.so.1)")

// LibFile is one libcuda file to attach to. Files are told apart by device
// and inode: the same library seen from several containers is attached
// once.
type LibFile struct {
	Path     string // as the process that maps it names it
	HostPath string // openable by the recorder (through /proc/PID/root)
	Dev, Ino uint64
	BuildID  string
}

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
	return LibFile{Path: path, HostPath: hostPath, Dev: dev, Ino: ino, BuildID: elfnote.BuildID(hostPath)}, nil
}

// mappedLibCUDA lists the libcuda files mapped by running processes,
// resolved through /proc/PID/root so libraries inside containers are found,
// with the pids that map each.
func mappedLibCUDA(procRoot string) (map[[2]uint64]LibFile, map[uint32]bool) {
	files := map[[2]uint64]LibFile{}
	pids := map[uint32]bool{}
	ents, _ := os.ReadDir(procRoot)
	for _, ent := range ents {
		pid, err := strconv.ParseUint(ent.Name(), 10, 32)
		if err != nil {
			continue
		}
		lfs, mapped := libCUDAOf(procRoot, uint32(pid))
		if mapped {
			pids[uint32(pid)] = true
		}
		for _, lf := range lfs {
			key := [2]uint64{lf.Dev, lf.Ino}
			if _, ok := files[key]; !ok {
				files[key] = lf
			}
		}
	}
	return files, pids
}

// libCUDAOf returns the libcuda files a process maps, opened through its
// root (it may live in a container), and whether it maps any at all (a
// file that cannot be opened still counts as mapped).
func libCUDAOf(procRoot string, pid uint32) (files []LibFile, mapped bool) {
	dir := filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10))
	paths := mappedPaths(filepath.Join(dir, "maps"), isLibCUDA)
	for _, path := range paths {
		if lf, err := newLibFile(path, filepath.Join(dir, "root", path)); err == nil {
			files = append(files, lf)
		}
	}
	return files, len(paths) > 0
}

// mappedPaths returns the distinct file paths in a maps file that match.
func mappedPaths(mapsPath string, match func(string) bool) []string {
	f, err := os.Open(mapsPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	seen := map[string]bool{}
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 {
			continue
		}
		path := strings.Join(fields[5:], " ")
		if strings.HasPrefix(path, "/") && match(path) && !seen[path] {
			seen[path] = true
			out = append(out, path)
		}
	}
	return out
}

// loaderCache asks ldconfig where the loader would find libcuda.so.1.
func loaderCache() []string {
	out, err := exec.Command("ldconfig", "-p").Output()
	if err != nil {
		return nil
	}
	var paths []string
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "libcuda.so.1 ") || !strings.Contains(line, "x86-64") {
			continue
		}
		if _, p, ok := strings.Cut(line, "=> "); ok {
			paths = append(paths, strings.TrimSpace(p))
		}
	}
	return paths
}

// FindOptions say where to look for libcuda.
type FindOptions struct {
	// Explicit paths given with --libcuda; nothing else is searched.
	Explicit []string
	// LibraryPath is the workload's LD_LIBRARY_PATH (spawn mode).
	LibraryPath string
	// PIDs are the processes to record when they already run (--pid: the
	// target and its descendants); their maps are searched first.
	PIDs []uint32
	// All: every process's maps are searched (--all).
	All bool
	// ProcRoot is /proc (a test may point elsewhere).
	ProcRoot string
}

// FindLibCUDA returns the libcuda files to attach to, in order of
// relevance: the explicit ones only; else those the recorded processes
// map (--pid), every mapped one (--all), the one the workload's
// LD_LIBRARY_PATH or the loader cache would load; and, when none of those
// exists, those other running processes map. Files that appear later are
// attached by the recorder's rescan.
func FindLibCUDA(o FindOptions) ([]LibFile, error) {
	if o.ProcRoot == "" {
		o.ProcRoot = "/proc"
	}
	byKey := map[[2]uint64]LibFile{}
	add := func(lf LibFile) {
		k := [2]uint64{lf.Dev, lf.Ino}
		if _, ok := byKey[k]; !ok {
			byKey[k] = lf
		}
	}
	if len(o.Explicit) > 0 {
		for _, p := range o.Explicit {
			abs, err := filepath.Abs(p)
			if err != nil {
				return nil, err
			}
			lf, err := newLibFile(abs, abs)
			if err != nil {
				return nil, fmt.Errorf("--libcuda %s: %w", p, err)
			}
			add(lf)
		}
		return sorted(byKey), nil
	}
	for _, pid := range o.PIDs {
		lfs, _ := libCUDAOf(o.ProcRoot, pid)
		for _, lf := range lfs {
			add(lf)
		}
	}
	if o.All {
		mapped, _ := mappedLibCUDA(o.ProcRoot)
		for _, lf := range mapped {
			add(lf)
		}
	}
	for _, dir := range filepath.SplitList(o.LibraryPath) {
		p := filepath.Join(dir, "libcuda.so.1")
		if lf, err := newLibFile(p, p); err == nil {
			add(lf)
			break
		}
	}
	for _, p := range loaderCache() {
		if lf, err := newLibFile(p, p); err == nil {
			add(lf)
		}
	}
	if len(byKey) == 0 {
		// Last resort: what the machine's other CUDA processes use.
		mapped, _ := mappedLibCUDA(o.ProcRoot)
		for _, lf := range mapped {
			add(lf)
		}
	}
	if len(byKey) == 0 {
		return nil, ErrNoLibCUDA
	}
	return sorted(byKey), nil
}

func sorted(m map[[2]uint64]LibFile) []LibFile {
	out := make([]LibFile, 0, len(m))
	for _, lf := range m {
		out = append(out, lf)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].HostPath < out[j].HostPath })
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
// belong to a family of the table but have no row.
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
		if _, ok := cuda.FamilyOf(name); ok {
			c.Unknown = append(c.Unknown, name)
		}
	}
	sort.Strings(c.Unknown)
	return c, nil
}
