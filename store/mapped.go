package store

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// bbolt reads run.db through a read-only shared mapping of the file, and
// every page it touches stays resident in this process: a pass over a
// large run (the reader) or a long recording (the writer) would grow with
// the file. releaseMapped lets those pages go. It needs nothing of bbolt's
// internals: the ranges are this process's mappings of the file as the
// kernel lists them (/proc/self/maps, matched by device and inode), so
// whatever bbolt maps, and however far the file has grown past it, nothing
// outside the file's mappings is touched.

// fileID names a file by device and inode, as /proc/self/maps does.
type fileID struct {
	major, minor uint32
	ino          uint64
}

// fileIDOf returns the id of a file from its stat, or the zero id (which
// matches no mapping) when the stat carries none.
func fileIDOf(st os.FileInfo) fileID {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}
	}
	return fileID{major: unix.Major(sys.Dev), minor: unix.Minor(sys.Dev), ino: sys.Ino}
}

// mapping is one line of /proc/self/maps: an address range and whether
// it may be written.
type mapping struct {
	start, end uintptr
	writable   bool
}

// mappingsOf lists this process's mappings of the file.
func mappingsOf(id fileID) []mapping {
	if id.ino == 0 {
		return nil
	}
	data, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil
	}
	var out []mapping
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if m, ok := parseMapsLine(sc.Bytes(), id); ok {
			out = append(out, m)
		}
	}
	return out
}

// parseMapsLine reads "start-end perms offset major:minor inode [path]"
// and reports whether the line maps the file.
func parseMapsLine(line []byte, id fileID) (mapping, bool) {
	f := bytes.Fields(line)
	if len(f) < 5 {
		return mapping{}, false
	}
	ino, err := strconv.ParseUint(string(f[4]), 10, 64)
	if err != nil || ino != id.ino {
		return mapping{}, false
	}
	maj, min, ok := bytes.Cut(f[3], []byte(":"))
	if !ok || !hexIs(maj, id.major) || !hexIs(min, id.minor) {
		return mapping{}, false
	}
	lo, hi, ok := bytes.Cut(f[0], []byte("-"))
	if !ok {
		return mapping{}, false
	}
	start, err1 := strconv.ParseUint(string(lo), 16, 64)
	end, err2 := strconv.ParseUint(string(hi), 16, 64)
	if err1 != nil || err2 != nil || end <= start || len(f[1]) < 2 {
		return mapping{}, false
	}
	return mapping{start: uintptr(start), end: uintptr(end), writable: f[1][1] == 'w'}, true
}

// hexIs reports whether a hexadecimal field holds v.
func hexIs(field []byte, v uint32) bool {
	n, err := strconv.ParseUint(string(field), 16, 32)
	return err == nil && uint32(n) == v
}

// releaseMapped releases the resident pages of this process's read-only
// mappings of the file. A writable mapping is left alone: its pages may
// hold changes that exist nowhere else.
func releaseMapped(id fileID) {
	for _, m := range mappingsOf(id) {
		if m.writable {
			continue
		}
		unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, unix.MADV_DONTNEED)
	}
}
