package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// Create with Force replaces a finished run or an empty file, and leaves
// everything else where it was, saying what it found.
func TestCreateForce(t *testing.T) {
	dir := t.TempDir()
	at := func(name string) string { return filepath.Join(dir, name) }
	writeRun(t, at("finished.db"))
	os.WriteFile(at("empty.db"), nil, 0o600)
	os.WriteFile(at("notes.txt"), []byte("precious notes\n"), 0o600)
	os.Mkdir(at("dir.db"), 0o700)
	os.WriteFile(at("dir.db/inside"), []byte("x"), 0o600)
	writeRun(t, at("target.db"))
	os.Symlink(at("target.db"), at("link.db"))
	if err := syscall.Mkfifo(at("fifo.db"), 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(at("foreign.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("widgets")); return err })
	db.Close()
	live, err := Create(at("live.db"), CreateOptions{}, testRun(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()

	tests := []struct {
		name     string
		want     error  // nil: replaced
		mentions string // what the refusal must name
	}{
		{"missing.db", nil, ""},
		{"finished.db", nil, ""},
		{"empty.db", nil, ""},
		{"notes.txt", ErrNotReplaced, "not a forensic run"},
		{"foreign.db", ErrNotReplaced, "another program"},
		{"dir.db", ErrNotReplaced, "a directory"},
		{"link.db", ErrNotReplaced, "symbolic link"},
		{"fifo.db", ErrNotReplaced, "not a regular file"},
		{"live.db", ErrNotReplaced, fmt.Sprintf("forensic pid %d is writing it", os.Getpid())},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := at(tt.name)
			before, _ := os.Lstat(path)
			w, err := Create(path, CreateOptions{Force: true}, testRun(), nil)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Create --force = %v, want a new run", err)
				}
				w.Close()
				r, err := Open(path)
				if err != nil {
					t.Fatalf("the new run does not open: %v", err)
				}
				r.Close()
				return
			}
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.mentions) {
				t.Fatalf("Create --force = %v, want %v naming %q", err, tt.want, tt.mentions)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
			after, lerr := os.Lstat(path)
			if lerr != nil || !os.SameFile(before, after) || after.Size() != before.Size() {
				t.Errorf("%s was changed: %v", tt.name, lerr)
			}
		})
	}
	if b, _ := os.ReadFile(at("dir.db/inside")); string(b) != "x" {
		t.Error("the directory's content was changed")
	}
}

func TestLockOf(t *testing.T) {
	const locks = `1: POSIX  ADVISORY  WRITE 11 fe:00:77 0 EOF
2: FLOCK  ADVISORY  READ 12 fe:00:77 0 EOF
2: -> FLOCK  ADVISORY  WRITE 99 fe:00:77 0 EOF
3: FLOCK  ADVISORY  WRITE 4242 103:0a:123456 0 EOF
`
	dev := func(major, minor uint32) uint64 { return uint64(major)<<8 | uint64(minor) }
	tests := []struct {
		dev, ino uint64
		pid      int
		kind     string
	}{
		{dev(0xfe, 0), 77, 12, "READ"},
		{dev(0x103, 0x0a), 123456, 4242, "WRITE"},
		{dev(0xfe, 0), 78, 0, ""},
	}
	for _, tt := range tests {
		if pid, kind := lockOf(locks, tt.dev, tt.ino); pid != tt.pid || kind != tt.kind {
			t.Errorf("lockOf(%x, %d) = %d %q, want %d %q", tt.dev, tt.ino, pid, kind, tt.pid, tt.kind)
		}
	}
}

// A run created for another owner is theirs and still private.
func TestCreateOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving a file away needs root")
	}
	path := filepath.Join(t.TempDir(), "run.db")
	w, err := Create(path, CreateOptions{Owner: &Owner{UID: 65534, GID: 65534}}, testRun(), nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	if sys.Uid != 65534 || sys.Gid != 65534 || st.Mode().Perm() != 0o600 {
		t.Errorf("run.db owned by %d:%d mode %v, want 65534:65534 0600", sys.Uid, sys.Gid, st.Mode().Perm())
	}
}
