package e2e

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/retrivium/forensic/internal/e2eenv"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
	bolt "go.etcd.io/bbolt"
)

var (
	secretO2     = filepath.Join(simDir, "scenarios", "secret_o2")
	libSecret    = filepath.Join(simDir, "scenarios", "libsecret.so")
	ctypesSecret = filepath.Join(repo, "testdata", "stacks", "ctypes_secret.py")
)

// theSecret is what the privacy workloads keep on their stacks at the
// failed call (decoded at run time: it is in no file).
const theSecret = "FORENSIC-SECRET-7f3a9c51-token"

// secretWorkload is one of the privacy workloads: how to run it and the
// functions its failure's stack must name, innermost first.
type secretWorkload struct {
	name    string
	command func(w *world) []string
	check   func(t *testing.T, st *report.Stack)
	// withArg is the command with one more argument, which the workload
	// ignores.
	withArg func(w *world, arg string) []string
}

func secretWorkloads(t *testing.T) []secretWorkload {
	e2eenv.Need(t, exists(secretO2) && exists(libSecret), "secret_o2 is not built (run make)")
	e2eenv.Need(t, exists(debPython), "Debian's /usr/bin/python3 is not installed (scripts/deps.sh test)")
	return []secretWorkload{
		{"C -O2", func(w *world) []string { return []string{secretO2, simCUDA} }, func(t *testing.T, st *report.Stack) {
			if names := functions(st); !inOrder(names, []string{"handle_request", "serve", "main"}) || st.Partial {
				t.Errorf("stack %q (partial %v, %s); want handle_request, serve, main to the outermost frame", names,
					st.Partial, st.Note)
			}
		}, func(w *world, arg string) []string { return []string{secretO2, simCUDA, "0x10000000000", arg} }},
		{"Python ctypes", func(w *world) []string { return []string{debPython, ctypesSecret, simCUDA} },
			func(t *testing.T, st *report.Stack) {
				m := marks(t, ctypesSecret)
				var got []string
				for _, f := range st.Frames {
					if f.Language == report.LangPython {
						got = append(got, f.Function+":"+filepath.Base(f.File)+":"+strconv.Itoa(f.Line))
					}
				}
				want := []string{"handle_request:ctypes_secret.py:" + strconv.Itoa(m["alloc"]),
					"main:ctypes_secret.py:" + strconv.Itoa(m["main"]), "<module>:ctypes_secret.py:" + strconv.Itoa(m["module"])}
				if strings.Join(got, " ") != strings.Join(want, " ") || st.Python != "ok" {
					t.Errorf("Python frames %q (python %q); want %q", got, st.Python, want)
				}
			}, func(w *world, arg string) []string { return []string{debPython, ctypesSecret, simCUDA, arg} }},
	}
}

