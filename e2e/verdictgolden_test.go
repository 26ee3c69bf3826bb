package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/retrivium/forensic/report"
)

// verdictDir holds one verdict golden per recording the harness makes:
// <Test>[/<subtest>]-<n>.json, n counting the test's recordings from 1.
var verdictDir = filepath.Join("testdata", "verdicts")

// verdictGolden is the part of a report a verdict golden keeps: what
// analyze concluded, nothing of how it said it. A recording that does not
// analyze keeps analyze's exit status instead, so that a recording which
// starts (or stops) analyzing shows too. Missing evidence is left out:
// a report names it only in words (what, fix), which are not a verdict.
type verdictGolden struct {
	Attribution  report.Attribution   `json:"attribution"`
	Capacity     *report.Capacity     `json:"capacity"`
	FirstFailure *failureGolden       `json:"first_failure"`
	NearMiss     bool                 `json:"near_miss"`
	Unrecovered  *unrecoveredGolden   `json:"first_unrecovered,omitempty"`
	Jobs         []report.Attribution `json:"job_attributions,omitempty"`
}

// failureGolden is the first failure's identity in a verdict golden.
type failureGolden struct {
	Symbol     string  `json:"symbol"`
	ResultName string  `json:"result_name"`
	Size       *uint64 `json:"size"`
	Class      string  `json:"class"` // the operation's class: allocation, mapping, ...
}

// unrecoveredGolden is the first unrecovered failure's verdict, when the
// first failure was recovered.
type unrecoveredGolden struct {
	failureGolden
	Attribution report.Attribution `json:"attribution"`
	Capacity    *report.Capacity   `json:"capacity,omitempty"`
}

// verdictGoldenOf is the verdict golden of an analyze --json run (exit status
// and stdout).
func verdictGoldenOf(code int, stdout []byte) ([]byte, error) {
	var g any = map[string]int{"analyze_exit": code}
	if code == 0 {
		var rep report.Report
		if err := json.Unmarshal(stdout, &rep); err != nil {
			return nil, fmt.Errorf("analyze --json is not a report: %w", err)
		}
		v := verdictGolden{Attribution: rep.Attribution, Capacity: rep.Capacity, NearMiss: rep.NearMiss,
			FirstFailure: failureOf(rep.FirstFailure)}
		if u := rep.FirstUnrecovered; u != nil {
			v.Unrecovered = &unrecoveredGolden{*failureOf(&u.Failure), u.Attribution, u.Capacity}
		}
		for _, j := range rep.Jobs {
			v.Jobs = append(v.Jobs, j.Attribution)
		}
		g = v
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetIndent("", "  ")
	if err := enc.Encode(g); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func failureOf(f *report.Failure) *failureGolden {
	if f == nil {
		return nil
	}
	return &failureGolden{Symbol: f.Symbol, ResultName: f.ResultName, Size: f.Size, Class: f.Operation}
}

// verdictBook numbers each test's recordings and holds the tests whose
// verdict may vary from run to run. It is keyed by test name because a
// test may make several worlds, and a *testing.T carries no values of
// its own; tests that never run in parallel still get a lock.
type verdictBook struct {
	mu     sync.Mutex
	count  map[string]int    // test name → recordings so far
	varies map[string]string // test name → why its verdict varies
}

// verdicts is the suite's one verdictBook.
var verdicts = &verdictBook{count: map[string]int{}, varies: map[string]string{}}

// verdictVaries opts t (and its subtests) out of verdict goldens, saying
// why: a race the test allows, many runs in a loop, an outcome that
// depends on the machine's load. Call it before the test records. The
// reason is logged, so an opted-out test says so in go test -v.
func verdictVaries(t *testing.T, why string) {
	t.Helper()
	if strings.TrimSpace(why) == "" {
		t.Fatal("verdictVaries needs a reason")
	}
	verdicts.mu.Lock()
	verdicts.varies[t.Name()] = why
	verdicts.mu.Unlock()
	t.Logf("no verdict golden: %s", why)
	if *update {
		dropVerdicts(t, t.Name())
	}
}

// retryRecording says that t's last recording is set aside and the next
// one is made in its place: a test that records again until the machine's
// timing gives it the case it checks holds each try to the same verdict
// golden, so a loaded machine that needs more tries finds its golden.
func retryRecording(t *testing.T) {
	t.Helper()
	verdicts.mu.Lock()
	defer verdicts.mu.Unlock()
	if verdicts.count[t.Name()] > 0 {
		verdicts.count[t.Name()]--
	}
}

// next returns the number of test's next recording, or why test's
// verdict varies.
func (b *verdictBook) next(test string) (int, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for name, why := range b.varies {
		if test == name || strings.HasPrefix(test, name+"/") {
			return 0, why
		}
	}
	b.count[test]++
	return b.count[test], ""
}

// checkVerdictGolden compares the verdict of a recording, analyzed with
// exit status code and output stdout, with its golden file (rewritten
// under -update), unless the test's verdict varies (verdictVaries).
func checkVerdictGolden(t *testing.T, code int, stdout []byte) {
	t.Helper()
	n, varies := verdicts.next(t.Name())
	if varies != "" {
		return
	}
	got, err := verdictGoldenOf(code, stdout)
	if err != nil {
		t.Errorf("verdict golden: %v", err)
		return
	}
	path := filepath.Join(verdictDir, verdictName(t.Name(), n))
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			dropVerdicts(t, t.Name())
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("verdict golden: %v (run with -update to write it)", err)
		return
	}
	if !bytes.Equal(got, want) {
		t.Errorf("recording %d's verdict differs from %s (-want +got):\n%s\nrun with -update to accept it",
			n, path, lineDiff(string(want), string(got)))
	}
}

// verdictName is the golden file of a test's n-th recording: each level
// of the test's name a directory, with any run of other characters than
// letters, digits and - as one _ ("TestX/two GPUs", 2 → TestX/two_GPUs-2.json).
func verdictName(test string, n int) string {
	parts := strings.Split(test, "/")
	for i, p := range parts {
		parts[i] = strings.Trim(unsafeName.ReplaceAllString(p, "_"), "_")
		if parts[i] == "" {
			parts[i] = "_"
		}
	}
	return filepath.Join(parts...) + "-" + strconv.Itoa(n) + ".json"
}

// dropVerdicts removes the verdict goldens of test's recordings before
// -update writes them again, so that a test that now records less leaves
// no golden behind that no recording compares with.
func dropVerdicts(t *testing.T, test string) {
	t.Helper()
	prefix := filepath.Join(verdictDir, strings.TrimSuffix(verdictName(test, 0), "0.json"))
	old, err := filepath.Glob(prefix + "*.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range old {
		if _, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(p, prefix), ".json")); err != nil {
			continue // another subtest's ("a" and "a-b")
		}
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
}

