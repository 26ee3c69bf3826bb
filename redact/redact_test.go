package redact

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retrivium/forensic/store"
)

// learned returns a Redactor that has read doc (a JSON text).
func learned(t *testing.T, doc string) *Redactor {
	t.Helper()
	v, err := decode([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	r := New()
	r.learn(v, "")
	r.replacers()
	return r
}

// Arguments, user paths and their directories get placeholders, the same
// one wherever they appear; system paths, the program's bare name and
// the environment allowlist's values are kept; host names and ids are
// hashed, the same way every time.
func TestRedactText(t *testing.T) {
	r := learned(t, `{"hostname":"gpu-node-17","identity":{"machine_id":"3d1219c7c4c5404aaa1f6d2a48adfda4"},
		"processes":[{"args":["python3","/home/alice/proj/train.py","--token=s3cr3t-value","0"],
		"exe":"/usr/bin/python3.11","cgroup":"/user.slice/user-1000.slice/session-2.scope",
		"maps":[{"path":"/home/alice/proj/libpriv.so","host_path":"/proc/42/root/home/alice/proj/libpriv.so"},
		        {"path":"build/libnvidia-ml.so.1"}]}]}`)
	ph := func(orig string) string { return r.exact[orig] }
	for _, tt := range []struct {
		name        string
		in          string
		inArgs, env bool
		want        string // "" when only a change is asserted
	}{
		{"a user path", "/home/alice/proj/train.py", false, false, ph("/home/alice/proj/train.py")},
		{"the same path in an argument list", "/home/alice/proj/train.py", true, false, ph("/home/alice/proj/train.py")},
		{"an argument", "--token=s3cr3t-value", true, false, r.args["--token=s3cr3t-value"]},
		{"a short argument in the list", "0", true, false, r.args["0"]},
		{"a short argument elsewhere is not touched", "0", false, false, "0"},
		{"the program's bare name", "python3", true, false, "python3"},
		{"a system path", "/usr/bin/python3.11", false, false, "/usr/bin/python3.11"},
		{"a path through the process's root", "/proc/42/root/home/alice/proj/libpriv.so", false, false,
			"/proc/42/root/" + ph("/home/alice/proj/libpriv.so")},
		{"a relative path in a path field", "build/libnvidia-ml.so.1", false, false, ph("build/libnvidia-ml.so.1")},
		{"a directory inside a message", "open /home/alice/proj/data.bin: permission denied", false, false,
			"open " + ph("/home/alice/proj") + "/data.bin: permission denied"},
		{"an argument inside a message", "bad flag --token=s3cr3t-value", false, false,
			"bad flag " + r.args["--token=s3cr3t-value"]},
		{"an environment value is read by the analysis", "0", false, true, "0"},
		{"a cgroup path", "/user.slice/user-1000.slice/session-2.scope", false, false, ""},
		{"the host name", "gpu-node-17", false, false, ""},
		{"the machine id", "3d1219c7c4c5404aaa1f6d2a48adfda4", false, false, ""},
	} {
		got := r.text(tt.in, tt.inArgs, tt.env)
		if (tt.want == "" && got == tt.in) || (tt.want != "" && got != tt.want) {
			t.Errorf("%s: %q -> %q, want %q (\"\": any change)", tt.name, tt.in, got, tt.want)
		}
	}
	for orig, p := range r.exact {
		if !strings.HasPrefix(p, "<path-") && !strings.HasPrefix(p, "<dir-") && !strings.HasPrefix(p, "host-") && len(p) != 32 {
			t.Errorf("%q -> %q: not a placeholder", orig, p)
		}
	}
	again := learned(t, `{"hostname":"gpu-node-17"}`)
	if a, b := r.text("gpu-node-17", false, false), again.text("gpu-node-17", false, false); a != b {
		t.Errorf("one host hashed to %q and %q", a, b)
	}
	if id := r.text("3d1219c7c4c5404aaa1f6d2a48adfda4", false, false); len(id) != 32 {
		t.Errorf("machine id hashed to %q, want 32 hex digits", id)
	}
}

// testRun is a run record with something to redact.
func testRun() store.RunInfo {
	return store.RunInfo{ID: "r1", Clock: store.ClockName, WallStart: time.Unix(1, 0).UTC(), Hostname: "gpu-node-17",
		Mode: "spawn", Command: []string{"/home/alice/proj/job", "--secret-arg=xyz123"}, KeepStackBytes: true,
		Identity: &store.Identity{Hostname: "gpu-node-17", MachineID: "3d1219c7c4c5404aaa1f6d2a48adfda4"}}
}

// A redacted copy holds no argument, user path or host name of the
// original, no raw stack record, and the same numbers; the original is
// unchanged, and an existing copy is never replaced.
func TestFileRedactsACopy(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "run.db"), filepath.Join(dir, "copy.db")
	w, err := store.Create(src, store.CreateOptions{}, testRun(), []string{"cuMemAlloc_v2"})
	if err != nil {
		t.Fatal(err)
	}
	big := uint64(1<<63 + 12345) // beyond float64's exact integers
	uid := uint32(1001)
	b := &store.Batch{
		Processes: []store.Process{{PID: 7, Start: 1, Exe: "/home/alice/proj/job", Args: []string{"job", "--secret-arg=xyz123"},
			Env: map[string]string{"CUDA_VISIBLE_DEVICES": "0"}}},
		Samples:  []store.Sample{{Seq: 1, GPU: store.GPURef{UUID: "GPU-1"}, Kind: "framebuffer", Scope: "device", Total: &big}},
		Captures: []store.Capture{{PID: 7, TID: 7, Time: 5, Stack: []byte("stack bytes: xyz123")}},
		Neighbours: []store.Neighbour{{PID: 99, Time: 3, Comm: "serve", UID: &uid,
			Args: []string{"serve", "--token=neighbour-secret", "/home/bob/serve.cfg"}, User: "bob", Cgroup: "/user.slice/bob"}},
		PyCodes: []store.PyCode{{PID: 7, Code: 1, Time: 2, Filename: store.PyString{Data: []byte("/home/alice/proj/m.py")}}},
		Named: []store.NamedStack{{PID: 7, TID: 7, Time: 5, Stop: "no-file", Detail: "/home/alice/proj/libpriv.so: gone",
			Frames:   []store.NamedFrame{{Addr: 1, Via: "registers", Path: "/home/alice/proj/libpriv.so", Function: "handle"}},
			PyFrames: []store.NamedPyFrame{{Function: "main", File: "/home/alice/proj/m.py", Line: 3}}}},
	}
	if err := w.Commit(b); err != nil {
		t.Fatal(err)
	}
	w.Close()
	before := digest(t, src)
	sum, err := File(src, dst)
	if err != nil {
		t.Fatal(err)
	}
	if digest(t, src) != before {
		t.Error("the original changed")
	}
	if sum.RawStacks != 2 || sum.Args == 0 || sum.Paths == 0 || sum.Hosts != 2 || sum.Users != 1 || len(sum.LeftOut) != 0 {
		t.Errorf("summary %+v", sum)
	}
	raw, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"xyz123", "alice", "gpu-node-17", "3d1219c7c4c5404aaa1f6d2a48adfda4", "stack bytes",
		"neighbour-secret", "bob"} {
		if bytes.Contains(raw, []byte(s)) {
			t.Errorf("the copy holds %q", s)
		}
	}
	rd, err := store.Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if c, err := rd.Capture(7, 7, 5); c != nil || err != nil {
		t.Errorf("raw capture in the copy: %+v, %v", c, err)
	}
	n, err := rd.NamedStack(7, 7, 5)
	if err != nil || n == nil || n.Frames[0].Function != "handle" || !strings.HasPrefix(n.Frames[0].Path, "<path-") ||
		n.Detail != n.Frames[0].Path+": gone" || !strings.HasPrefix(n.PyFrames[0].File, "<path-") || n.PyFrames[0].Line != 3 {
		t.Errorf("named stack in the copy: %+v, %v", n, err)
	}
	if rd.Run().KeepStackBytes || rd.Run().Hostname == "gpu-node-17" {
		t.Errorf("run record %+v", rd.Run())
	}
	// A neighbour keeps what says whose it was, each as a placeholder.
	ns, err := rd.Neighbours()
	if err != nil || len(ns) != 1 || ns[0].User != "<user-1>" || ns[0].UID == nil || *ns[0].UID != uid || ns[0].Args[0] != "serve" ||
		!strings.HasPrefix(ns[0].Args[1], "<arg-") || !strings.HasPrefix(ns[0].Args[2], "<path-") {
		t.Errorf("neighbours in the copy: %+v, %v", ns, err)
	}
	var got []store.Sample
	rd.Samples(func(s *store.Sample) error { got = append(got, *s); return nil })
	if len(got) != 1 || got[0].Total == nil || *got[0].Total != big {
		t.Errorf("samples %+v: want the total %d unchanged", got, big)
	}
	if _, err := File(src, dst); !errors.Is(err, ErrExists) {
		t.Errorf("a second redaction to the same path: %v, want ErrExists", err)
	}
}

