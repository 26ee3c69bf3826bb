package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/retrivium/forensic/internal/e2eenv"
	"github.com/retrivium/forensic/report"
)

// chromiumPath finds headless Chromium (Debian's `chromium`).
func chromiumPath() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// chromium runs headless Chromium on a local file with a fresh profile and
// no network services, and returns its stdout and log (stderr).
func chromium(t *testing.T, bin, dir string, args ...string) (stdout, log string) {
	t.Helper()
	profile, err := os.MkdirTemp(dir, "chromium-profile-")
	if err != nil {
		t.Fatal(err)
	}
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + profile, "--enable-logging=stderr", "--v=0"}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+profile)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(args, " "), err, tail(errb.String(), 3000))
	}
	return out.String(), errb.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// pageErrors are the lines of Chromium's log that report the page's own
// console output or an uncaught exception.
var pageErrors = regexp.MustCompile(`(?m)^.*(CONSOLE[(:]\d+|Uncaught|SyntaxError|ReferenceError|TypeError).*$`)

// remoteRef matches a network resource load in HTML or CSS.
var remoteRef = regexp.MustCompile(`(?i)((?:src|href|action|poster|data)\s*=\s*["']?\s*(?:https?:)?//)|url\(\s*["']?\s*(?:https?:)?//|@import`)

type traceEvent struct {
	Ph   string          `json:"ph"`
	Name string          `json:"name"`
	Cat  string          `json:"cat"`
	PID  int64           `json:"pid"`
	TID  int64           `json:"tid"`
	TS   *float64        `json:"ts"`
	Dur  *float64        `json:"dur"`
	Args json.RawMessage `json:"args"`
}