// A verdict golden keeps the verdict and nothing of how it was said, and
// a recording that does not analyze keeps analyze's exit status.
func TestVerdictGoldenKeepsTheVerdictOnly(t *testing.T) {
	tests := []struct {
		name   string
		code   int
		stdout string
		want   string
	}{
		{"a failure", 0, `{"attribution":"allocation","capacity":"framebuffer-exhausted","verdict":"words","near_miss":false,
			"first_failure":{"symbol":"cuMemAlloc_v2","result_name":"CUDA_ERROR_OUT_OF_MEMORY","size":1024,"operation":"allocation","pid":41}}`,
			`{"attribution":"allocation","capacity":"framebuffer-exhausted","first_failure":{"symbol":"cuMemAlloc_v2",` +
				`"result_name":"CUDA_ERROR_OUT_OF_MEMORY","size":1024,"class":"allocation"},"near_miss":false}`},
		{"no failure, a near miss", 0, `{"attribution":"none","capacity":null,"first_failure":null,"near_miss":true,"near_miss_percent":3}`,
			`{"attribution":"none","capacity":null,"first_failure":null,"near_miss":true}`},
		{"no analysis", 1, "", `{"analyze_exit":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := verdictGoldenOf(tt.code, []byte(tt.stdout))
			var compact bytes.Buffer
			if err == nil {
				err = json.Compact(&compact, got)
			}
			if err != nil || compact.String() != tt.want {
				t.Errorf("verdict golden %s, %v; want %s", compact.String(), err, tt.want)
			}
		})
	}
	if _, err := verdictGoldenOf(0, []byte("not json")); err == nil {
		t.Error("a report that is not JSON made a golden")
	}
}

// Each level of a test's name is a directory, and the recording's number
// ends the file's name.
func TestVerdictName(t *testing.T) {
	for _, tt := range []struct {
		test string
		n    int
		want string
	}{
		{"TestX", 1, "TestX-1.json"},
		{"TestX/two GPUs, one busy", 2, filepath.Join("TestX", "two_GPUs_one_busy-2.json")},
		{"TestX/exit_0/+++", 3, filepath.Join("TestX", "exit_0", "_-3.json")},
	} {
		if got := verdictName(tt.test, tt.n); got != tt.want {
			t.Errorf("verdictName(%q, %d) = %q, want %q", tt.test, tt.n, got, tt.want)
		}
	}
}

// A test that opts out, and its subtests, get no number; another test
// counts its recordings from 1.
func TestVerdictBookCountsAndOptsOut(t *testing.T) {
	b := &verdictBook{count: map[string]int{}, varies: map[string]string{"TestRace": "a race"}}
	for _, tt := range []struct {
		test string
		n    int
		why  string
	}{{"TestA", 1, ""}, {"TestA", 2, ""}, {"TestA/sub", 1, ""}, {"TestRace", 0, "a race"}, {"TestRace/sub", 0, "a race"}, {"TestRaceless", 1, ""}} {
		if n, why := b.next(tt.test); n != tt.n || why != tt.why {
			t.Errorf("next(%q) = %d, %q; want %d, %q", tt.test, n, why, tt.n, tt.why)
		}
	}
}
