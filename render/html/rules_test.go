package html

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// The page describes exactly the rules docs/rules.md's table names, in its
// order, each in one line.
func TestRulesMatchDocs(t *testing.T) {
	doc, err := os.ReadFile("../../docs/rules.md")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z0-9-]+)` \\|").FindAllStringSubmatch(string(doc), -1) {
		want = append(want, m[1])
	}
	if len(want) == 0 {
		t.Fatal("docs/rules.md has no table of rules")
	}
	var got []string
	for _, r := range rules() {
		got = append(got, r.Name)
		if r.Line == "" || strings.Contains(r.Line, "\n") || len(r.Line) > 320 {
			t.Errorf("rule %s: %q is not one line", r.Name, r.Line)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the page describes rules %q; docs/rules.md names %q", got, want)
	}
}

func TestRulesUsed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		named []string // each evidence row's rule, "" for none
		want  []string
	}{
		{"none", []string{"", ""}, nil},
		{"once each, in the table's order", []string{"reference-sample", "", "views-apart", "reference-sample"},
			[]string{"views-apart", "reference-sample"}},
		{"an unknown name comes last", []string{"a-newer-rule", "recovered", "a-newer-rule"},
			[]string{"recovered", "a-newer-rule"}},
	} {
		var rows []evidenceRow
		for _, n := range tc.named {
			rows = append(rows, evidenceRow{Rule: n, RuleLine: ruleLine(n)})
		}
		var got []string
		for _, r := range rulesUsed(rows) {
			got = append(got, r.Name)
			if r.Line == "" {
				t.Errorf("%s: rule %s has no description", tc.name, r.Name)
			}
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: legend %q, want %q", tc.name, got, tc.want)
		}
	}
	if ruleLine("views-apart") == "" || ruleLine("a-newer-rule") != "" {
		t.Error("ruleLine does not look rules up by name")
	}
}