// The weights_oom scenario rendered: `forensic report` writes a
// self-contained page that headless Chromium renders without a script
// error into a screenshot that is not blank, and `forensic export --format
// perfetto` writes a trace with a track per thread, a slice per call,
// separate framebuffer and BAR1 counters and the failure as an instant.
func TestRenderReportAndPerfetto(t *testing.T) {
	chrome := chromiumPath()
	e2eenv.Need(t, chrome != "", "headless Chromium is not installed (apt-get install chromium)")
	w := newWorld(t)
	res := w.record(nil, filepath.Join(simDir, "scenarios", "weights_oom"))
	if res.code != 1 {
		t.Fatalf("forensic record exit %d, want the workload's 1; stderr:\n%s", res.code, res.stderr)
	}
	rep, _ := analyzeJSON(t, res.db)
	if rep.FirstFailure == nil || rep.Capacity == nil || *rep.Capacity != report.CapFBExhausted {
		t.Fatalf("unexpected verdict %s / %v", rep.Attribution, rep.Capacity)
	}
	raw, err := binCommand(bin{}, "analyze", "--json", res.db).Output()
	if err != nil {
		t.Fatal(err)
	}
	if err := report.ValidateReportJSON(raw); err != nil {
		t.Errorf("analyze --json does not match docs/analyze.schema.json:\n%v", err)
	}

	// The two files, written by the CLI as users run it.
	page := filepath.Join(w.dir, "report.html")
	trace := filepath.Join(w.dir, "trace.json")
	for _, args := range [][]string{
		{"report", res.db, "-o", page},
		{"export", "--format", "chrome-json", res.db, "-o", trace},
	} {
		out, err := binCommand(bin{}, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("forensic %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if want := "wrote " + args[len(args)-1]; strings.TrimSpace(string(out)) != want {
			t.Errorf("forensic %s printed %q, want %q", args[0], out, want)
		}
	}
	// Writing over the run.db is refused, and leaves it intact.
	if out, err := binCommand(bin{}, "report", res.db, "-o", res.db).CombinedOutput(); err == nil {
		t.Errorf("report -o run.db was accepted: %s", out)
	} else if lines := strings.Count(strings.TrimSpace(string(out)), "\n"); lines != 0 {
		t.Errorf("the refusal is not one line: %q", out)
	}
	if _, err := binCommand(bin{}, "analyze", "--json", res.db).Output(); err != nil {
		t.Errorf("run.db unreadable after a refused report: %v", err)
	}

	checkPage(t, page, rep)
	checkRendered(t, chrome, w.dir, page)
	checkTrace(t, trace, res.db)
}

func checkPage(t *testing.T, path string, rep *report.Report) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	if m := remoteRef.FindAllString(s, -1); len(m) > 0 {
		t.Errorf("report.html loads external resources: %q", m)
	}
	if strings.Contains(s, "<link") || strings.Contains(s, "<script src") || strings.Contains(s, "<img") {
		t.Error("report.html links an external file")
	}
	// As a reader sees it: html/template escapes more than
	// html.EscapeString does ("+" too).
	if !strings.Contains(html.UnescapeString(s), rep.Verdict) {
		t.Error("report.html lacks the verdict")
	}
	for _, want := range []string{"cuMemAlloc_v2", "CUDA_ERROR_OUT_OF_MEMORY", "grow_kv_cache", "MiB = 2^20 bytes",
		`class="ptitle">Framebuffer<`, `class="ptitle">BAR1 aperture<`} {
		if !strings.Contains(s, want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	if strings.Contains(strings.ToLower(s), "total gpu memory") {
		t.Error("report.html shows a total GPU memory")
	}
}

func checkRendered(t *testing.T, chrome, dir, page string) {
	t.Helper()
	url := "file://" + page
	// The DOM after scripts ran: the timeline script marks the page.
	dom, log := chromium(t, chrome, dir, "--dump-dom", url)
	if m := pageErrors.FindAllString(log, -1); len(m) > 0 {
		t.Errorf("JavaScript errors while loading report.html:\n%s", strings.Join(m, "\n"))
	}
	if !strings.Contains(dom, `data-timeline-ready="1"`) {
		t.Errorf("the page's script did not run to the end (no data-timeline-ready in the DOM)")
	}
	shot := filepath.Join(dir, "report.png")
	_, log = chromium(t, chrome, dir, "--screenshot="+shot, "--window-size=1280,2000", "--hide-scrollbars", url)
	if m := pageErrors.FindAllString(log, -1); len(m) > 0 {
		t.Errorf("JavaScript errors while rendering report.html:\n%s", strings.Join(m, "\n"))
	}
	if d := os.Getenv("FORENSIC_SCREENSHOT_DIR"); d != "" {
		if data, err := os.ReadFile(shot); err == nil {
			os.WriteFile(filepath.Join(d, "report.png"), data, 0o644)
			os.WriteFile(filepath.Join(d, "report.html"), mustRead(t, page), 0o644)
		}
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	colours, nonWhite, total := pngStats(img)
	t.Logf("screenshot %v: %d distinct colours, %.1f%% non-white", img.Bounds().Size(), colours, 100*float64(nonWhite)/float64(total))
	if b := img.Bounds(); b.Dx() < 1000 || b.Dy() < 1000 {
		t.Errorf("screenshot is %v, want about 1280x2000", b.Size())
	}
	if colours < 64 {
		t.Errorf("screenshot has %d distinct colours: blank or unstyled", colours)
	}
	if frac := float64(nonWhite) / float64(total); frac < 0.05 {
		t.Errorf("screenshot is %.1f%% non-white: blank", 100*frac)
	}
}

func mustRead(t *testing.T, p string) []byte {
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// pngStats counts distinct colours and pixels that are not white.
func pngStats(img image.Image) (colours, nonWhite, total int) {
	seen := map[uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			r, g, bl = r>>8, g>>8, bl>>8
			seen[r<<16|g<<8|bl] = true
			if r < 250 || g < 250 || bl < 250 {
				nonWhite++
			}
			total++
		}
	}
	return len(seen), nonWhite, total
}

func checkTrace(t *testing.T, path, db string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents     []traceEvent `json:"traceEvents"`
		DisplayTimeUnit string       `json:"displayTimeUnit"`
	}
	if err := json.Unmarshal(data, &tr); err != nil {
		t.Fatalf("trace.json is not JSON: %v", err)
	}
	_, evs, _ := stored(t, db)
	threads := map[[2]int64]bool{}
	procs := map[int64]string{}
	slices := 0
	counters := map[string]int{}
	failure := false
	for _, e := range tr.TraceEvents {
		switch e.Ph {
		case "M":
			var a struct{ Name string }
			json.Unmarshal(e.Args, &a)
			if e.Name == "thread_name" && a.Name != "" {
				threads[[2]int64{e.PID, e.TID}] = true
			}
			if e.Name == "process_name" {
				procs[e.PID] = a.Name
			}
		case "X":
			slices++
			if e.TS == nil || e.Dur == nil {
				t.Errorf("slice %q without ts or dur", e.Name)
			}
		case "C":
			counters[e.Name]++
		case "i":
			if e.Cat == "failure" && strings.Contains(e.Name, "cuMemAlloc_v2") && strings.Contains(e.Name, "CUDA_ERROR_OUT_OF_MEMORY") {
				failure = true
			}
		}
	}
	if slices != len(evs) {
		t.Errorf("%d slices for %d stored calls", slices, len(evs))
	}
	for _, e := range evs {
		k := [2]int64{int64(e.PID), int64(e.TID)}
		if !threads[k] {
			t.Errorf("no thread_name for pid %d tid %d", e.PID, e.TID)
		}
		if name := procs[int64(e.PID)]; !strings.HasSuffix(name, "/weights_oom") {
			t.Errorf("process %d is named %q, want its command line, weights_oom", e.PID, name)
		}
	}
	for _, want := range []string{"GPU 0 framebuffer used", "GPU 0 framebuffer free", "GPU 0 BAR1 used", "GPU 0 BAR1 free"} {
		if counters[want] == 0 {
			t.Errorf("no counter %q in %v", want, keys(counters))
		}
	}
	for name := range counters {
		l := strings.ToLower(name)
		if strings.Contains(l, "framebuffer") && strings.Contains(l, "bar1") {
			t.Errorf("counter %q combines framebuffer and BAR1", name)
		}
	}
	if !failure {
		t.Error("no instant event for the failed cuMemAlloc_v2")
	}
	if tr.DisplayTimeUnit != "ns" {
		t.Errorf("displayTimeUnit %q", tr.DisplayTimeUnit)
	}
}

func keys(m map[string]int) string {
	var out []string
	for k := range m {
		out = append(out, fmt.Sprintf("%q", k))
	}
	return strings.Join(out, ", ")
}

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
func TestHTMLFitsWindows(t *testing.T) {
	chrome := chromiumPath()
	e2eenv.Need(t, chrome != "", "headless Chromium is not installed (apt-get install chromium)")
	w := newWorld(t)
	res := w.record(nil, simwork, "init; use 0; repeat 14 { alloc 1G }; alloc 4G; repeat 4 { free }; alloc 4G; "+
		"sleep 300; repeat 3 { alloc 512M }; alloc 2G; free-all; exit 1")
	if res.code != 1 {
		t.Fatalf("record: exit %d\n%s", res.code, res.stderr)
	}
	page := filepath.Join(w.dir, "report.html")
	if r := runBin(t, bin{}, "report", res.db, "-o", page); r.code != 0 {
		t.Fatalf("report: %s", r.stderr)
	}
	for _, width := range []int{800, 1280} {
		if bad := notFitting(t, chrome, w.dir, page, width); len(bad) > 0 {
			t.Errorf("at %d px:\n  %s", width, strings.Join(bad, "\n  "))
		}
	}
	text := pageText(string(mustRead(t, page)))
	if strings.Contains(text, "null") {
		t.Error("the page shows \"null\"")
	}
	// How the device was matched is said in words, not as the JSON's id.
	rep, _ := analyzeJSON(t, res.db)
	if rep.FirstFailure == nil || !strings.Contains(text, report.MappingWords(rep.FirstFailure.GPUMapping)) {
		t.Errorf("the page does not say in words how the failing call's device was matched (%+v)", rep.FirstFailure)
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
	if r := runBin(t, bin{}, "report", ok.db, "-o", page); r.code != 0 {
		t.Fatalf("report: %s", r.stderr)
	}
	if text := pageText(string(mustRead(t, page))); !strings.Contains(text, "capacity: none (no failure)") || strings.Contains(text, "null") {
		t.Errorf("a run without a failure: capacity not in words")
	}
}
