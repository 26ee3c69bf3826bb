package e2e

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// update rewrites the golden reports from this run instead of comparing
// with them: go test ./e2e -run TestScenarios -update. Read the diff
// before committing it: every line that changed is a change in what
// analyze --json says of a recorded scenario.
var update = flag.Bool("update", false, "rewrite e2e/testdata/golden/*.json from this run's reports")

// goldenDir holds one normalised analyze --json report per recorded
// scenario.
var goldenDir = filepath.Join("testdata", "golden")

// checkGolden compares the analyze --json report of a recorded scenario,
// normalised (see normaliseReport), with its golden file, named after the
// test. Any change in a verdict, an attribution, a capacity, an evidence
// row or a next step shows as a difference here.
func checkGolden(t *testing.T, w *world, report []byte) {
	t.Helper()
	got, err := normaliseReport(report, w.dir)
	if err != nil {
		t.Fatalf("golden: %v", err)
	}
	path := filepath.Join(goldenDir, goldenName(t.Name()))
	if *update {
		if err := os.MkdirAll(goldenDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden: %v (run with -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("analyze --json differs from %s (-want +got):\n%s\nrun with -update to accept the new report",
			path, lineDiff(string(want), string(got)))
	}
}

// goldenName is a test's golden file name: its name with each subtest
// level after a dot and any run of other characters than letters, digits
// and - as one _ ("TestScenarios/no_context:_not_a_memory_problem" →
// TestScenarios.no_context_not_a_memory_problem.json).
func goldenName(test string) string {
	parts := strings.Split(test, "/")
	for i, p := range parts {
		parts[i] = strings.Trim(unsafeName.ReplaceAllString(p, "_"), "_")
	}
	return strings.Join(parts, ".") + ".json"
}

// unsafeName is what a golden file's name does not keep.
var unsafeName = regexp.MustCompile(`[^A-Za-z0-9-]+`)

// What normaliseReport replaces, and with what.
var (
	// buildIDPattern is a GNU build id in hex.
	buildIDPattern = regexp.MustCompile(`\b[0-9a-f]{40}\b`)
	// durationPattern is a time or duration written in a sentence ("at
	// +0.192 s", "1.18 ms after it"), never a size (MiB, GiB).
	durationPattern = regexp.MustCompile(`[+-]?\d+(\.\d+)? (ns|µs|us|ms|s)\b`)
)

// volatileKeys are the report fields that differ between two recordings
// of the same scenario whatever the verdict: clocks, sample sequence
// numbers, code addresses (ASLR) and sampling statistics. Each becomes
// "<key>" when set. interval_ns is configuration and stays.
var volatileKeys = map[string]bool{
	"id": true, "boot_id": true, "host": true, "kernel": true, "recorded_by": true,
	"wall_start": true, "wall_time": true, "seq": true, "address": true,
	"samples": true, "thinned": true, "trigger_delay_median_ns": true, "trigger_delay_max_ns": true,
}

// pidKeys hold process ids: each distinct pid becomes "<pid N>", N in
// order of first appearance, so which record names which process stays
// visible while the numbers themselves do not matter.
var pidKeys = map[string]bool{"pid": true, "tid": true, "ppid": true, "target_pid": true, "pids": true}

// normaliseReport is the one place a report is made comparable across
// recordings: what depends on when NVML samples were read (see
// dropSampleTiming), times (every *_ns field but interval_ns, wall times, and
// times and durations inside sentences), pids and tids (numbered by first
// appearance, in numbers and in sentences), paths (the repository as
// <repo>, the test's directory as <dir>), build ids, run and boot ids,
// host, kernel and version, sample sequence numbers, code addresses and
// sampling statistics. Everything else, the verdict first, is compared as
// analyze wrote it. The result is indented JSON with sorted keys.
func normaliseReport(data []byte, dir string) ([]byte, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("analyze --json is not JSON: %w", err)
	}
	if m, ok := v.(map[string]any); ok {
		dropSampleTiming(m)
	}
	n := normaliser{pids: map[string]string{}, dir: dir}
	n.collectPIDs("", v)
	sort.SliceStable(n.order, func(i, j int) bool { return len(n.order[i]) > len(n.order[j]) })
	v = n.walk("", v)
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false) // "<pid 1>", not "\u003cpid 1\u003e"
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// sampleTimed are the report's sections made of NVML samples in time:
// which periodic sample lands between two calls, and whether the sample a
// failure triggered is read before or after the failing process exits,
// depends on the machine's load, not on the scenario. The golden file
// keeps "<sampled>" in their place; tests that need their values check
// them directly.
var sampleTimed = []string{"memory_views", "memory_view_notes", "nearest_samples", "phases", "sampling", "kernel_log",
	"headroom", "budget"}

// boundWords are the qualifiers a sampled value gets when a release of
// unknown size (such as the failing process's exit) came between the
// failure and its sample: exact or bounded, the value and the judgement
// are the same.
var boundWords = regexp.MustCompile(`\b(at most|at least) `)

// dropSampleTiming removes from a decoded report what depends on when
// NVML samples were read (see sampleTimed and boundWords): the sampled
// sections, the evidence rows read from NVML (kept: every row from the
// recorded calls), each process's cgroup (the test runner's), and bound
// words in verdicts.
func dropSampleTiming(rep map[string]any) {
	for _, k := range sampleTimed {
		rep[k] = "<sampled>" // present or not: a note comes and goes with the samples
	}
	for _, part := range []map[string]any{rep, asMap(rep["first_unrecovered"])} {
		if part == nil {
			continue
		}
		if ev, ok := part["evidence"].([]any); ok {
			kept := []any{}
			for _, e := range ev {
				if src, _ := asMap(e)["source"].(string); !strings.HasPrefix(src, "nvml") {
					kept = append(kept, e)
				}
			}
			part["evidence"] = kept
		}
		if v, ok := part["verdict"].(string); ok {
			part["verdict"] = boundWords.ReplaceAllString(v, "")
		}
	}
	if ps, ok := rep["processes"].([]any); ok {
		for _, p := range ps {
			delete(asMap(p), "cgroup")
		}
	}
}

func asMap(v any) map[string]any { m, _ := v.(map[string]any); return m }

// normaliser carries what normaliseReport learned in its first pass.
type normaliser struct {
	pids  map[string]string // pid as written → "<pid N>"
	order []string          // pids by length, longest first, for sentences
	dir   string
}

// collectPIDs numbers the pids in the order a depth-first walk over
// sorted keys meets them.
func (n *normaliser) collectPIDs(key string, v any) {
	switch x := v.(type) {
	case map[string]any:
		for _, k := range sortedKeys(x) {
			n.collectPIDs(k, x[k])
		}
	case []any:
		for _, e := range x {
			n.collectPIDs(key, e)
		}
	case json.Number:
		if pidKeys[key] {
			n.addPID(x.String())
		}
	case string:
		for _, m := range pidInText.FindAllStringSubmatch(x, -1) {
			n.addPID(m[2])
		}
	}
}

// pidInText is a pid in a sentence or a log line ("pid 4242", "pid=4242",
// "process 4242"), such as a process the recording did not trace.
var pidInText = regexp.MustCompile(`\b(pid[ =]|process )(\d+)\b`)

// addPID numbers a pid the first time it is seen.
func (n *normaliser) addPID(p string) {
	if _, ok := n.pids[p]; !ok {
		n.pids[p] = "<pid " + strconv.Itoa(len(n.pids)+1) + ">"
		n.order = append(n.order, p)
	}
}

// walk returns v with every volatile value replaced.
func (n *normaliser) walk(key string, v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = n.walk(k, e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = n.walk(key, e)
		}
		return x
	case nil:
		return nil
	}
	switch {
	case volatileKeys[key]:
		return "<" + key + ">"
	case strings.HasSuffix(key, "_ns") && key != "interval_ns":
		return "<time>"
	case pidKeys[key]:
		if s, ok := v.(json.Number); ok {
			return n.pids[s.String()]
		}
	}
	if s, ok := v.(string); ok {
		return n.sentence(s)
	}
	return v
}

