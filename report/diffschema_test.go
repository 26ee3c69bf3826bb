package report

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// docs/diff.schema.json is the published schema; the package embeds a
// byte-identical copy.
func TestDiffSchemaCopyIdentical(t *testing.T) {
	docs, err := os.ReadFile(filepath.Join("..", "docs", "diff.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(docs, DiffJSONSchema()) {
		t.Fatal("report/diff.schema.json differs from docs/diff.schema.json: run go generate ./report")
	}
}

func TestDiffSchemaChecksTheFieldsAKindNeeds(t *testing.T) {
	size := uint64(2 << 30)
	base := func() *Diff {
		return &Diff{Schema: DiffSchema, Headline: "The failing run differs from the good one in: x.", Chosen: "last",
			Bad:  DiffRun{Path: "bad.db", Attribution: AttrAllocation},
			Good: []DiffRun{{Path: "good.db", Attribution: AttrNone}}, Differences: []Difference{}, Processes: []ProcessPair{}, Notes: []string{}}
	}
	cases := []struct {
		name string
		d    Difference
		bad  string // "" = valid
	}{
		{"an extra call with its process and call", Difference{Kind: DiffCallSequence, Summary: "s", GoodRuns: 1, Departure: DepartExtraCall,
			Process: &DiffProcess{PID: 1, Recorded: true}, Call: &DiffCall{Symbol: "cuMemAlloc_v2", Size: &size, Phase: "serving"}}, ""},
		{"a call sequence without its departure", Difference{Kind: DiffCallSequence, Summary: "s", GoodRuns: 1,
			Process: &DiffProcess{PID: 1}}, "departure"},
		{"a least free without its values", Difference{Kind: DiffLeastFree, Summary: "s", GoodRuns: 1, View: "framebuffer"}, "gpu"},
		{"an unknown kind", Difference{Kind: "vibes", Summary: "s", GoodRuns: 1}, "kind"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := base()
			d.Differences = append(d.Differences, c.d)
			var buf bytes.Buffer
			if err := WriteDiffJSON(&buf, d); err != nil {
				t.Fatal(err)
			}
			err := ValidateDiffJSON(buf.Bytes())
			switch {
			case c.bad == "" && err != nil:
				t.Errorf("valid diff refused: %v", err)
			case c.bad != "" && (err == nil || !strings.Contains(err.Error(), c.bad)):
				t.Errorf("error %v, want one about %q", err, c.bad)
			}
		})
	}
}
