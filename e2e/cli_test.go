package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/retrivium/forensic/internal/e2eenv"
	"github.com/retrivium/forensic/store"
)

// The command line as users meet it: parsing, exit statuses, --force,
// sudo, file modes and help.

func lines(s string) []string { return strings.Split(strings.TrimRight(s, "\n"), "\n") }

// sim are the flags that point record at the simulated GPU.
func sim(db string) []string {
	return []string{"record", "-o", db, "--libcuda", simCUDA, "--libnvidia-ml", simNVML}
}

// argsScript writes a script that saves its arguments, one per line.
func argsScript(t *testing.T, dir string) (script, saved string) {
	script, saved = filepath.Join(dir, "args.sh"), filepath.Join(dir, "args.txt")
	body := "#!/bin/sh\nprintf '%s\\n' \"$@\" > " + saved + "\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script, saved
}

// Everything from the command's name on is the command's, with or
// without --.
func TestCLIRecordStopsAtCommand(t *testing.T) {
	w := newWorld(t)
	script, saved := argsScript(t, w.dir)
	a, b := filepath.Join(w.dir, "a.db"), filepath.Join(w.dir, "b.db")
	for _, dash := range [][]string{nil, {"--"}} {
		t.Run(fmt.Sprint("dash=", dash != nil), func(t *testing.T) {
			os.Remove(a)
			os.Remove(saved)
			args := append(append(sim(a), dash...), script, "-o", b, "--force")
			r := runBin(t, bin{w: w}, args...)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			if !exists(a) || exists(b) {
				t.Fatalf("a.db exists %v, b.db exists %v: want the run in a.db only", exists(a), exists(b))
			}
			got, _ := os.ReadFile(saved)
			if string(got) != "-o\n"+b+"\n--force\n" {
				t.Errorf("the command got %q, want -o b.db --force", got)
			}
			rd, err := store.Open(a)
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()
			if cmd := rd.Run().Command; !slices.Equal(cmd, []string{script, "-o", b, "--force"}) {
				t.Errorf("run record's command %q", cmd)
			}
		})
	}
	// ls -la: the command's own short flags are not record's.
	r := runBin(t, bin{w: w}, append(sim(filepath.Join(w.dir, "ls.db")), "ls", "-la", w.dir)...)
	if r.code != 0 || !strings.Contains(r.stdout, "args.sh") {
		t.Fatalf("record ls -la: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	// The summary counts with plurals and says how to look at the run
	// (last, after the time and level a log line starts with).
	last := lines(r.stderr)
	if !regexp.MustCompile(`recorded \d+ calls?, \d+ samples?, 1 process in [\d.]+ (ms|s);`).MatchString(r.stderr) ||
		!strings.HasSuffix(last[len(last)-1], " INFO  forensic: to see what happened: forensic analyze "+filepath.Join(w.dir, "ls.db")) {
		t.Errorf("summary:\n%s", r.stderr)
	}
}

// Exit statuses: 0, the workload's own, 126/127 as env and timeout use
// them, 2 for every usage error (one line and a hint), 3 for analyze
// --exit-code on a failed run.
func TestCLIExitStatus(t *testing.T) {
	w := newWorld(t)
	plain := filepath.Join(w.dir, "plain.txt")
	os.WriteFile(plain, []byte("not a program\n"), 0o644)
	db := filepath.Join(w.dir, "run.db")
	tests := []struct {
		name  string
		args  []string
		code  int
		usage bool // two lines: the error, then the hint
		db    bool // a run.db is left
	}{
		{"success", append(sim(db), "true"), 0, false, true},
		{"workload status", append(sim(db), "sh", "-c", "exit 7"), 7, false, true},
		{"workload signal", append(sim(db), "--", "sh", "-c", "kill -9 $$"), 128 + 9, false, true},
		{"not found", append(sim(db), "forensic-no-such-command"), 127, false, false},
		{"not executable", append(sim(db), plain), 126, false, false},
		{"a directory", append(sim(db), w.dir), 126, false, false},
		{"no command", sim(db), 2, true, false},
		{"unknown flag", append(sim(db), "--bogus", "true"), 2, true, false},
		{"ring size", append(sim(db), "--ring-size", "3MiB", "true"), 2, true, false},
		{"ring size unit", append(sim(db), "--ring-size", "16", "true"), 2, true, false},
		{"interval zero", append(sim(db), "--interval", "0s", "true"), 2, true, false},
		{"interval negative", append(sim(db), "--interval", "-5ms", "true"), 2, true, false},
		{"interval no unit", append(sim(db), "--interval", "50", "true"), 2, true, false},
		{"pid and command", append(sim(db), "--pid", "1", "true"), 2, true, false},
		{"unknown command", []string{"recrod"}, 2, true, false},
		{"no arguments to analyze", []string{"analyze"}, 2, true, false},
		{"help on nothing", []string{"help", "nosuch"}, 2, true, false},
		{"completion shell", []string{"completion", "tcsh"}, 2, true, false},
		{"a missing run", []string{"analyze", filepath.Join(w.dir, "missing.db")}, 1, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			os.Remove(db)
			r := runBin(t, bin{w: w}, tt.args...)
			if r.code != tt.code {
				t.Fatalf("exit %d, want %d\n%s", r.code, tt.code, r.stderr)
			}
			if exists(db) != tt.db {
				t.Errorf("run.db left: %v, want %v", exists(db), tt.db)
			}
			if tt.code == 0 || tt.code == 7 || tt.code == 137 {
				return
			}
			l := lines(r.stderr)
			want := 1
			if tt.usage {
				want = 2
			}
			if len(l) != want || (tt.usage && !regexp.MustCompile(`^Run 'forensic( \w+)? --help' for usage\.$`).MatchString(l[1])) {
				t.Errorf("stderr %q, want %d line(s)", r.stderr, want)
			}
			if strings.Contains(r.stderr, "Flags:") || r.stdout != "" {
				t.Errorf("usage printed in full: %q %q", r.stdout, r.stderr)
			}
		})
	}
	// analyze --exit-code: 3 when a call failed, 0 when none did.
	for _, tc := range []struct {
		script string
		code   int
	}{{"init; use 0; alloc 1M; free-all", 0}, {"init; use 0; until-fail { alloc 4G }; free-all", 3}} {
		res := w.record(nil, simwork, tc.script)
		if r := runBin(t, bin{}, "analyze", "--exit-code", res.db); r.code != tc.code {
			t.Errorf("analyze --exit-code after %q: exit %d, want %d: %s", tc.script, r.code, tc.code, r.stderr)
		}
		if r := runBin(t, bin{}, "analyze", res.db); r.code != 0 {
			t.Errorf("analyze without --exit-code: exit %d", r.code)
		}
	}
}

// --force replaces a finished run, and nothing else: not a recording in
// progress (it names the recorder's pid), not a file of another kind, not
// a directory.
func TestCLIForce(t *testing.T) {
	w := newWorld(t)
	at := func(n string) string { return filepath.Join(w.dir, n) }
	// A live recording, held until the test releases it.
	live := binCommand(bin{w: w}, append(sim(at("live.db")), "sh", "-c", "while [ ! -e "+at("go")+" ]; do sleep 0.05; done")...)
	var liveErr bytes.Buffer
	live.Stderr = &liveErr
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		os.WriteFile(at("go"), nil, 0o600)
		live.Wait()
	}()
	if !waitFor(20*time.Second, func() bool { return strings.Contains(liveErr.String(), "recording sh") }) {
		t.Fatalf("the live recorder did not start: %s", liveErr.String())
	}
	os.WriteFile(at("notes.txt"), []byte("precious\n"), 0o644)
	os.Mkdir(at("dir.db"), 0o755)
	os.WriteFile(at("dir.db/inside"), []byte("kept"), 0o644)
	if r := runBin(t, bin{w: w}, append(sim(at("old.db")), "true")...); r.code != 0 {
		t.Fatalf("first recording: %s", r.stderr)
	}
	oldID := runID(t, at("old.db"))
	tests := []struct {
		name    string
		code    int
		mention string
	}{
		{"live.db", 1, fmt.Sprintf("forensic pid %d is writing it", live.Process.Pid)},
		{"notes.txt", 1, "not a forensic run"},
		{"dir.db", 1, "a directory"},
		{"old.db", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, _ := os.Stat(at(tt.name))
			r := runBin(t, bin{w: w}, append(sim(at(tt.name)), "--force", "true")...)
			if r.code != tt.code || !strings.Contains(r.stderr, tt.mention) {
				t.Fatalf("exit %d (want %d), stderr %q, want it to name %q", r.code, tt.code, r.stderr, tt.mention)
			}
			after, _ := os.Stat(at(tt.name))
			if tt.code != 0 && !os.SameFile(before, after) {
				t.Errorf("%s was replaced", tt.name)
			}
			if tt.code == 0 && runID(t, at(tt.name)) == oldID {
				t.Errorf("%s was not replaced", tt.name)
			}
			if tt.code != 0 && len(lines(r.stderr)) != 1 {
				t.Errorf("want one line, got %q", r.stderr)
			}
		})
	}
	if b, _ := os.ReadFile(at("notes.txt")); string(b) != "precious\n" {
		t.Error("notes.txt changed")
	}
	if b, _ := os.ReadFile(at("dir.db/inside")); string(b) != "kept" {
		t.Error("the directory's content changed")
	}
	os.WriteFile(at("go"), nil, 0o600)
	if err := live.Wait(); err != nil {
		t.Fatalf("the live recording: %v\n%s", err, liveErr.String())
	}
	if r := runBin(t, bin{}, "analyze", "--json", at("live.db")); r.code != 0 {
		t.Errorf("the live recording is not readable after --force was refused: %s", r.stderr)
	}
}

