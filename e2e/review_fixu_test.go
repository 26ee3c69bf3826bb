package e2e

import (
	"encoding/json"
	"fmt"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/retrivium/forensic/internal/e2eenv"
)

// The review's findings on the HTML report and the command line, checked
// on real recordings of the simulated GPU: pages that fit 800 and 1280 px
// windows in headless Chromium, words where ids were, a flight
// recording's header, and the command line's messages.

// fitScript runs in the page once it has loaded and lists, in a <pre
// id="fit">, everything wider than its box and every SVG text outside its
// picture.
const fitScript = `<script>window.addEventListener("load", function () {
  var o = [], W = document.documentElement.clientWidth;
  if (document.documentElement.scrollWidth > W) o.push("page " + document.documentElement.scrollWidth + " > " + W);
  document.querySelectorAll(".tablewrap,.svgwrap,section,header").forEach(function (e) {
    if (e.scrollWidth > e.clientWidth + 1) o.push((e.id || e.className) + " in #" + (e.closest("section,header") || {}).id + ": " + e.scrollWidth + " > " + e.clientWidth);
  });
  document.querySelectorAll("svg").forEach(function (sv) {
    var s = sv.getBoundingClientRect();
    sv.querySelectorAll("text").forEach(function (e) {
      var b = e.getBoundingClientRect();
      if (b.width > 0 && (b.left < s.left - 1 || b.right > s.right + 1)) o.push("svg text outside: " + e.textContent);
    });
  });
  var d = document.createElement("pre"); d.id = "fit"; d.textContent = "FIT[" + o.join("\n") + "]"; document.body.appendChild(d);
});</script>`

var fitResult = regexp.MustCompile(`(?s)<pre id="fit">FIT\[(.*?)\]</pre>`)

// notFitting loads page in a window width px wide and returns what does
// not fit in it.
func notFitting(t *testing.T, chrome, dir, page string, width int) []string {
	t.Helper()
	probe := filepath.Join(dir, fmt.Sprintf("fit-%d.html", width))
	data := strings.Replace(string(mustRead(t, page)), "</body>", fitScript+"</body>", 1)
	if err := os.WriteFile(probe, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	dom, _ := chromium(t, chrome, dir, "--dump-dom", "--hide-scrollbars", "--virtual-time-budget=3000",
		fmt.Sprintf("--window-size=%d,2000", width), "file://"+probe)
	m := fitResult.FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("%d px: the probe did not run", width)
	}
	if m[1] == "" {
		return nil
	}
	return strings.Split(html.UnescapeString(m[1]), "\n")
}

// pageText is the text a reader of page sees: no markup, no scripts.
func pageText(page string) string {
	page = regexp.MustCompile(`(?s)<(script|style)>.*?</(script|style)>`).ReplaceAllString(page, "")
	page = regexp.MustCompile(`<wbr>`).ReplaceAllString(page, "")
	return html.UnescapeString(regexp.MustCompile(`<[^>]*>`).ReplaceAllString(page, " "))
}

// A failure the process recovered from and one it did not, the second
// near the end of the run: every table and the timeline fit windows of
// 800 and 1280 px, their labels inside; the page names a process's
// scope once and says how devices were matched in words.
func TestReviewFixuHTMLFits(t *testing.T) {
	chrome := chromiumPath()
	e2eenv.Need(t, chrome != "", "headless Chromium is not installed (apt-get install chromium)")
	w := newWorld(t)
	res := w.record(nil, simwork, "init; use 0; repeat 14 { alloc 1G }; alloc 4G; repeat 4 { free }; alloc 4G; "+
		"sleep 300; repeat 3 { alloc 512M }; alloc 2G; free-all; exit 1")
	if res.code != 1 {
		t.Fatalf("record: exit %d\n%s", res.code, res.stderr)
	}
	page := filepath.Join(w.dir, "report.html")
	if r := forensic(t, nil, nil, nil, "report", res.db, "-o", page); r.code != 0 {
		t.Fatalf("report: %s", r.stderr)
	}
	for _, width := range []int{800, 1280} {
		if bad := notFitting(t, chrome, w.dir, page, width); len(bad) > 0 {
			t.Errorf("at %d px:\n  %s", width, strings.Join(bad, "\n  "))
		}
	}
	text := pageText(string(mustRead(t, page)))
	for _, bad := range []string{"null", "single-gpu", "matched by single", "order-same-model"} {
		if strings.Contains(text, bad) {
			t.Errorf("the page shows %q", bad)
		}
	}
	if m := regexp.MustCompile(`pid (\d+), pid (\d+)`).FindStringSubmatch(text); m != nil && m[1] == m[2] {
		t.Errorf("a scope names its process twice: %q", m[0])
	}
	for _, want := range []string{"the only GPU", "UNRECOVERED:", "FIRST:"} {
		if !strings.Contains(text, want) {
			t.Errorf("the page lacks %q", want)
		}
	}

	// A run without a failure: its capacity in words.
	ok := w.record(nil, simwork, "init; use 0; alloc 1M; free-all")
	if r := forensic(t, nil, nil, nil, "report", ok.db, "-o", page); r.code != 0 {
		t.Fatalf("report: %s", r.stderr)
	}
	if text := pageText(string(mustRead(t, page))); !strings.Contains(text, "capacity: none (no failure)") || strings.Contains(text, "null") {
		t.Errorf("a run without a failure: capacity not in words")
	}
}

