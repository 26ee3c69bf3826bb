package recorder

import (
	"errors"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

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
// (NVRM) or an Xid. Time is the kernel's printk clock (see calibrateKmsg).
func parseKmsg(rec []byte) (store.KernelLog, bool) {
	h, ok := splitKmsg(rec)
	if !ok || !strings.Contains(h.text, "NVRM") && !strings.Contains(h.text, "Xid") {
		return store.KernelLog{}, false
	}
	prio, err1 := strconv.Atoi(h.fields[0])
	seq, err2 := strconv.ParseUint(h.fields[1], 10, 64)
	if err1 != nil || err2 != nil {
		return store.KernelLog{}, false
	}
	l := store.KernelLog{Time: h.ns, Seq: seq, Priority: prio & 7, Text: h.text}
	if m := xidRE.FindStringSubmatch(h.text); m != nil {
		if x, err := strconv.Atoi(m[1]); err == nil {
			l.Xid = &x
		}
	}
	return l, true
}

// kmsgRecord is a /dev/kmsg record split at its header.
type kmsgRecord struct {
	fields []string // prio, seq, usec, flags...
	ns     int64    // printk time
	text   string   // first line of the message
}

func splitKmsg(rec []byte) (kmsgRecord, bool) {
	head, body, ok := strings.Cut(string(rec), ";")
	if !ok {
		return kmsgRecord{}, false
	}
	f := strings.Split(head, ",")
	if len(f) < 3 {
		return kmsgRecord{}, false
	}
	usec, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return kmsgRecord{}, false
	}
	text, _, _ := strings.Cut(body, "\n")
	return kmsgRecord{fields: f, ns: usec * 1000, text: text}, true
}

// kmsgHead returns the printk timestamp (ns) and text of a record.
func kmsgHead(rec []byte) (int64, string, bool) {
	h, ok := splitKmsg(rec)
	return h.ns, h.text, ok
}

// calibrateKmsg measures the offset of the kernel log's clock from the run
// clock. The printk clock is the kernel's local clock, which drifts against
// CLOCK_MONOTONIC by milliseconds over hours (measured here: +0.8 ms, then
// -1.8 ms two hours later), too much to place an Xid between two calls. So
// forensic writes one line to the kernel log, noting the run clock around
// the write, and reads it back through f (already open at the log's end):
// offset = printk time - run time, within half the write's duration. Lines
// read before it are returned, to be converted once the offset is known.
func calibrateKmsg(f *os.File, note string) (offset, uncertainty int64, before [][]byte, err error) {
	w, err := os.OpenFile("/dev/kmsg", os.O_WRONLY, 0)
	if err != nil {
		return 0, 0, nil, err
	}
	t0 := now()
	_, err = w.WriteString(note + "\n")
	t1 := now()
	w.Close()
	if err != nil {
		return 0, 0, nil, err
	}
	f.SetReadDeadline(time.Now().Add(2 * time.Second))
	defer f.SetReadDeadline(time.Time{})
	buf := make([]byte, 8192)
	for {
		n, err := f.Read(buf)
		if err != nil {
			if errors.Is(err, syscall.EPIPE) {
				continue
			}
			return 0, 0, before, err
		}
		if ts, text, ok := kmsgHead(buf[:n]); ok && strings.Contains(text, note) {
			return ts - (t0+t1)/2, (t1 - t0 + 1) / 2, before, nil
		}
		before = append(before, append([]byte(nil), buf[:n]...))
	}
}

// readKmsg delivers NVRM/Xid lines, with times converted to the run clock,
// until f is closed.
func readKmsg(f *os.File, offset int64, out func(store.KernelLog)) {
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
			l.Printk = l.Time
			l.Time -= offset
			out(l)
		}
	}
}
