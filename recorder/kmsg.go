package recorder

import (
	"errors"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"github.com/retrivium/forensic/store"
)

// openKmsg opens /dev/kmsg positioned at its end: only lines written
// during the run are read. The descriptor is non-blocking so that the Go
// poller parks the reader and Close wakes it.
func openKmsg(path string) (*os.File, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if _, err := syscall.Seek(fd, 0, 2); err != nil { // SEEK_END: skip old lines
		syscall.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

var xidRE = regexp.MustCompile(`Xid \([^)]*\): (\d+)`)

// parseKmsg parses one /dev/kmsg record ("prio,seq,usec,flags;text\n"
// plus continuation lines) and keeps it only if it is an NVIDIA driver line
// (NVRM) or an Xid. The kernel stamps records with its local clock in
// microseconds, which tracks CLOCK_MONOTONIC (see README).
func parseKmsg(rec []byte) (store.KernelLog, bool) {
	head, body, ok := strings.Cut(string(rec), ";")
	if !ok {
		return store.KernelLog{}, false
	}
	text, _, _ := strings.Cut(body, "\n")
	if !strings.Contains(text, "NVRM") && !strings.Contains(text, "Xid") {
		return store.KernelLog{}, false
	}
	f := strings.Split(head, ",")
	if len(f) < 3 {
		return store.KernelLog{}, false
	}
	prio, err1 := strconv.Atoi(f[0])
	seq, err2 := strconv.ParseUint(f[1], 10, 64)
	usec, err3 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return store.KernelLog{}, false
	}
	l := store.KernelLog{Time: usec * 1000, Seq: seq, Priority: prio & 7, Text: text}
	if m := xidRE.FindStringSubmatch(text); m != nil {
		if x, err := strconv.Atoi(m[1]); err == nil {
			l.Xid = &x
		}
	}
	return l, true
}

// readKmsg delivers NVRM/Xid lines until f is closed.
func readKmsg(f *os.File, out func(store.KernelLog)) {
	buf := make([]byte, 8192)
	for {
		n, err := f.Read(buf)
		if err != nil {
			if errors.Is(err, syscall.EPIPE) {
				continue // records were overwritten before we read them
			}
			return
		}
		if l, ok := parseKmsg(buf[:n]); ok {
			out(l)
		}
	}
}
