package analyze

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/retrivium/forensic/internal/runfixture"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

func openAnalyzed(t testing.TB, path string) (*store.Reader, *report.Report) {
	t.Helper()
	r, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	rep, err := Analyze(r, Options{Symbolizer: NewELFSymbolizer()})
	if err != nil {
		t.Fatal(err)
	}
	return r, rep
}

func TestOutputJSONMatchesSchema(t *testing.T) {
	_, rep := openAnalyzed(t, runfixture.BuildRun(t, 0))
	if rep.FirstFailure == nil || rep.FirstFailure.ResultName != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Fatalf("the test run should fail with OOM, got %+v", rep.FirstFailure)
	}
	var buf bytes.Buffer
	if err := report.WriteJSON(&buf, rep); err != nil {
		t.Fatal(err)
	}
	if err := report.ValidateReportJSON(buf.Bytes()); err != nil {
		t.Fatalf("analyze --json does not match docs/analyze.schema.json:\n%v", err)
	}
	// And a run in which nothing failed.
	_, ok := openAnalyzed(t, runfixture.BuildRunNoFailure(t))
	buf.Reset()
	if err := report.WriteJSON(&buf, ok); err != nil {
		t.Fatal(err)
	}
	if err := report.ValidateReportJSON(buf.Bytes()); err != nil {
		t.Fatalf("a run without failures does not match the schema:\n%v", err)
	}
}

// The schema must catch drift: a renamed key, a value outside an enum, a
// size that is not an integer, an inconsistent capacity.
func TestSchemaRejectsDrift(t *testing.T) {
	_, rep := openAnalyzed(t, runfixture.BuildRun(t, 0))
	var buf bytes.Buffer
	if err := report.WriteJSON(&buf, rep); err != nil {
		t.Fatal(err)
	}
	mutate := func(name string, f func(m map[string]any)) {
		var m map[string]any
		if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		data, _ := json.Marshal(m)
		if err := report.ValidateReportJSON(data); err == nil {
			t.Errorf("%s: the schema accepted it", name)
		}
	}
	mutate("attribution renamed", func(m map[string]any) { m["attribution_kind"] = m["attribution"]; delete(m, "attribution") })
	mutate("unknown attribution", func(m map[string]any) { m["attribution"] = "memory" })
	mutate("unknown capacity", func(m map[string]any) { m["capacity"] = "gpu-memory-exhausted" })
	mutate("size as a string", func(m map[string]any) { m["first_failure"].(map[string]any)["size"] = "1 GiB" })
	mutate("operation outside the enum", func(m map[string]any) { m["first_failure"].(map[string]any)["operation"] = "alloc" })
	mutate("gpu as a number", func(m map[string]any) { m["first_failure"].(map[string]any)["gpu"] = 0 })
	mutate("missing without decisive", func(m map[string]any) { m["missing"] = []any{map[string]any{"what": "x", "fix": "y"}} })
	mutate("capacity with no failure", func(m map[string]any) { m["first_failure"] = nil })
	mutate("memory_views null", func(m map[string]any) { m["memory_views"] = nil })
	mutate("failures missing", func(m map[string]any) { delete(m, "failures") })
	// Added fields are fine.
	var m map[string]any
	json.Unmarshal(buf.Bytes(), &m)
	m["some_future_field"] = map[string]any{"x": 1}
	data, _ := json.Marshal(m)
	if err := report.ValidateReportJSON(data); err != nil {
		t.Errorf("an added top-level field was rejected: %v", err)
	}
}
