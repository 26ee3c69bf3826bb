package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/retrivium/forensic/internal/e2eenv"
	"github.com/retrivium/forensic/report"
)

// The walking skeleton: the out-of-memory scenario recorded through the
// real BPF program and the simulated NVML, judged from run.db alone.
func TestOutOfMemoryScenario(t *testing.T) {
	w := newWorld(t)
	res := w.record(nil, filepath.Join(simDir, "scenarios", "weights_oom"))
	if res.code != 1 {
		t.Fatalf("forensic record exit %d, want the workload's 1; stderr:\n%s", res.code, res.stderr)
	}
	w.checkComplete(res.db)
	rep, raw := analyzeJSON(t, res.db)
	ff := rep.FirstFailure
	if ff == nil {
		t.Fatal("no first failure")
	}
	if ff.Symbol != "cuMemAlloc_v2" || ff.ResultName != "CUDA_ERROR_OUT_OF_MEMORY" || ff.Result != 2 || ff.Operation != "allocation" {
		t.Errorf("first failure = %s %s (%d) %s", ff.Symbol, ff.ResultName, ff.Result, ff.Operation)
	}
	if ff.Size == nil || *ff.Size != 1<<30 {
		t.Errorf("first failure size = %v, want 1 GiB", ff.Size)
	}
	if ff.GPU == nil || !strings.HasPrefix(*ff.GPU, "GPU-") {
		t.Errorf("first failure gpu = %v, want a UUID", ff.GPU)
	}
	if rep.Attribution != report.AttrAllocation || rep.Capacity == nil || *rep.Capacity != report.CapFBExhausted {
		t.Errorf("verdict = %s / %v, want allocation / framebuffer-exhausted", rep.Attribution, deref(rep.Capacity))
	}
	// The value compared against, and its source.
	var free *report.Evidence
	for i, e := range rep.Evidence {
		if e.Decisive && strings.HasPrefix(e.Field, "framebuffer free") {
			free = &rep.Evidence[i]
		}
	}
	if free == nil || free.Value == nil || *free.Value >= 1<<30 || !strings.Contains(free.Source, "nvmlDeviceGetMemoryInfo") {
		t.Errorf("framebuffer free evidence = %+v", free)
	}
	if rep.NearestSamples == nil || len(rep.NearestSamples.Before) == 0 {
		t.Error("no sample before the failure reported")
	}
	for _, key := range []string{"first_failure", "attribution", "capacity", "missing", "evidence", "memory_views", "failures"} {
		if _, ok := raw[key]; !ok {
			t.Errorf("--json lacks %q", key)
		}
	}
	if st := rep.FirstFailure.Stack; st == nil || len(st.Frames) == 0 || st.Frames[0].Function != "grow_kv_cache" {
		t.Errorf("failing function not named in the stack: %+v", st)
	}
}

// The mapping scenario: an IPC open fails for lack of BAR1 while the
// framebuffer has plenty of room. It must be a mapping problem, judged
// against BAR1, never framebuffer exhaustion.
func TestIPCMappingScenario(t *testing.T) {
	w := newWorld(t)
	res := w.record(nil, filepath.Join(simDir, "scenarios", "ipc_map"))
	if res.code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", res.code, res.stderr)
	}
	w.checkComplete(res.db)
	rep, _ := analyzeJSON(t, res.db)
	ff := rep.FirstFailure
	if ff == nil || ff.Symbol != "cuIpcOpenMemHandle_v2" || ff.ResultName != "CUDA_ERROR_MAP_FAILED" {
		t.Fatalf("first failure = %+v", ff)
	}
	if rep.Attribution != report.AttrMapping {
		t.Errorf("attribution = %s, want mapping", rep.Attribution)
	}
	if c := deref(rep.Capacity); strings.HasPrefix(c, "framebuffer") || c != string(report.CapBAR1Exhausted) {
		t.Errorf("capacity = %s, want bar1-exhausted (the 512 MiB export cannot fit 252 MiB of BAR1)", c)
	}
	if len(rep.Processes) != 2 {
		t.Errorf("%d processes recorded, want exporter and importer", len(rep.Processes))
	}
}

func deref(s *report.Capacity) string {
	if s == nil {
		return "<null>"
	}
	return string(*s)
}

// Bad input gets one line and a non-zero exit, never a panic.
func TestAnalyzeBadInputOneLine(t *testing.T) {
	e2eenv.Need(t, exists(binPath), "bin/forensic is not built (run make)")
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, b, 0o600)
		return p
	}
	cases := map[string]string{
		"missing":  filepath.Join(dir, "nope.db"),
		"empty":    write("empty.db", nil),
		"not bolt": write("text.db", []byte(strings.Repeat("not a database\n", 500))),
	}
	for name, path := range cases {
		for _, sub := range [][]string{{"analyze"}, {"analyze", "--json"}} {
			t.Run(name+"/"+strings.Join(sub, " "), func(t *testing.T) {
				cmd := binCommand(bin{}, append(sub, path)...)
				out, err := cmd.CombinedOutput()
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() == 0 {
					t.Fatalf("exit %v, want non-zero; output %q", err, out)
				}
				lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
				if len(lines) != 1 || !strings.HasPrefix(lines[0], "forensic analyze: ") {
					t.Fatalf("want one line, got %q", out)
				}
				if strings.Contains(string(out), "goroutine") || strings.Contains(string(out), "panic") {
					t.Fatalf("stack trace in %q", out)
				}
			})
		}
	}
}

// forensic record as an unprivileged user: one line naming what it needs.
func TestRecordNotRoot(t *testing.T) {
	e2eenv.NeedRoot(t) // to switch to another user
	e2eenv.Need(t, exists(binPath), "bin/forensic is not built (run make)")
	// t.TempDir's parents are private; nobody needs a directory it can use.
	dir, err := os.MkdirTemp("", "forensic-notroot-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o777)
	cmd := binCommand(bin{}, "record", "-o", filepath.Join(dir, "run.db"), "--", "true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("exit %v, want non-zero; output %q", err, out)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "root") || !strings.Contains(lines[0], "CAP_BPF") {
		t.Fatalf("want one line naming root and the capabilities, got %q", out)
	}
	if exists(filepath.Join(dir, "run.db")) {
		t.Error("a run.db was created")
	}
}

// -o refuses to overwrite an existing file without --force.
func TestRecordRefusesOverwrite(t *testing.T) {
	w := newWorld(t)
	db := filepath.Join(w.dir, "keep.db")
	os.WriteFile(db, []byte("precious"), 0o600)
	cmd := binCommand(bin{w: w}, "record", "-o", db, "--libcuda", simCUDA, "--", "true")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "exists") {
		t.Fatalf("record over an existing file: %v %q", err, out)
	}
	if b, _ := os.ReadFile(db); string(b) != "precious" {
		t.Fatal("existing file was overwritten")
	}
}
