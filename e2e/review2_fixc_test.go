package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/retrivium/forensic/store"
)

// recordPID runs `forensic record` like world.record and also returns the
// recorder's own pid.
func (w *world) recordPID(flags []string, command ...string) (result, int) {
	w.t.Helper()
	db := filepath.Join(w.dir, "run.db")
	args := append([]string{"record", "-o", db, "--force", "--libnvidia-ml", simNVML}, flags...)
	cmd := exec.Command(binPath, append(append(args, "--"), command...)...)
	cmd.Env = w.environ()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	pid := cmd.Process.Pid
	cmd.Wait()
	return result{db: db, code: cmd.ProcessState.ExitCode(), stderr: errb.String(), stdout: out.String()}, pid
}

// The spawned workload's parent is the recorder, whether its libcuda was
// given up front (nothing holds the workload when it maps it, so it may
// be gone before its exec record is read) or found at mapping.
func TestReview2FixcSpawnedParent(t *testing.T) {
	w := newWorld(t)
	for i, flags := range [][]string{
		{"--libcuda", simCUDA}, {"--libcuda", simCUDA}, {"--libcuda", simCUDA}, {"--libcuda", simCUDA}, nil,
	} {
		res, recorder := w.recordPID(flags, simwork, "init; use 0; alloc 1M")
		if res.code != 0 {
			t.Fatalf("run %d: exit %d: %s", i, res.code, res.stderr)
		}
		rep, _ := analyzeJSON(t, res.db)
		roots := 0
		for _, p := range rep.Processes {
			if !p.Root {
				continue
			}
			roots++
			if p.PPID != uint32(recorder) {
				t.Errorf("run %d (%q): the workload's parent is recorded as %d, want the recorder, %d", i, flags, p.PPID, recorder)
			}
		}
		if roots != 1 {
			t.Errorf("run %d: %d root processes, want 1", i, roots)
		}
	}
}

// make demo's script ends with commands to run on its recording (record
// suggests one too): the file they name is still there, and analyzes.
func TestReview2FixcDemoKeepsItsRecording(t *testing.T) {
	newWorld(t)
	cmd := exec.Command(filepath.Join(repo, "scripts", "demo.sh"))
	cmd.Env = append(os.Environ(), "COLUMNS=80")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`forensic analyze (\S+)`).FindAllStringSubmatch(string(out), -1)
	if len(m) == 0 {
		t.Fatalf("the demo suggests no analyze command:\n%s", out)
	}
	for _, s := range m {
		db := s[1]
		if !filepath.IsAbs(db) {
			db = filepath.Join(repo, db)
		}
		if b, err := exec.Command(binPath, "analyze", db).CombinedOutput(); err != nil {
			t.Errorf("the demo suggests forensic analyze %s, which fails: %v\n%s", s[1], err, b)
		}
	}
	for i, l := range strings.Split(string(out), "\n") {
		if utf8.RuneCountInString(l) > 80 {
			t.Errorf("demo line %d is %d columns: %q", i+1, utf8.RuneCountInString(l), l)
		}
	}
}

// A stack frame wider than an 80-column terminal wraps in the text
// report: the program's whole file name and the frame's offset are there.
func TestReview2FixcStackFramesWrap(t *testing.T) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=1G")
	name := "simwork-" + strings.Repeat("with-a-long-name-", 4)
	prog := filepath.Join(w.dir, name)
	b, err := os.ReadFile(simwork)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prog, b, 0o755); err != nil {
		t.Fatal(err)
	}
	res := w.record(nil, prog, "init; use 0; alloc 2G; exit 1")
	if res.code != 1 {
		t.Fatalf("exit %d, want the workload's 1: %s", res.code, res.stderr)
	}
	cmd := exec.Command(binPath, "analyze", "--no-color", res.db)
	cmd.Env = append(os.Environ(), "COLUMNS=80")
	out, _ := cmd.Output()
	var joined strings.Builder
	for i, l := range strings.Split(string(out), "\n") {
		if utf8.RuneCountInString(l) > 80 {
			t.Errorf("line %d is %d columns: %q", i+1, utf8.RuneCountInString(l), l)
		}
		joined.WriteString(strings.ReplaceAll(l, " ", ""))
	}
	if !regexp.MustCompile(`\+0x[0-9a-f]+\(` + regexp.QuoteMeta(name) + `\)`).MatchString(joined.String()) {
		t.Errorf("no frame in %s with its offset and whole file name:\n%s", name, out)
	}
	if _, stack, _ := strings.Cut(string(out), "  stack"); strings.Contains(strings.Split(stack, "\n\n")[0], "…") {
		t.Errorf("a stack frame was cut:\n%s", out)
	}
}

