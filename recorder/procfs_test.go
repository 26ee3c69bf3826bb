package recorder

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// A libcuda inside a container is opened through /proc/PID/root, and the
// same file seen by two processes is attached once.
func TestMappedLibCUDAThroughProcRoot(t *testing.T) {
	proc := t.TempDir()
	lib := []byte("\x7fELF not really")
	for _, pid := range []string{"100", "200"} {
		dir := filepath.Join(proc, pid)
		os.MkdirAll(filepath.Join(dir, "root", "usr", "lib"), 0o755)
		os.WriteFile(filepath.Join(dir, "maps"), []byte(
			"7f0000000000-7f0000001000 r-xp 00000000 08:01 1234 /usr/lib/libcuda.so.1\n"+
				"7f0000002000-7f0000003000 r-xp 00000000 08:01 99 /usr/lib/libc.so.6\n"), 0o644)
	}
	// Process 100's container has its own libcuda; process 200 shares it
	// through a hard link (same file).
	p100 := filepath.Join(proc, "100", "root", "usr", "lib", "libcuda.so.1")
	os.WriteFile(p100, lib, 0o644)
	if err := os.Link(p100, filepath.Join(proc, "200", "root", "usr", "lib", "libcuda.so.1")); err != nil {
		t.Fatal(err)
	}
	files, pids := mappedLibCUDA(proc)
	if len(files) != 1 {
		t.Fatalf("%d files, want one (same inode)", len(files))
	}
	for _, lf := range files {
		if lf.Path != "/usr/lib/libcuda.so.1" || !strings.HasPrefix(lf.HostPath, proc+"/") ||
			!strings.HasSuffix(lf.HostPath, "/root/usr/lib/libcuda.so.1") {
			t.Errorf("file %+v: want the process path and a host path through /proc/PID/root", lf)
		}
	}
	if !reflect.DeepEqual(pids, map[uint32]bool{100: true, 200: true}) {
		t.Errorf("pids = %v", pids)
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