func runID(t *testing.T, db string) string {
	t.Helper()
	r, err := store.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	return r.Run().ID
}

// testUser creates a user with a supplementary group (video) for the
// test, and removes it afterwards.
func testUser(t *testing.T) *user.User {
	t.Helper()
	name := fmt.Sprintf("fe2e%d", os.Getpid()%100000)
	home := filepath.Join(os.TempDir(), name+"-home")
	out, err := exec.Command("useradd", "--user-group", "--groups", "video", "--no-create-home",
		"--home-dir", home, "--shell", "/bin/sh", name).CombinedOutput()
	e2eenv.Need(t, err == nil, fmt.Sprintf("useradd: %v %s", err, out))
	t.Cleanup(func() { exec.Command("userdel", name).Run() })
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// sharedDir is a directory every user may use (t.TempDir's parents are
// private).
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "forensic-cli-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o777)
	return dir
}

func owner(t *testing.T, path string) (uid, gid uint32, mode os.FileMode) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	return sys.Uid, sys.Gid, st.Mode().Perm()
}

func ids(s string) []int {
	var out []int
	for _, f := range strings.Fields(s) {
		n, _ := strconv.Atoi(f)
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Under sudo the workload runs as the user who ran sudo, with their
// groups and home, and everything written is theirs, mode 0600; the marker
// socket takes markers from them and root only.
func TestCLISudo(t *testing.T) {
	w := newWorld(t)
	u := testUser(t)
	dir := sharedDir(t)
	at := func(n string) string { return filepath.Join(dir, n) }
	sudoEnv := []string{"SUDO_UID=" + u.Uid, "SUDO_GID=" + u.Gid, "SUDO_USER=" + u.Username,
		"HOME=/root", "USER=root", "LOGNAME=root"}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	groupsOut, err := exec.Command("id", "-G", u.Username).Output()
	if err != nil {
		t.Fatal(err)
	}
	identity := `echo "$(id -u) $(id -g)"; id -G; echo "$HOME|$USER|$LOGNAME"; ` +
		`while [ ! -e ` + at("go") + ` ]; do sleep 0.05; done`
	rec := binCommand(bin{}, append(sim(at("run.db")), "sh", "-c", identity)...)
	rec.Env = append(w.environ(), sudoEnv...)
	var out, errb bytes.Buffer
	rec.Stdout, rec.Stderr = &out, &errb
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { os.WriteFile(at("go"), nil, 0o666); rec.Wait() }()
	if !waitFor(20*time.Second, func() bool { return strings.Count(out.String(), "\n") >= 3 }) {
		t.Fatalf("the workload did not start:\n%s", errb.String())
	}

	// Markers: root and the invoking user may add them; another uid may not.
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	them := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	for _, m := range []struct {
		who  string
		cred *syscall.Credential
		ok   bool
	}{{"root", nil, true}, {"the invoking user", them, true}, {"nobody", nobody, false}} {
		r := runBin(t, bin{cred: m.cred}, "mark", "--run", at("run.db"), "by", m.who)
		marked := regexp.MustCompile(`^marked "by ` + m.who + `" at \+\d+\.\d{3} s into the recording\n$`).MatchString(r.stdout)
		if m.ok != (r.code == 0 && marked) {
			t.Errorf("mark by %s: exit %d, stdout %q, stderr %q", m.who, r.code, r.stdout, r.stderr)
		}
		if !m.ok && !strings.Contains(r.stderr, "may not mark") {
			t.Errorf("mark by %s refused without saying why: %q", m.who, r.stderr)
		}
	}
	os.WriteFile(at("go"), nil, 0o666)
	if err := rec.Wait(); err != nil {
		t.Fatalf("record: %v\n%s", err, errb.String())
	}
	got := lines(out.String())
	if got[0] != fmt.Sprintf("%d %d", uid, gid) {
		t.Errorf("workload uid gid %q, want %d %d", got[0], uid, gid)
	}
	if !slices.Equal(ids(got[1]), ids(string(groupsOut))) {
		t.Errorf("workload groups %q, want %q", got[1], groupsOut)
	}
	if want := u.HomeDir + "|" + u.Username + "|" + u.Username; got[2] != want {
		t.Errorf("workload HOME|USER|LOGNAME %q, want %q", got[2], want)
	}
	rep, _ := analyzeJSON(t, at("run.db"))
	if len(rep.Markers) != 2 {
		t.Errorf("markers %+v, want root's and the user's", rep.Markers)
	}

	// The run, the report and the export are the user's, mode 0600, also
	// when they replace a file that was readable by all.
	os.WriteFile(at("report.html"), []byte("old"), 0o644)
	for _, args := range [][]string{{"report", at("run.db"), "-o", at("report.html")},
		{"export", "--format", "perfetto", at("run.db"), "-o", at("trace.json")}} {
		if r := runBin(t, bin{env: sudoEnv}, args...); r.code != 0 {
			t.Fatalf("%v: %s", args, r.stderr)
		}
	}
	for _, f := range []string{"run.db", "report.html", "trace.json"} {
		if fu, fg, mode := owner(t, at(f)); fu != uint32(uid) || fg != uint32(gid) || mode != 0o600 {
			t.Errorf("%s: %d:%d %v, want %d:%d 0600", f, fu, fg, mode, uid, gid)
		}
	}
	// Without sudo: root's, still 0600.
	if r := runBin(t, bin{}, "report", at("run.db"), "-o", at("root.html")); r.code != 0 {
		t.Fatal(r.stderr)
	}
	if fu, _, mode := owner(t, at("root.html")); fu != 0 || mode != 0o600 {
		t.Errorf("root.html: uid %d %v, want 0 0600", fu, mode)
	}

	// --as-root keeps the workload root's; the run is still the user's.
	r := runBin(t, bin{w: w, env: sudoEnv}, append(sim(at("root.db")), "--as-root", "id", "-u")...)
	if r.code != 0 || strings.TrimSpace(r.stdout) != "0" {
		t.Errorf("--as-root: exit %d, id -u %q", r.code, r.stdout)
	}
	if fu, _, _ := owner(t, at("root.db")); fu != uint32(uid) {
		t.Errorf("--as-root run.db owned by %d, want %d", fu, uid)
	}
}

// Every command's help is on stdout, exits 0, names its arguments and
// exit statuses, and fits 80 columns.
func TestCLIHelp(t *testing.T) {
	e2eenv.Need(t, exists(binPath), "bin/forensic is not built (run make)")
	commands := []struct {
		name, synopsis string
	}{
		{"", "forensic COMMAND [ARGS...]"},
		{"record", "forensic record [flags] -o FILE -- COMMAND [ARGS...]"},
		{"analyze", "forensic analyze [flags] RUN.DB... | DIR"},
		{"report", "forensic report [flags] RUN.DB... -o FILE"},
		{"export", "forensic export [flags] RUN.DB [-o FILE]"},
		{"inventory", "forensic inventory [flags]"},
		{"mark", "forensic mark [flags] LABEL..."},
		{"version", "forensic version"},
		{"completion", "forensic completion bash|zsh|fish"},
		{"help", "forensic help [COMMAND]"},
	}
	for _, c := range commands {
		for _, args := range [][]string{{c.name, "--help"}, {"help", c.name}, {c.name, "-h"}} {
			args = slices.DeleteFunc(args, func(s string) bool { return s == "" })
			r := runBin(t, bin{}, args...)
			if r.code != 0 || r.stderr != "" || !strings.Contains(r.stdout, "Usage:\n  "+c.synopsis+"\n") {
				t.Errorf("forensic %v: exit %d, stderr %q, no synopsis %q in\n%s", args, r.code, r.stderr, c.synopsis, r.stdout)
				continue
			}
			hasExit := c.name != "version" && c.name != "completion" && c.name != "help"
			if hasExit != strings.Contains(r.stdout, "\nExit status:\n") {
				t.Errorf("forensic %v: exit status section present: %v", args, !hasExit)
			}
			for i, l := range lines(r.stdout) {
				if n := utf8.RuneCountInString(l); n > 80 {
					t.Errorf("forensic %v: line %d has %d columns: %q", args, i+1, n, l)
				}
			}
		}
	}
	for _, shell := range []string{"bash", "zsh", "fish"} {
		r := runBin(t, bin{}, "completion", shell)
		if r.code != 0 || !strings.Contains(r.stdout, "forensic") || len(r.stdout) < 1000 {
			t.Errorf("completion %s: exit %d, %d bytes: %s", shell, r.code, len(r.stdout), r.stderr)
		}
	}
}

// make demo's script ends with commands to run on its recording (record
// suggests one too): the file they name is still there, and analyzes.
func TestDemoKeepsItsRecording(t *testing.T) {
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
		if b, err := binCommand(bin{}, "analyze", db).CombinedOutput(); err != nil {
			t.Errorf("the demo suggests forensic analyze %s, which fails: %v\n%s", s[1], err, b)
		}
	}
	for i, l := range strings.Split(string(out), "\n") {
		if utf8.RuneCountInString(l) > 80 {
			t.Errorf("demo line %d is %d columns: %q", i+1, utf8.RuneCountInString(l), l)
		}
	}
}

// An output that collides with an existing file, and a shell without
// completion, are said in words on one line, never as a system call's
// error.
func TestOutputErrorsInWords(t *testing.T) {
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
		out, err := binCommand(bin{}, tt.args...).CombinedOutput()
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

// The command line's messages on mistakes a user makes: a directory given
// as the run.db, a ring size whose suggestion is refused, a temporary
// file's name, a misleading export, cobra's and Go's jargon, flags with
// type names for values.
func TestCommandLineMessages(t *testing.T) {
	w := newWorld(t)
	good := w.record(nil, simwork, "init; use 0; alloc 1M; alloc 100G; exit 1").db
	dir := filepath.Join(w.dir, "out")
	runs := filepath.Join(w.dir, "runs")
	os.MkdirAll(dir, 0o755)
	os.MkdirAll(runs, 0o755)
	for _, n := range []string{"a.db", "b.db"} {
		os.WriteFile(filepath.Join(runs, n), mustRead(t, good), 0o600)
	}
	tests := []struct {
		name    string
		args    []string
		code    int
		want    string
		notWant string
	}{
		{"-o a directory", append(sim(dir), "true"), 1, dir + " is a directory: give the run.db file to create", "file exists"},
		{"-o a directory, --force", append(sim(dir), "--force", "true"), 1, dir + " is a directory", "not replaced"},
		{"--ring-size 1000", append(sim(filepath.Join(w.dir, "r.db")), "--ring-size", "1000", "true"), 2, "did you mean 512MiB or 1GiB?", "1000MiB"},
		{"an output in a missing directory", []string{"report", good, "-o", "/nonexistent/dir/x.html"}, 1,
			"writing /nonexistent/dir/x.html: its directory /nonexistent/dir does not exist", ".x.html."},
		{"export a directory of two runs", []string{"export", runs}, 2, "2 runs (", "not a forensic run database"},
		{"help with two words", []string{"help", "record", "extra"}, 2, "help explains one command at a time (got record extra)", "arg(s)"},
		{"a pid that is not a number", []string{"record", "--pid", "abc", "-o", "x.db"}, 2, `--pid: "abc" is not a whole number`, "strconv"},
		{"inventory with an argument", []string{"inventory", "x"}, 2, "inventory takes no arguments", "unknown command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runBin(t, bin{w: w}, tt.args...)
			if r.code != tt.code || !strings.Contains(r.stderr, tt.want) || strings.Contains(r.stderr, tt.notWant) {
				t.Errorf("exit %d (want %d), stderr %q: want %q, not %q", r.code, tt.code, r.stderr, tt.want, tt.notWant)
			}
			if n := len(lines(r.stderr)); n > 2 {
				t.Errorf("%d lines of stderr", n)
			}
		})
	}
	// What a refused --ring-size suggests is accepted.
	if r := runBin(t, bin{w: w}, append(sim(filepath.Join(w.dir, "r.db")), "--ring-size", "512MiB", "true")...); r.code != 0 {
		t.Errorf("the suggested --ring-size 512MiB: exit %d %s", r.code, r.stderr)
	}
	// A directory holding one run exports it; analyze names the directory.
	os.Remove(filepath.Join(runs, "b.db"))
	trace := filepath.Join(w.dir, "t.pftrace")
	if r := runBin(t, bin{w: w}, "export", runs, "-o", trace); r.code != 0 || !exists(trace) {
		t.Errorf("export of a directory with one run: exit %d %s", r.code, r.stderr)
	}
	os.WriteFile(filepath.Join(runs, "b.db"), mustRead(t, good), 0o600)
	if r := runBin(t, bin{w: w}, "analyze", runs); !strings.HasPrefix(r.stdout, "forensic analyze "+runs+" (2 files)\n") {
		t.Errorf("analyze %s: header %q", runs, lines(r.stdout)[0])
	}
	// Every flag value has a placeholder, never a Go type.
	for _, c := range []string{"record", "analyze", "report", "export", "inventory", "mark", "snapshot"} {
		r := runBin(t, bin{}, "help", c)
		if m := regexp.MustCompile(`(?m)^\s+(-\w, )?--[\w-]+ (string|int|uint|float|duration|strings|stringArray)\b`).FindString(r.stdout); m != "" {
			t.Errorf("help %s: %q", c, m)
		}
	}
	if r := runBin(t, bin{}, "help", "export"); !strings.Contains(r.stdout, "--format FORMAT") {
		t.Errorf("help export lacks --format FORMAT")
	}
}

// A locked run is refused with words that fit every command that reads
// it, not only analyze.
func TestLockedRunNamedByEveryCommand(t *testing.T) {
	w := newWorld(t)
	db, gate := filepath.Join(w.dir, "live.db"), filepath.Join(w.dir, "go")
	live := binCommand(bin{w: w}, append(sim(db), "sh", "-c", "while [ ! -e "+gate+" ]; do sleep 0.05; done")...)
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		os.WriteFile(gate, nil, 0o600)
		live.Wait()
	}()
	if !waitFor(20*time.Second, func() bool { _, err := os.Stat(db); return err == nil }) {
		t.Fatal("the live recording did not start")
	}
	time.Sleep(300 * time.Millisecond)
	for _, args := range [][]string{{"report", db, "-o", filepath.Join(w.dir, "l.html")}, {"export", db, "-o", filepath.Join(w.dir, "l.pftrace")}} {
		r := runBin(t, bin{}, args...)
		if r.code != 1 || !strings.Contains(r.stderr, "it can be read once the recording stops") || strings.Contains(r.stderr, "analyze it") {
			t.Errorf("%s of a live run: exit %d, %q", args[0], r.code, r.stderr)
		}
	}
}