// A flight recording's report says flight mode and how its segments were
// read, not just the mode its command was recorded in.
func TestReviewFixuFlightHeader(t *testing.T) {
	w := newWorld(t)
	script := `"$S" 'init; use 0; alloc 1G; sleep 1500; alloc 100G; sleep 1500'`
	fr := w.startFlight(script, "--segment-age", "1s")
	select {
	case err := <-fr.done:
		if err != nil {
			t.Fatalf("record: %v\n%s", err, fr.log.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the flight recording did not end")
	}
	page := filepath.Join(w.dir, "flight.html")
	if r := forensic(t, nil, nil, nil, "report", fr.dir, "-o", page); r.code != 0 {
		t.Fatalf("report: %s", r.stderr)
	}
	text := strings.Join(strings.Fields(pageText(string(mustRead(t, page)))), " ")
	for _, want := range []string{"recorded flight mode (spawn)", "segments read", "deleted nothing"} {
		if !strings.Contains(text, want) {
			t.Errorf("the header lacks %q", want)
		}
	}
	if strings.Contains(text, "recorded spawn mode on") {
		t.Error("the header calls a flight recording spawn mode")
	}
}

// The command line's messages as the review met them: a directory given
// as the run.db, a ring size whose suggestion is refused, a temporary
// file's name, a misleading export, cobra's and Go's jargon, flags with
// type names for values.
func TestReviewFixuCommandLine(t *testing.T) {
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
			r := forensic(t, w, nil, nil, tt.args...)
			if r.code != tt.code || !strings.Contains(r.stderr, tt.want) || strings.Contains(r.stderr, tt.notWant) {
				t.Errorf("exit %d (want %d), stderr %q: want %q, not %q", r.code, tt.code, r.stderr, tt.want, tt.notWant)
			}
			if n := len(lines(r.stderr)); n > 2 {
				t.Errorf("%d lines of stderr", n)
			}
		})
	}
	// What a refused --ring-size suggests is accepted.
	if r := forensic(t, w, nil, nil, append(sim(filepath.Join(w.dir, "r.db")), "--ring-size", "512MiB", "true")...); r.code != 0 {
		t.Errorf("the suggested --ring-size 512MiB: exit %d %s", r.code, r.stderr)
	}
	// A directory holding one run exports it; analyze names the directory.
	os.Remove(filepath.Join(runs, "b.db"))
	trace := filepath.Join(w.dir, "t.pftrace")
	if r := forensic(t, w, nil, nil, "export", runs, "-o", trace); r.code != 0 || !exists(trace) {
		t.Errorf("export of a directory with one run: exit %d %s", r.code, r.stderr)
	}
	os.WriteFile(filepath.Join(runs, "b.db"), mustRead(t, good), 0o600)
	if r := forensic(t, w, nil, nil, "analyze", runs); !strings.HasPrefix(r.stdout, "forensic analyze "+runs+" (2 files)\n") {
		t.Errorf("analyze %s: header %q", runs, lines(r.stdout)[0])
	}
	// Every flag value has a placeholder, never a Go type.
	for _, c := range []string{"record", "analyze", "report", "export", "inventory", "mark", "snapshot"} {
		r := forensic(t, nil, nil, nil, "help", c)
		if m := regexp.MustCompile(`(?m)^\s+(-\w, )?--[\w-]+ (string|int|uint|float|duration|strings|stringArray)\b`).FindString(r.stdout); m != "" {
			t.Errorf("help %s: %q", c, m)
		}
	}
	if r := forensic(t, nil, nil, nil, "help", "export"); !strings.Contains(r.stdout, "--format FORMAT") {
		t.Errorf("help export lacks --format FORMAT")
	}
}

// A locked run is refused with words that fit every command that reads
// it, not only analyze.
func TestReviewFixuLockedRun(t *testing.T) {
	w := newWorld(t)
	db, gate := filepath.Join(w.dir, "live.db"), filepath.Join(w.dir, "go")
	live := exec.Command(binPath, append(sim(db), "sh", "-c", "while [ ! -e "+gate+" ]; do sleep 0.05; done")...)
	live.Env = w.environ()
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
		r := forensic(t, nil, nil, nil, args...)
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
func TestReviewFixuMessages(t *testing.T) {
	w := newWorld(t)
	for i := range 5 {
		db := filepath.Join(w.dir, fmt.Sprintf("m%d.db", i))
		// No --libcuda: the library is attached when the workload maps it.
		r := forensic(t, w, []string{"COLUMNS=80"}, nil, "record", "-o", db, "--libnvidia-ml", simNVML, "--",
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
	r := forensic(t, w, nil, nil, "record", "-o", filepath.Join(w.dir, "n.db"), "--libnvidia-ml", simNVML, "--", simwork, "print hello")
	for _, l := range lines(r.stderr) {
		if strings.HasPrefix(l, " ") {
			t.Errorf("a message was wrapped for a log: %q", r.stderr)
			break
		}
	}
	inv := forensic(t, w, []string{"SIMGPU_DEVICES=2", "SIMGPU_MIG=2"}, nil, "inventory", "--libnvidia-ml", simNVML)
	if inv.code != 0 {
		t.Fatalf("inventory: %s", inv.stderr)
	}
	for _, l := range lines(inv.stdout) {
		if utf8.RuneCountInString(l) > 80 && !strings.HasPrefix(l, "NVML /") {
			t.Errorf("inventory: %d columns: %q", utf8.RuneCountInString(l), l)
		}
	}
	var raw map[string]any
	if out, err := exec.Command(binPath, "inventory", "--json", "--libnvidia-ml", simNVML).Output(); err != nil || json.Unmarshal(out, &raw) != nil {
		t.Errorf("inventory --json: %v", err)
	}
}
