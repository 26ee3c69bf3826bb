package recorder

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// A libcuda inside a container is opened through /proc/PID/root, the same
// file mapped by two processes has one key, other libraries are not
// libcuda, and a file no longer at its path is opened through map_files.
func TestMappedLibCUDAThroughProcRoot(t *testing.T) {
	proc := t.TempDir()
	for _, pid := range []string{"100", "200", "300"} {
		os.MkdirAll(filepath.Join(proc, pid, "root", "usr", "lib"), 0o755)
		os.MkdirAll(filepath.Join(proc, pid, "map_files"), 0o755)
	}
	// Process 100's container has its own libcuda; process 200 shares it
	// through a hard link (same file); process 300's was deleted and is
	// reachable only through map_files.
	p100 := filepath.Join(proc, "100", "root", "usr", "lib", "libcuda.so.1")
	os.WriteFile(p100, []byte("\x7fELF not really"), 0o644)
	if err := os.Link(p100, filepath.Join(proc, "200", "root", "usr", "lib", "libcuda.so.1")); err != nil {
		t.Fatal(err)
	}
	p300 := filepath.Join(proc, "300", "map_files", "7f0000000000-7f0000001000")
	os.WriteFile(p300, []byte("\x7fELF another"), 0o644)
	line := func(path string) string {
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("7f0000000000-7f0000001000 r-xp 00000000 %02x:%02x %d ", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	}
	for pid, lib := range map[string]string{"100": p100, "200": p100, "300": p300} {
		maps := line(lib) + "/usr/lib/libcuda.so.1"
		if pid == "300" {
			maps += " (deleted)"
		}
		maps += "\n7f0000002000-7f0000003000 r-xp 00000000 08:01 99 /usr/lib/libc.so.6\n"
		os.WriteFile(filepath.Join(proc, pid, "maps"), []byte(maps), 0o644)
	}
	scan := scanLibCUDA(proc, nil, true)
	if len(scan) != 3 || len(scan[100]) != 1 || len(scan[200]) != 1 || scan[100][0].Key != scan[200][0].Key {
		t.Fatalf("scan = %+v: want one libcuda line per process, the same file for 100 and 200", scan)
	}
	lf, err := openMapped(proc, 100, scan[100][0])
	if err != nil || lf.Path != "/usr/lib/libcuda.so.1" || lf.HostPath != p100 {
		t.Errorf("openMapped(100) = %+v, %v: want the process path and a host path through /proc/PID/root", lf, err)
	}
	lf, err = openMapped(proc, 300, scan[300][0])
	if err != nil || lf.HostPath != p300 || lf.Key != scan[300][0].Key {
		t.Errorf("openMapped(300) = %+v, %v: want the deleted file through map_files", lf, err)
	}
	if only := scanLibCUDA(proc, []uint32{200}, false); len(only) != 1 || only[200] == nil {
		t.Errorf("scan of pid 200 alone = %+v", only)
	}
}

func TestFilterEnvAllowlist(t *testing.T) {
	got := FilterEnv([]string{"CUDA_VISIBLE_DEVICES=1,0", "AWS_SECRET_ACCESS_KEY=hunter2", "PATH=/bin",
		"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "HF_TOKEN=abc", "NVIDIA_VISIBLE_DEVICES=all"})
	want := map[string]string{"CUDA_VISIBLE_DEVICES": "1,0", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
		"NVIDIA_VISIBLE_DEVICES": "all"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("FilterEnv = %v, want %v", got, want)
	}
}

func TestParseKmsg(t *testing.T) {
	l, ok := parseKmsg([]byte("4,1234,5000123,-;NVRM: Xid (PCI:0000:41:00): 79, pid=1, GPU has fallen off the bus.\n SUBSYSTEM=pci\n"))
	if !ok || l.Seq != 1234 || l.Time != 5000123000 || l.Xid == nil || *l.Xid != 79 || l.Priority != 4 {
		t.Fatalf("parseKmsg = %+v, %v", l, ok)
	}
	if _, ok := parseKmsg([]byte("6,1,2,-;usb 1-1: new device\n")); ok {
		t.Fatal("kept a line that is not NVIDIA's")
	}
	if _, ok := parseKmsg([]byte("garbage")); ok {
		t.Fatal("kept garbage")
	}
}

func TestThinnerKeepsLandmarks(t *testing.T) {
	th := &thinner{budget: 4}
	kept := map[int]string{}
	for i := 0; i < 40; i++ {
		if i == 25 {
			th.failure()
		}
		if ok, why := th.keep(i == 0); ok {
			kept[i] = why
		}
	}
	if kept[0] != "first" || kept[25] != "after-failure" {
		t.Fatalf("kept = %v: want the first round and the one after the failure", kept)
	}
	if len(kept) >= 30 {
		t.Fatalf("kept %d of 40 rounds with a budget of 4: no thinning", len(kept))
	}
	th = &thinner{} // no budget: keep everything
	for i := 0; i < 10; i++ {
		if ok, _ := th.keep(i == 0); !ok {
			t.Fatal("thinned without a budget")
		}
	}
}

// A build id read that failed (a /proc/PID/root path whose process exited
// between the stat and the open) is not remembered as "no build id": the
// same file read later, by another path, gives its id.
func TestBuildIDCacheForgetsFailedReads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lib.so")
	if err := os.WriteFile(path, []byte("not read"), 0o644); err != nil {
		t.Fatal(err)
	}
	fail := true
	c := newBuildIDCache()
	c.read = func(string) (string, error) {
		if fail {
			return "", os.ErrNotExist
		}
		return "abcd", nil
	}
	if id := c.get(path); id != "" {
		t.Fatalf("failed read gave %q", id)
	}
	fail = false
	if id := c.get(path); id != "abcd" {
		t.Fatalf("after a failed read: %q, want the file's id", id)
	}
	fail = true
	if id := c.get(path); id != "abcd" {
		t.Fatalf("a successful read is remembered: got %q", id)
	}
}

// The environment of a process that has begun to exit is not taken from
// /proc: the read can come back short while its memory is torn down, and a
// short read would drop variables (CUDA_VISIBLE_DEVICES) the record needs.
func TestReadProcSkipsEnvOfExitingProcess(t *testing.T) {
	for _, tt := range []struct {
		name, stat string
		want       bool
	}{
		{"running", "42 (app) R 1 42 42 0 -1 4194560 0 0", true},
		{"exiting", "42 (app) R 1 42 42 0 -1 4194564 0 0", false}, // PF_EXITING (0x4) set
		{"zombie", "42 (a) b) Z 1 42 42 0 -1 4194560 0 0", false},
		{"gone", "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "42")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(dir, "environ"), []byte("CUDA_VISIBLE_DEVICES=1\x00HOME=/root\x00"), 0o644)
			if tt.stat != "" {
				os.WriteFile(filepath.Join(dir, "stat"), []byte(tt.stat), 0o644)
			}
			pi := readProc(root, 42)
			if pi.EnvRead != tt.want || tt.want && pi.Env["CUDA_VISIBLE_DEVICES"] != "1" {
				t.Errorf("EnvRead %v, env %v; want read=%v", pi.EnvRead, pi.Env, tt.want)
			}
		})
	}
}

// The processes of a --pid target's tree that are running when recording
// starts get records; a descendant that exits between the scan of /proc
// and the read of its own files gets none (and is not tracked), rather
// than a record with no parent, which the report would take for a job of
// its own.
func TestRunningTreeLeavesOutDescendantsGoneBeforeTheirRead(t *testing.T) {
	proc := t.TempDir()
	for pid, ppid := range map[string]string{"10": "1", "11": "10", "12": "10", "13": "11"} {
		os.MkdirAll(filepath.Join(proc, pid), 0o755)
		os.WriteFile(filepath.Join(proc, pid, "stat"), []byte(pid+" (sh) S "+ppid+" 0 0"), 0o644)
	}
	gone := uint32(12)
	read := func(root string, pid uint32) procInfo {
		if pid == gone {
			return procInfo{} // exited since the scan
		}
		return readProc(root, pid)
	}
	got := runningTree(proc, 10, 5, read)
	var pids []uint32
	for _, p := range got {
		pids = append(pids, p.PID)
		if p.PID != 10 && p.PPID == 0 {
			t.Errorf("descendant %d has no parent", p.PID)
		}
		if p.Start != 5 {
			t.Errorf("process %d starts at %d, want 5", p.PID, p.Start)
		}
	}
	slices.Sort(pids)
	if !slices.Equal(pids, []uint32{10, 11, 13}) {
		t.Errorf("records for %v, want 10, 11 and 13 (12 exited before its read)", pids)
	}
}