func digest(t *testing.T, p string) [32]byte {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// A recording of raw captures only (made before stacks were named by the
// recorder) keeps its stacks in the copy: named by the redaction, then
// redacted like the rest, and the raw bytes left out.
func TestFileNamesRawCaptures(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "old.db"), filepath.Join(dir, "copy.db")
	w, err := store.Create(src, store.CreateOptions{}, testRun(), []string{"cuMemAlloc_v2"})
	if err != nil {
		t.Fatal(err)
	}
	c := store.Capture{PID: 9, TID: 9, Time: 50, Failed: true, Regs: store.Regs{IP: 0x401000, SP: 0x7ffd0000},
		Stack: []byte("bob's request text"), Maps: []store.Mapping{{Start: 0x400000, End: 0x402000, Path: "/home/bob/app"}}}
	if err := w.Commit(&store.Batch{Captures: []store.Capture{c}}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	sum, err := File(src, dst)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Named != 1 || sum.RawStacks != 1 {
		t.Errorf("summary %+v: want 1 stack named, 1 raw record left out", sum)
	}
	rd, err := store.Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	n, err := rd.NamedStack(9, 9, 50)
	if err != nil || n == nil || len(n.Frames) == 0 || n.Frames[0].Addr != 0x401000 ||
		!strings.HasPrefix(n.Frames[0].Path, "<path-") || strings.Contains(n.Detail, "bob") {
		t.Fatalf("named stack in the copy: %+v, %v", n, err)
	}
	if raw, _ := rd.Capture(9, 9, 50); raw != nil {
		t.Error("the raw capture is in the copy")
	}
}
