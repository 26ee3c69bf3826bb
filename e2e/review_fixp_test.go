package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/retrivium/forensic/store"
)

// processesOf reads the process records of a run.db.
func processesOf(t *testing.T, db string) []store.Process {
	t.Helper()
	r, err := store.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ps, err := r.Processes()
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// script writes a bash script into the world's directory.
func (w *world) script(name, body string) string {
	w.t.Helper()
	p := filepath.Join(w.dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/bash\nS="+simwork+"\n"+body), 0o755); err != nil {
		w.t.Fatal(err)
	}
	return p
}

// Process records come from ring buffer memory that earlier records used:
// after tens of thousands of calls have gone through a small ring, a
// process's arguments are still exactly its argv (nothing of the calls
// before them), empty arguments stay, and a list longer than the probe
// copies is either read whole from /proc or kept cut and marked so.
func TestReviewFixpArgsAfterDirtyRing(t *testing.T) {
	w := newWorld(t)
	long := "# " + strings.Repeat("x", 1500)
	sh := w.script("dirty.sh", `$S 'init; use 0; paced 20000 1 65536' >/dev/null
$S 'init' '' 'exit 0'
$S 'init' "`+long+`"
`)
	res := w.record([]string{"--ring-size", "64KiB"}, sh)
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	short := []string{simwork, "init", "", "exit 0"}
	var sawShort, sawLong bool
	for _, p := range processesOf(t, res.db) {
		if len(p.Args) == 0 || p.Args[0] != simwork {
			continue
		}
		if p.Exe != simwork || p.Comm != "simwork" {
			t.Errorf("pid %d: exe %q, comm %q; want %s, simwork", p.PID, p.Exe, p.Comm, simwork)
		}
		switch {
		case len(p.Args) > 1 && p.Args[1] == "init; use 0; paced 20000 1 65536":
			if len(p.Args) != 2 || p.ArgsCut {
				t.Errorf("pid %d: args %q (cut %v), want the 2 it was given", p.PID, p.Args, p.ArgsCut)
			}
		case reflect.DeepEqual(p.Args, short):
			sawShort = !p.ArgsCut
		case len(p.Args) == 3 && p.Args[1] == "init" && strings.HasPrefix(long, p.Args[2]):
			whole := p.Args[2] == long
			// Cut, the probe copied exactly 1 KiB: the arguments and their NULs.
			if whole == p.ArgsCut || !whole && len(strings.Join(p.Args, "\x00")) != 1024 {
				t.Errorf("pid %d: %d bytes of the long argument, cut %v", p.PID, len(p.Args[2]), p.ArgsCut)
			}
			sawLong = true
		default:
			t.Errorf("pid %d: args %q are not the argv of any process the script ran", p.PID, p.Args)
		}
	}
	if !sawShort || !sawLong {
		t.Errorf("recorded the empty-argument process: %v, the long-argument one: %v", sawShort, sawLong)
	}
}

// A process that a shell execs (or forks and execs) and that exits at once
// is named after the program it ran, not the shell, even when it is gone
// before the recorder reads its exec; the shells keep their own name, and
// the analysis names the program that failed.
func TestReviewFixpShortLivedExecNamed(t *testing.T) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=16G")
	shell, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	sh := w.script("short.sh", `for i in $(seq 1 15); do
  bash -c "exec $S 'init; use 0; alloc 1G'"
  sh -c "$S 'init; use 0; alloc 1G'; true"
done
bash -c "exec $S 'init; use 0; alloc 40G'" 2>/dev/null
true
`)
	res := w.record(nil, sh)
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	programs, shells := 0, 0
	for _, p := range processesOf(t, res.db) {
		switch {
		case len(p.Args) > 0 && p.Args[0] == simwork:
			programs++
			if p.Exe != simwork || p.Comm != "simwork" {
				t.Errorf("pid %d runs simwork (args %q) but is recorded as exe %q, comm %q", p.PID, p.Args, p.Exe, p.Comm)
			}
		case len(p.Args) > 0 && p.Args[0] == "sh":
			shells++
			if p.Exe != shell {
				t.Errorf("pid %d: the sh -c process is recorded as exe %q, want %s", p.PID, p.Exe, shell)
			}
		}
	}
	if programs != 31 || shells != 15 {
		t.Errorf("%d simwork and %d sh processes recorded, want 31 and 15", programs, shells)
	}
	out, err := exec.Command(binPath, "analyze", "--no-color", res.db).Output()
	if err != nil {
		t.Fatalf("analyze: %v", err)
	}
	if !strings.Contains(string(out), "(simwork)") || strings.Contains(string(out), "(bash)") {
		t.Errorf("the analysis does not name simwork as the failing program:\n%s", out)
	}
}

// A program deeper than the probe's path walk reaches is named by the last
// components of its path (or, while /proc still shows it, the whole path),
// never by the shell that ran it.
func TestReviewFixpDeepExecutablePath(t *testing.T) {
	w := newWorld(t)
	dir := filepath.Join(w.dir, strings.Repeat("deep/", 60))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "simwork")
	b, err := os.ReadFile(simwork)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prog, b, 0o755); err != nil {
		t.Fatal(err)
	}
	sh := w.script("deep.sh", "for i in 1 2 3; do "+prog+" 'init; exit 0'; done\n")
	res := w.record(nil, sh)
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	n := 0
	for _, p := range processesOf(t, res.db) {
		if len(p.Args) == 0 || p.Args[0] != prog {
			continue
		}
		n++
		cut, isCut := strings.CutPrefix(p.Exe, "...")
		if p.Exe != prog && !(isCut && strings.HasSuffix(prog, cut) && strings.HasSuffix(cut, "/deep/simwork")) {
			t.Errorf("pid %d: exe %q, want %s or its last components after ...", p.PID, p.Exe, prog)
		}
	}
	if n != 3 {
		t.Errorf("%d processes ran the deep simwork, want 3", n)
	}
}