// record's messages on a pipe stay one line each, COLUMNS or not, each
// with its time and level (wrapping for a terminal is the logWriter's
// unit test); the line that says which libcuda was attached at a
// process's first mapping comes before anything that process prints;
// inventory fits 80 columns.
func TestRecordMessagesAreWholeLogLines(t *testing.T) {
	w := newWorld(t)
	for i := range 5 {
		db := filepath.Join(w.dir, fmt.Sprintf("m%d.db", i))
		// No --libcuda: the library is attached when the workload maps it.
		r := runBin(t, bin{w: w, env: []string{"COLUMNS=80"}}, "record", "-o", db, "--libnvidia-ml", simNVML, "--",
			simwork, "init; use 0; alloc 100G; exit 1")
		if r.code != 1 {
			t.Fatalf("record: exit %d\n%s", r.code, r.stderr)
		}
		said := strings.Join(strings.Fields(r.stderr), " ") // as if unwrapped
		attached, failed := strings.Index(said, "forensic: attached "+simCUDA), strings.Index(said, "simwork: cuMemAlloc_v2 ->")
		if attached < 0 || failed < 0 || attached > failed {
			t.Errorf("run %d: the attach line does not come before the workload's own output:\n%s", i, r.stderr)
		}
		logLine := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (INFO |WARN |ERROR) forensic: `)
		for _, l := range lines(r.stderr) {
			if strings.HasPrefix(l, "simwork:") {
				continue // the workload's own
			}
			if !logLine.MatchString(l) {
				t.Errorf("run %d: %q is not one whole log line", i, l)
			}
		}
	}
	// Without a terminal, each message stays on one line.
	r := runBin(t, bin{w: w}, "record", "-o", filepath.Join(w.dir, "n.db"), "--libnvidia-ml", simNVML, "--", simwork, "print hello")
	for _, l := range lines(r.stderr) {
		if strings.HasPrefix(l, " ") {
			t.Errorf("a message was wrapped for a log: %q", r.stderr)
			break
		}
	}
	inv := runBin(t, bin{w: w, env: []string{"SIMGPU_DEVICES=2", "SIMGPU_MIG=2"}}, "inventory", "--libnvidia-ml", simNVML)
	if inv.code != 0 {
		t.Fatalf("inventory: %s", inv.stderr)
	}
	for _, l := range lines(inv.stdout) {
		if utf8.RuneCountInString(l) > 80 && !strings.HasPrefix(l, "NVML /") {
			t.Errorf("inventory: %d columns: %q", utf8.RuneCountInString(l), l)
		}
	}
	var raw map[string]any
	if out, err := binCommand(bin{}, "inventory", "--json", "--libnvidia-ml", simNVML).Output(); err != nil || json.Unmarshal(out, &raw) != nil {
		t.Errorf("inventory --json: %v", err)
	}
}
