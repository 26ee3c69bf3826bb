package e2e

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/retrivium/forensic/internal/e2eenv"
)

// The validation run meant for a real GPU (make gpu-check), run end to
// end on the simulated GPU: it builds its workloads, records each under
// bin/forensic, analyzes them and writes one report. Its checks must pass
// here and name their verdicts; the CUDA-runtime checks are skipped,
// since the simulator has no libcudart.
func TestGPUCheckSimulated(t *testing.T) {
	e2eenv.NeedRoot(t)
	e2eenv.Need(t, exists(binPath), "bin/forensic is not built (run make)")
	e2eenv.Need(t, exists(simCUDA) && exists(simNVML), "the simulated GPU is not built (run make)")
	cc := ""
	for _, c := range []string{"gcc", "cc", "clang"} {
		if _, err := exec.LookPath(c); err == nil {
			cc = c
			break
		}
	}
	e2eenv.Need(t, cc != "", "no C compiler for the gpu-check workloads")

	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The helper, built from this tree (the script would otherwise build
	// bin/forensic too; the test uses the one make built).
	helper := filepath.Join(dir, "gpucheck")
	build := exec.CommandContext(ctx, "go", "build", "-o", helper, "./test/gpu/gpucheck")
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./test/gpu/gpucheck: %v\n%s", err, out)
	}

	start := time.Now()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(repo, "scripts", "gpu-check.sh"), "--simulated", "--no-build")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(),
		"OUT="+dir,
		"GPU_CHECK_WORK="+filepath.Join(dir, "work"),
		"GPU_CHECK_HELPER="+helper,
		"CC="+cc,
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("gpu-check.sh --simulated: %v in %s", err, time.Since(start).Round(time.Millisecond))

	reportPath := filepath.Join(dir, "gpu-check-report.txt")
	raw, rerr := os.ReadFile(reportPath)
	if rerr != nil {
		t.Fatalf("no report at $OUT/gpu-check-report.txt: %v\nstdout:\n%s\nstderr:\n%s", rerr, stdout.String(), stderr.String())
	}
	report := string(raw)

	// The SUMMARY block: "  STATUS  id  detail".
	line := regexp.MustCompile(`^  (PASS|FAIL|SKIP)\s+(\S+)\s+(.*)$`)
	status, detail := map[string]string{}, map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(report))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	inSummary := false
	for sc.Scan() {
		l := sc.Text()
		switch {
		case l == "SUMMARY":
			inSummary = true
		case inSummary && strings.HasPrefix(l, "RESULT:"):
			inSummary = false
		case inSummary:
			if m := line.FindStringSubmatch(l); m != nil {
				status[m[2]], detail[m[2]] = m[1], m[3]
			}
		}
	}
	if len(status) == 0 {
		t.Fatalf("the report has no SUMMARY lines:\n%s", gcFirstLines(report, 60))
	}

	// Each check, its status, and what its summary line must name.
	want := []struct {
		id, status string
		names      []string
	}{
		{"environment", "PASS", []string{"GPU 0"}},
		{"no-failure", "PASS", []string{"attribution=none", "capacity=null", "first_failure=none"}},
		{"exports", "PASS", []string{"hooked="}},
		{"coverage", "PASS", nil},
		{"driver-oom", "PASS", []string{"attribution=allocation", "capacity=framebuffer-exhausted",
			"first_failure=cuMemAlloc_v2 CUDA_ERROR_OUT_OF_MEMORY (2)", "size=1073741824"}},
		{"runtime-oom", "SKIP", []string{"no libcudart"}},
		{"runtime-calls", "SKIP", nil},
		{"framework-oom", "SKIP", nil},
		{"host-register", "PASS", []string{"attribution=allocation", "capacity=not-applicable",
			"first_failure=cuMemHostRegister_v2 CUDA_ERROR_OUT_OF_MEMORY (2)"}},
		{"vmm-map", "PASS", []string{"attribution=mapping", "capacity=not-applicable",
			"first_failure=cuMemMap CUDA_ERROR_INVALID_VALUE (1)"}},
		{"vmm-create", "PASS", []string{"attribution=allocation", "capacity=framebuffer-exhausted",
			"first_failure=cuMemCreate CUDA_ERROR_OUT_OF_MEMORY (2)"}},
		{"overhead", "PASS", []string{"ns/pair", "none lost"}},
	}
	for _, w := range want {
		got, ok := status[w.id]
		if !ok {
			t.Errorf("%s: no summary line", w.id)
			continue
		}
		if got != w.status {
			t.Errorf("%s: %s, want %s: %s", w.id, got, w.status, detail[w.id])
			continue
		}
		for _, n := range w.names {
			if !strings.Contains(detail[w.id], n) {
				t.Errorf("%s: summary line does not name %q: %s", w.id, n, detail[w.id])
			}
		}
	}
	for id, s := range status {
		if s == "FAIL" {
			t.Errorf("%s failed on the simulated GPU: %s", id, detail[id])
		}
	}
	if err != nil {
		t.Errorf("gpu-check.sh exit: %v (stderr: %s)", err, gcLastLines(stderr.String(), 10))
	}
	if !strings.Contains(report, "RESULT: PASS") {
		t.Errorf("the report does not end its summary with RESULT: PASS")
	}
	// The details: every recorded run's analysis is in the report, text
	// and JSON, and the inventory.
	for _, s := range []string{"forensic analyze --json", "VERDICT", `"attribution": "allocation"`,
		`"attribution": "mapping"`, `"attribution": "none"`, "bin/forensic inventory --json"} {
		if !strings.Contains(report, s) {
			t.Errorf("the report lacks %q", s)
		}
	}
	if t.Failed() {
		t.Logf("report summary:\n%s", gcFirstLines(report, 40))
	}
}

func gcFirstLines(s string, n int) string {
	ls := strings.SplitN(s, "\n", n+1)
	if len(ls) > n {
		ls = ls[:n]
	}
	return strings.Join(ls, "\n")
}

func gcLastLines(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}