// What analyze says on stderr about a live flight recording (how its
// live segment was read) wraps at an 80-column terminal like record's
// messages do, here with a long directory name.
func TestReview2FixcLiveNoteWraps(t *testing.T) {
	w := newWorld(t)
	fr := w.startFlight(`$S 'init; use 0; alloc 1M'; touch started; while [ ! -e stop ]; do sleep 0.05; done`)
	fr.pollUntil(20*time.Second, "the workload ran", func() bool { return exists(filepath.Join(fr.work, "started")) })
	cmd := exec.Command(binPath, "analyze", "--no-color", fr.dir)
	cmd.Env = append(os.Environ(), "COLUMNS=80")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil {
		t.Errorf("analyze: %v: %s", err, errb.String())
	}
	os.WriteFile(filepath.Join(fr.work, "stop"), nil, 0o644)
	if err := <-fr.done; err != nil {
		t.Errorf("record: %v\n%s", err, fr.log.String())
	}
	said := errb.String()
	if !strings.Contains(strings.Join(strings.Fields(said), " "), "the live one from a copy its recorder made now") {
		t.Errorf("analyze did not say how it read the live segment: %q", said)
	}
	for _, l := range strings.Split(said, "\n") {
		if n := utf8.RuneCountInString(l); n > 80 {
			t.Errorf("a %d-column line on stderr: %q", n, l)
		}
	}
}

// record's stop summary and analyze count the same losses, each kind on
// its own and named the same: a lost process record is not a lost call.
func TestReview2FixcLossesAgree(t *testing.T) {
	w := newWorld(t)
	res := w.record([]string{"--ring-size", "4096"}, simwork, "init; use 0; stress 100000")
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	_, _, stop := stored(t, res.db)
	if stop == nil || stop.Stats.LostCalls == 0 {
		t.Fatalf("no call was lost (stop %+v): the test needs losses", stop)
	}
	m := regexp.MustCompile(`(?m) forensic: recorded (\d+) calls`).FindStringSubmatch(res.stderr)
	if m == nil || m[1] != strconv.FormatUint(stop.Stats.Events, 10) {
		t.Errorf("record says %q; the run stored %d call events", m, stop.Stats.Events)
	}
	_, said, ok := strings.Cut(res.stderr, "forensic: not in the record: ")
	if !ok {
		t.Fatalf("record does not say what was lost:\n%s", res.stderr)
	}
	said, _, _ = strings.Cut(said, "\n")
	out, err := exec.Command(binPath, "analyze", "--no-color", res.db).Output()
	if err != nil {
		t.Fatalf("analyze: %v", err)
	}
	text := strings.Join(strings.Fields(string(out)), " ")
	for _, kind := range strings.Split(said, ", ") {
		if !strings.Contains(text, kind) {
			t.Errorf("record says %q; analyze does not:\n%s", kind, out)
		}
	}
	if want := fmt.Sprintf("%d calls lost (ring buffer full)", stop.Stats.LostCalls); !strings.Contains(said, want) {
		t.Errorf("record says %q, want %q", said, want)
	}
}

// An output that collides with an existing file, and a shell without
// completion, are said in words on one line, never as a system call's
// error.
func TestReview2FixcOutputIsAFile(t *testing.T) {
	w := newWorld(t)
	res := w.record(nil, simwork, "init")
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"record", "--flight", "-o", res.db, "--", "true"}, res.db + " is a file: --flight records into a directory"},
		{[]string{"export", "--format", "parquet", res.db, "-o", res.db}, res.db + " is a file: --format parquet writes a directory"},
		{[]string{"completion", "tcsh"}, "tcsh is not supported: the shells with completion are bash, zsh and fish"},
	} {
		out, err := exec.Command(binPath, tt.args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), tt.want) || strings.Contains(string(out), "not a directory") {
			t.Errorf("forensic %s: %v, said %q; want %q", strings.Join(tt.args, " "), err, out, tt.want)
		}
	}
	r, err := store.Open(res.db)
	if err != nil {
		t.Fatalf("the run.db is no longer readable: %v", err)
	}
	r.Close()
}