// sentence normalises a string: paths, build ids, times, then pids.
func (n *normaliser) sentence(s string) string {
	if n.dir != "" {
		s = strings.ReplaceAll(s, n.dir, "<dir>")
	}
	s = strings.ReplaceAll(s, repo, "<repo>")
	s = buildIDPattern.ReplaceAllString(s, "<build-id>")
	s = durationPattern.ReplaceAllString(s, "<duration>")
	for _, p := range n.order {
		s = regexp.MustCompile(`\b`+p+`\b`).ReplaceAllString(s, n.pids[p])
	}
	return s
}

func sortedKeys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// lineDiff is a unified-style diff of want and got, lines marked - and
// +, with up to two unchanged lines around each change.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	// lcs[i][j] is the longest common subsequence of w[i:] and g[j:].
	lcs := make([][]int, len(w)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(g)+1)
	}
	for i := len(w) - 1; i >= 0; i-- {
		for j := len(g) - 1; j >= 0; j-- {
			if w[i] == g[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	type line struct {
		mark byte
		text string
	}
	var ls []line
	i, j := 0, 0
	for i < len(w) || j < len(g) {
		switch {
		case i < len(w) && j < len(g) && w[i] == g[j]:
			ls = append(ls, line{' ', w[i]})
			i, j = i+1, j+1
		case i < len(w) && (j == len(g) || lcs[i+1][j] >= lcs[i][j+1]):
			ls = append(ls, line{'-', w[i]})
			i++
		default:
			ls = append(ls, line{'+', g[j]})
			j++
		}
	}
	var b strings.Builder
	for k, l := range ls {
		near := false
		for d := max(0, k-2); d <= min(len(ls)-1, k+2); d++ {
			near = near || ls[d].mark != ' '
		}
		if near {
			fmt.Fprintf(&b, "%c%s\n", l.mark, l.text)
		}
	}
	return b.String()
}
