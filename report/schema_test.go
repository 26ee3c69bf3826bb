package report

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// docs/analyze.schema.json is the published schema; the package embeds a
// copy (go:embed cannot reach ../docs). They must be byte-identical.
func TestSchemaCopyIdentical(t *testing.T) {
	docs, err := os.ReadFile(filepath.Join("..", "docs", "analyze.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(docs, ReportJSONSchema()) {
		t.Fatal("report/analyze.schema.json differs from docs/analyze.schema.json: run go generate ./report")
	}
	var v any
	if err := json.Unmarshal(docs, &v); err != nil {
		t.Fatalf("the schema is not JSON: %v", err)
	}
}
