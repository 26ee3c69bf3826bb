package html

import (
	"bytes"
	"errors"
	"html/template"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/retrivium/forensic/analyze"
	"github.com/retrivium/forensic/internal/runfixture"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

func analyzed(t testing.TB, path string) *report.Report {
	t.Helper()
	r, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rep, err := analyze.Analyze(r, analyze.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// External resource loads: src=, href=, xlink:href=, url(...), @import
// naming a network URL (or a protocol-relative one).
var remoteRef = regexp.MustCompile(`(?i)((?:src|href|action|poster|data)\s*=\s*["']?\s*(?:https?:)?//)|url\(\s*["']?\s*(?:https?:)?//|@import`)

func TestOutputHTML(t *testing.T) {
	rep := analyzed(t, runfixture.BuildRun(t, 0))
	var buf bytes.Buffer
	if err := Write(&buf, rep); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	checkHTML(t, page, rep)
	for _, want := range []string{"GPU 0", "GPU 1", "weights loaded", "Xid 31", "python3.11", "serve",
		"framebuffer-exhausted", "attribution: allocation"} {
		if !strings.Contains(page, want) {
			t.Errorf("the HTML report lacks %q", want)
		}
	}
	// Each GPU gets a framebuffer panel and a separate BAR1 panel.
	if n := strings.Count(page, `class="ptitle">Framebuffer<`); n != 2 {
		t.Errorf("%d framebuffer panels, want 2", n)
	}
	if n := strings.Count(page, `class="ptitle">BAR1 aperture<`); n != 2 {
		t.Errorf("%d BAR1 panels, want 2", n)
	}
	if strings.Contains(page, `id="runs"`) {
		t.Error("a report on one run has a Runs section")
	}
	// Every failure is drawn on its own.
	if n := strings.Count(page, `<g class="fail">`); n != len(rep.Failures) {
		t.Errorf("%d failure marks for %d failures", n, len(rep.Failures))
	}
}

// checkHTML holds the checks every HTML report passes.
func checkHTML(t *testing.T, page string, rep *report.Report) {
	t.Helper()
	if !strings.HasPrefix(page, "<!DOCTYPE html>") || !strings.HasSuffix(strings.TrimSpace(page), "</html>") {
		t.Error("not a complete HTML document")
	}
	if m := remoteRef.FindAllString(page, -1); len(m) > 0 {
		t.Errorf("the report loads external resources: %q", m)
	}
	if strings.Contains(page, "<link") || strings.Contains(page, "<script src") || strings.Contains(page, "<img") {
		t.Error("the report links an external file")
	}
	if !strings.Contains(page, htmlEsc(rep.Verdict)) {
		t.Error("the report lacks the verdict text")
	}
	if n := strings.Count(page, "MiB = 2^20 bytes"); n != 1 {
		t.Errorf("the MiB conversion is declared %d times, want once", n)
	}
	if strings.Contains(strings.ToLower(page), "total gpu memory") {
		t.Error("the report shows a total GPU memory")
	}
	// ZgotmplZ: html/template refused a value in an unsafe context.
	for _, bad := range []string{"NaN", "+Inf", "-Inf", "%!", "ZgotmplZ"} {
		if strings.Contains(page, bad) {
			t.Errorf("the report contains %q", bad)
		}
	}
	// The verdict comes before everything else.
	v, e, tl, mv := strings.Index(page, `id="verdict"`), strings.Index(page, `id="evidence"`), strings.Index(page, `id="timeline"`), strings.Index(page, `id="memory-views"`)
	if !(v >= 0 && v < e && e < tl && tl < mv) {
		t.Errorf("section order verdict %d, evidence %d, timeline %d, memory views %d", v, e, tl, mv)
	}
}

// htmlEsc is s as html/template writes it in text (which escapes more
// than template.HTMLEscapeString: "+" too).
func htmlEsc(s string) string {
	var b strings.Builder
	if err := template.Must(template.New("").Parse("{{.}}")).Execute(&b, s); err != nil {
		panic(err)
	}
	return b.String()
}

// A process with many calls is drawn as bins; the output stays small,
// failures stay individual, and the exports stream.
func TestOutputScale(t *testing.T) {
	const extra = 200_000
	path := runfixture.BuildRun(t, extra)
	rep := analyzed(t, path)
	var buf bytes.Buffer
	if err := Write(&buf, rep); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	checkHTML(t, page, rep)
	if buf.Len() > 1<<20 {
		t.Errorf("HTML of a %d-call run is %d bytes; calls should be binned", extra, buf.Len())
	}
	if !strings.Contains(page, "(binned)") {
		t.Error("the busy process is not drawn as bins")
	}
	if n := strings.Count(page, `<g class="fail">`); n != 1 {
		t.Errorf("%d failure marks, want 1", n)
	}
}

// A run without failures and without any sample (NVML did not start) still
// renders, says so, and never draws a missing value as zero.
func TestOutputHTMLWithoutSamples(t *testing.T) {
	rep := analyzed(t, runfixture.BuildRunNoFailure(t))
	var buf bytes.Buffer
	if err := Write(&buf, rep); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	checkHTML(t, page, rep)
	if !strings.Contains(page, "No recorded call failed") {
		t.Error("the report does not say that no call failed")
	}
	if strings.Contains(page, `class="ptitle">Framebuffer<`) {
		t.Error("a framebuffer panel is drawn without any GPU")
	}
}

// What the report model has beyond the first failure: the first
// unrecovered failure (judged on its own, shown first), next steps,
// grants, where a size came from, an interrupted run, and evidence with
// the decisive value first and the rule that decided each.
func TestOutputHTMLUnrecovered(t *testing.T) {
	rep := analyzed(t, runfixture.BuildRun(t, 0))
	rep.FirstFailure.Recovered = true
	rep.Failures[0].Recovered = true
	gpu1, size := 1, uint64(2<<20)
	bar := report.CapBAR1Exhausted
	later := report.Failure{Symbol: "cuIpcOpenMemHandle_v2", Operation: "mapping", Result: 205,
		ResultName: "CUDA_ERROR_MAP_FAILED", PID: 4242, TID: 4242, TimeNS: rep.FirstFailure.TimeNS + 100_000_000,
		Size: &size, SizeSource: "the exporter's cuMemAlloc_v2 (pid 4300)", GPUIndex: &gpu1, GPUMapping: "uuid",
		Grants: []report.Grant{{Location: "device", CUDADevice: 1, GPU: &gpu1, Access: "read-write", Peer: true}}}
	rep.Failures = append(rep.Failures, later)
	rep.FirstUnrecovered = &report.Judged{Failure: later, Attribution: report.AttrMapping, Capacity: &bar,
		Verdict: "The first unrecovered failure is cuIpcOpenMemHandle_v2: the BAR1 aperture of GPU 1 was full.",
		Evidence: []report.Evidence{{Field: "BAR1 free at the failure", Value: &size, Unit: "bytes", Status: "NVML_SUCCESS",
			GPU: &gpu1, Rule: "bar1-only-on-aperture-paths", Decisive: true}}}
	rep.Run.Interrupted = "SIGTERM"
	var buf bytes.Buffer
	if err := Write(&buf, rep); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	checkHTML(t, page, rep)
	at := func(s string) int {
		i := strings.Index(page, s)
		if i < 0 {
			t.Errorf("the page lacks %q", s)
		}
		return i
	}
	verdict, unrec, recovered, evidence := at(`id="verdict"`), at(`id="first-unrecovered"`), at("First failure (recovered)"), at(`id="evidence"`)
	if !(verdict < unrec && unrec < recovered && recovered < evidence) {
		t.Errorf("order verdict %d, first unrecovered %d, recovered first failure %d, evidence %d", verdict, unrec, recovered, evidence)
	}
	for _, want := range []string{htmlEsc(rep.FirstUnrecovered.Verdict), "attribution: mapping", "capacity: bar1-exhausted",
		htmlEsc(later.SizeSource), "through the owner&#39;s BAR1 aperture", "interrupted by SIGTERM", "bar1-only-on-aperture-paths",
		"first unrecovered failure: cuIpcOpenMemHandle_v2", "Rules of evidence named above", htmlEsc(ruleLine("bar1-only-on-aperture-paths"))} {
		at(want)
	}
	if at(htmlEsc(rep.NextSteps[0])) > evidence {
		t.Error("the next steps come after the evidence")
	}
	// In the run's evidence table the decisive value comes first.
	body := page[evidence:]
	body = body[strings.Index(body, "<tbody>")+len("<tbody>"):]
	if !strings.HasPrefix(strings.TrimSpace(body), `<tr class="decisive">`) {
		t.Error("the evidence table does not start with the decisive value")
	}
}

// A report on several runs of one job: a Runs section after the verdict,
// with the picture, the runs, the candidates with their own verdicts and
// the consequences; the rest of the page is the chosen run's.
func TestOutputHTMLRuns(t *testing.T) {
	base := runfixture.BuildRun(t, 0)
	for _, tc := range []struct {
		job  string
		want []string
	}{
		{"certain", []string{"order of their first failures: certain", `class="norun">no run<`, "rank 3 of the job&#39;s 4 has no run",
			"27 ms to 33 ms later", "exact: one boot, one clock", `class="ptitle">Around the failures<`}},
		{"overlap", []string{"order of their first failures: uncertain", `class="overlap"`, "Failures that could have come first",
			"attribution: mapping", "overlap by 2 ms", "could have come first"}},
		{"no bound", []string{"could have come first · no clock bound", "a clock with no error bound", "no clock error bound"}},
	} {
		rep := analyzed(t, base)
		m := *testJobs()[tc.job].MultiRun
		m.Runs = append([]report.RunRef(nil), m.Runs...)
		m.Candidates = append([]report.Candidate(nil), m.Candidates...)
		for i := range m.Runs {
			if m.Runs[i].Path == "job/b.db" {
				m.Runs[i].Path = rep.Run.Path
			}
		}
		for i := range m.Candidates {
			if m.Candidates[i].RunPath == "job/b.db" {
				m.Candidates[i].RunPath = rep.Run.Path
			}
		}
		rep.MultiRun = &m
		rep.Run.WallStartNS, rep.Run.ClockErrorNS = wF-(rep.FirstFailure.TimeNS-rep.Run.StartNS), i64(2*ms)
		var buf bytes.Buffer
		if err := Write(&buf, rep); err != nil {
			t.Fatal(err)
		}
		page := buf.String()
		checkHTML(t, page, rep)
		for _, want := range append(tc.want, `id="runs-svg"`, "this page", htmlEsc(rep.Run.Path)) {
			if !strings.Contains(page, want) {
				t.Errorf("%s: the page lacks %q", tc.job, want)
			}
		}
		v, r, e := strings.Index(page, `id="verdict"`), strings.Index(page, `id="runs"`), strings.Index(page, `id="evidence"`)
		if !(v < r && r < e) {
			t.Errorf("%s: verdict at %d, runs at %d, evidence at %d: the runs do not follow the verdict", tc.job, v, r, e)
		}
		if n := strings.Count(page, `class="ptitle">Framebuffer<`); n != 2 {
			t.Errorf("%s: %d framebuffer panels: the chosen run's timeline is not whole", tc.job, n)
		}
	}
}

// failingWriter accepts n bytes, then fails.
type failingWriter struct{ n int }

func (f *failingWriter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		k := f.n
		f.n = 0
		return k, errors.New("disk full")
	}
	f.n -= len(p)
	return len(p), nil
}

// A write that fails and a missing report are errors, never a panic or
// a page cut short without a word.
func TestWriteErrors(t *testing.T) {
	rep := analyzed(t, runfixture.BuildRunNoFailure(t))
	for _, tc := range []struct {
		name string
		w    io.Writer
		rep  *report.Report
		want string
	}{
		{"nothing written", &failingWriter{0}, rep, "disk full"},
		{"cut in the middle", &failingWriter{40 << 10}, analyzed(t, runfixture.BuildRun(t, 0)), "disk full"},
		{"no report", io.Discard, nil, "no report"},
	} {
		err := Write(tc.w, tc.rep)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error %v, want one line saying %q", tc.name, err, tc.want)
		}
	}
}