// holdsSecret lists the files under root (a file or a directory) that
// hold the secret's text.
func holdsSecret(t *testing.T, root string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if bytes.Contains(fileText(t, p), []byte(theSecret)) {
			found = append(found, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// fileText is a file's bytes and, for a run.db, its named stacks
// inflated (they are stored deflated, where a plain search sees nothing).
func fileText(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(p, ".db") {
		return b
	}
	r, err := store.Open(p)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	defer r.Close()
	err = r.Each(func(v store.Value) error {
		if v.Bucket == "named" {
			js, err := store.NamedJSON(v.Val)
			b = append(b, js...)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// forensicOK runs forensic with args and fails the test on an error.
func forensicOK(t *testing.T, args ...string) []byte {
	t.Helper()
	out, err := binCommand(bin{}, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("forensic %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// exportAll writes every export of a recording (a run.db or a flight
// directory) into dir: the --json analysis, the HTML report, the Perfetto
// and Chrome traces and, for a run.db, Parquet.
func exportAll(t *testing.T, src, dir string) {
	t.Helper()
	out := forensicOK(t, "analyze", "--json", src)
	if err := os.WriteFile(filepath.Join(dir, "analysis.json"), out, 0o600); err != nil {
		t.Fatal(err)
	}
	text := forensicOK(t, "analyze", "--no-color", src)
	os.WriteFile(filepath.Join(dir, "analysis.txt"), text, 0o600)
	forensicOK(t, "report", src, "-o", filepath.Join(dir, "report.html"))
	forensicOK(t, "export", src, "-o", filepath.Join(dir, "trace.pftrace"))
	forensicOK(t, "export", "--format", "chrome-json", src, "-o", filepath.Join(dir, "trace.json"))
	if st, err := os.Stat(src); err == nil && !st.IsDir() {
		forensicOK(t, "export", "--format", "parquet", "-o", filepath.Join(dir, "parquet"), src)
	}
}

// A secret kept in a stack buffer of the function that makes the failing
// call (C at -O2, and Python through ctypes) reaches no byte of run.db or
// of any export, with and without --stacks, while the failure's stack is
// still named: the recorder names stacks while it records and keeps no
// stack bytes.
func TestSecretOnTheStackStaysOut(t *testing.T) {
	for _, wl := range secretWorkloads(t) {
		for _, flags := range [][]string{nil, {"--stacks"}} {
			t.Run(wl.name+" "+strings.Join(flags, " "), func(t *testing.T) {
				w := newWorld(t)
				res := w.record(flags, wl.command(w)...)
				if res.code != 1 {
					t.Fatalf("exit %d, want 1; stderr:\n%s", res.code, res.stderr)
				}
				rep, _ := analyzeJSON(t, res.db)
				if rep.FirstFailure == nil || rep.FirstFailure.Stack == nil || rep.FirstFailure.Stack.Method != "unwound" {
					t.Fatalf("first failure %+v: want an unwound stack", rep.FirstFailure)
				}
				wl.check(t, rep.FirstFailure.Stack)
				noRawCapture(t, res.db)
				exports := filepath.Join(w.dir, "exports")
				os.Mkdir(exports, 0o700)
				exportAll(t, res.db, exports)
				if found := append(holdsSecret(t, res.db), holdsSecret(t, exports)...); len(found) > 0 {
					t.Errorf("the secret is in %q", found)
				}
			})
		}
	}
}

// noRawCapture checks that no failure of a run.db has a raw capture.
func noRawCapture(t *testing.T, db string) {
	t.Helper()
	r, err := store.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	err = r.Failures(func(e *store.Event) error {
		c, err := r.Capture(e.PID, e.TID, e.End)
		if c != nil {
			t.Errorf("a raw capture of %d stack bytes is stored for %s", len(c.Stack), e.Name)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Under --keep-stack-bytes the raw capture is kept, and it holds the
// secret (so the workloads really put it where the probe copies, and the
// test above could fail); the stack the analysis shows is the same as
// without the bytes.
func TestKeepStackBytesKeepsTheCopy(t *testing.T) {
	for _, wl := range secretWorkloads(t) {
		t.Run(wl.name, func(t *testing.T) {
			w := newWorld(t)
			res := w.record([]string{"--keep-stack-bytes"}, wl.command(w)...)
			if res.code != 1 {
				t.Fatalf("exit %d, want 1; stderr:\n%s", res.code, res.stderr)
			}
			rep, _ := analyzeJSON(t, res.db)
			if rep.FirstFailure == nil || rep.FirstFailure.Stack == nil {
				t.Fatalf("first failure %+v", rep.FirstFailure)
			}
			wl.check(t, rep.FirstFailure.Stack)
			r, err := store.Open(res.db)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			var c *store.Capture
			err = r.Failures(func(e *store.Event) error {
				if c == nil {
					c, err = r.Capture(e.PID, e.TID, e.End)
				}
				return err
			})
			if err != nil || c == nil {
				t.Fatalf("raw capture of the failure: %v, %v", c, err)
			}
			if !bytes.Contains(c.Stack, []byte(theSecret)) {
				t.Errorf("the %d stack bytes kept do not hold the secret", len(c.Stack))
			}
			if !r.Run().KeepStackBytes {
				t.Error("the run record does not say the stack bytes were kept")
			}
		})
	}
}

// A flight recording of the same failure: no segment and no export of the
// directory holds the secret.
func TestSecretOutOfFlightRecording(t *testing.T) {
	w := newWorld(t)
	secretWorkloads(t)
	dir := filepath.Join(w.dir, "flight")
	cmd := binCommand(bin{w: w}, "record", "--flight", "-o", dir, "--libcuda", simCUDA, "--libnvidia-ml", simNVML,
		"--", secretO2, simCUDA)
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("the workload did not fail:\n%s", out)
	}
	rep, _ := analyzeJSON(t, dir)
	if rep.FirstFailure == nil || rep.FirstFailure.Stack == nil ||
		!inOrder(functions(rep.FirstFailure.Stack), []string{"handle_request", "serve", "main"}) {
		t.Fatalf("first failure %+v: want its named stack", rep.FirstFailure)
	}
	exports := filepath.Join(w.dir, "exports")
	os.Mkdir(exports, 0o700)
	exportAll(t, dir, exports)
	if found := append(holdsSecret(t, dir), holdsSecret(t, exports)...); len(found) > 0 {
		t.Errorf("the secret is in %q", found)
	}
}

// A run.db analyzed after the workload's binary and its private library
// were deleted gives the same --json, byte for byte: its stacks were
// named while the files were there.
func TestAnalysisWithoutTheRecordedFiles(t *testing.T) {
	w := newWorld(t)
	secretWorkloads(t)
	bin := filepath.Join(w.dir, "app")
	os.Mkdir(bin, 0o755)
	for _, f := range []string{secretO2, libSecret} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bin, filepath.Base(f)), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	res := w.record(nil, filepath.Join(bin, "secret_o2"), simCUDA)
	if res.code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", res.code, res.stderr)
	}
	before := forensicOK(t, "analyze", "--json", res.db)
	rep, _ := analyzeJSON(t, res.db)
	if st := rep.FirstFailure.Stack; st == nil || !inOrder(functions(st), []string{"handle_request", "serve", "main"}) {
		t.Fatalf("stack before deleting the files: %+v", st)
	}
	if err := os.RemoveAll(bin); err != nil {
		t.Fatal(err)
	}
	after := forensicOK(t, "analyze", "--json", res.db)
	if !bytes.Equal(before, after) {
		t.Errorf("--json changed once the recorded files were gone:\nbefore %s\nafter  %s", before, after)
	}
}

// sensitiveStrings lists what the redacted copy of a run must not hold:
// every process argument (but a program's bare name) and every user path
// the original names (the run's command, processes' arguments and
// programs, libraries, files, stack frames), and the host's name and ids.
func sensitiveStrings(t *testing.T, db string, rep map[string]any) []string {
	t.Helper()
	r, err := store.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []string
	add := func(s string, arg bool) {
		system := false
		for _, d := range []string{"/usr/", "/lib/", "/lib64/", "/bin/", "/etc/", "/proc/"} {
			system = system || strings.HasPrefix(s, d)
		}
		if len(s) >= 4 && !system && (arg || strings.Contains(s, "/")) {
			out = append(out, s)
		}
	}
	run := r.Run()
	for i, a := range run.Command {
		add(a, i > 0)
	}
	procs, err := r.Processes()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		for i, a := range p.Args {
			add(a, i > 0)
		}
		add(p.Exe, false)
		for _, m := range p.Maps {
			add(m.Path, false)
		}
	}
	libs, _ := r.Libraries()
	for _, l := range libs {
		add(l.Path, false)
	}
	for _, f := range rep["first_failure"].(map[string]any)["stack"].(map[string]any)["frames"].([]any) {
		if file, ok := f.(map[string]any)["file"].(string); ok {
			add(file, false)
		}
	}
	if id := run.Identity; id != nil {
		out = append(out, id.MachineID, id.BootID)
	}
	if h := run.Hostname; len(h) >= 6 {
		out = append(out, h)
	}
	return out
}

// verdictOf is what must not change in a redacted copy: the verdict and
// every number, with the stacks' function names (their files are
// redacted) and no names of files or processes, wherever they appear
// (the first failures, the headroom's call, the budget's parts).
func verdictOf(raw map[string]any) map[string]any {
	out := map[string]any{}
	for _, k := range []string{"attribution", "capacity", "missing", "evidence", "memory_views", "loss", "headroom",
		"near_miss", "budget", "first_failure", "first_unrecovered"} {
		out[k] = withoutNames(raw[k])
	}
	return out
}

// withoutNames copies a decoded JSON value without the keys that name
// files or processes, and with each stack reduced to its function names.
func withoutNames(v any) any {
	switch v := v.(type) {
	case map[string]any:
		g := map[string]any{}
		for k, x := range v {
			switch k {
			case "run_path", "command":
			case "stack":
				st, _ := x.(map[string]any)
				frames, _ := st["frames"].([]any)
				var names []any
				for _, fr := range frames {
					names = append(names, fr.(map[string]any)["function"])
				}
				g[k] = names
			default:
				g[k] = withoutNames(x)
			}
		}
		return g
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = withoutNames(x)
		}
		return out
	}
	return v
}

// A redacted copy analyzes to the same attribution, capacity and numbers
// (and the same stack functions); no argument or user path of the
// original, and not the host's name or ids, appears in any byte of it;
// the original is unchanged. A flight recording's directory is redacted
// the same way.
func TestRedactedCopy(t *testing.T) {
	for _, wl := range secretWorkloads(t) {
		t.Run(wl.name, func(t *testing.T) {
			w := newWorld(t)
			res := w.record(nil, wl.withArg(w, "--customer=acme-corp-42")...)
			if res.code != 1 {
				t.Fatalf("exit %d, want 1; stderr:\n%s", res.code, res.stderr)
			}
			orig, err := os.ReadFile(res.db)
			if err != nil {
				t.Fatal(err)
			}
			_, raw := analyzeJSON(t, res.db)
			copyDB := filepath.Join(w.dir, "ticket.db")
			forensicOK(t, "redact", "-o", copyDB, res.db)
			if after, _ := os.ReadFile(res.db); !bytes.Equal(after, orig) {
				t.Error("redact changed the original")
			}
			_, red := analyzeJSON(t, copyDB)
			if raw["attribution"] != "allocation" || raw["capacity"] != "framebuffer-exhausted" {
				t.Fatalf("original: attribution %v, capacity %v", raw["attribution"], raw["capacity"])
			}
			a, b := mustJSON(t, verdictOf(raw)), mustJSON(t, verdictOf(red))
			if a != b {
				t.Errorf("the copy's verdict differs:\noriginal %s\ncopy     %s", a, b)
			}
			data := fileText(t, copyDB)
			if !bytes.Contains(data, []byte("handle_request")) {
				t.Fatal("the copy's named stacks were not searched")
			}
			secrets := sensitiveStrings(t, res.db, raw)
			t.Logf("%d arguments, paths and host ids checked absent: %q", len(secrets), secrets)
			if !slices.Contains(secrets, "--customer=acme-corp-42") {
				t.Fatalf("the argument to redact is not among the run's: %q", secrets)
			}
			for _, s := range secrets {
				if bytes.Contains(data, []byte(s)) {
					t.Errorf("the redacted copy holds %q", s)
				}
			}
			if h := red["run"].(map[string]any)["host"]; h == raw["run"].(map[string]any)["host"] {
				t.Errorf("the copy's host is %v, as the original's", h)
			}
		})
	}
	t.Run("flight directory", func(t *testing.T) {
		w := newWorld(t)
		dir := filepath.Join(w.dir, "flight")
		cmd := binCommand(bin{w: w}, "record", "--flight", "-o", dir, "--libcuda", simCUDA, "--libnvidia-ml", simNVML,
			"--", secretO2, simCUDA, "0x10000000000", "--customer=acme-corp-42")
		if out, err := cmd.CombinedOutput(); err == nil {
			t.Fatalf("the workload did not fail:\n%s", out)
		}
		_, raw := analyzeJSON(t, dir)
		out := filepath.Join(w.dir, "flight-ticket")
		forensicOK(t, "redact", dir, "-o", out)
		_, red := analyzeJSON(t, out)
		if a, b := mustJSON(t, verdictOf(raw)), mustJSON(t, verdictOf(red)); a != b {
			t.Errorf("the copy's verdict differs:\noriginal %s\ncopy     %s", a, b)
		}
		for _, s := range []string{"acme-corp-42", filepath.Dir(secretO2), repo} {
			err := filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				if bytes.Contains(fileText(t, p), []byte(s)) {
					t.Errorf("%s holds %q", p, s)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	})
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A run.db written before the recorder named stacks holds only the raw
// captures: analyze still unwinds and names them, as it did, and its
// redacted copy keeps the stacks without the bytes. Made here from a
// --keep-stack-bytes recording whose named stacks are removed.
func TestRawCapturesStillAnalyze(t *testing.T) {
	for _, wl := range secretWorkloads(t) {
		t.Run(wl.name, func(t *testing.T) {
			w := newWorld(t)
			res := w.record([]string{"--keep-stack-bytes"}, wl.command(w)...)
			if res.code != 1 {
				t.Fatalf("exit %d, want 1; stderr:\n%s", res.code, res.stderr)
			}
			named, _ := analyzeJSON(t, res.db)
			db, err := bolt.Open(res.db, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte("named")) })
			db.Close()
			if err != nil {
				t.Fatalf("removing the named stacks: %v", err)
			}
			rawRep, _ := analyzeJSON(t, res.db)
			st := rawRep.FirstFailure.Stack
			if st == nil || st.Method != "unwound" {
				t.Fatalf("stack from the raw capture: %+v", st)
			}
			wl.check(t, st)
			a, b := functions(named.FirstFailure.Stack), functions(st)
			if strings.Join(a, " ") != strings.Join(b, " ") || named.FirstFailure.Stack.Stop != st.Stop {
				t.Errorf("named when recorded: %q (%s)\nnamed from the raw capture: %q (%s)", a,
					named.FirstFailure.Stack.Stop, b, st.Stop)
			}
			// Its redacted copy leaves the raw bytes out and keeps the
			// stack, named by the redaction.
			copyDB := filepath.Join(w.dir, "ticket.db")
			forensicOK(t, "redact", "-o", copyDB, res.db)
			noRawCapture(t, copyDB)
			red, _ := analyzeJSON(t, copyDB)
			if c := functions(red.FirstFailure.Stack); strings.Join(c, " ") != strings.Join(a, " ") {
				t.Errorf("the redacted copy's stack %q, want %q", c, a)
			}
			if found := holdsSecret(t, copyDB); len(found) > 0 {
				t.Errorf("the secret is in the redacted copy of a --keep-stack-bytes run")
			}
		})
	}
}
