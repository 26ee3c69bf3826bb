package analyze

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strings"
	"testing"
)

// Every function docs/rules.md names as deciding a rule is declared in
// this package, so a reader who looks a rule up finds its code; a renamed
// or removed function fails here until the doc follows.
func TestRulesDocNamesDeclaredFunctions(t *testing.T) {
	doc, err := os.ReadFile("../docs/rules.md")
	if err != nil {
		t.Fatal(err)
	}
	declared := declaredNames(t)
	rows := regexp.MustCompile("(?m)^\\| `([a-z0-9-]+)` \\|.*\\| ([^|]+) \\|$").FindAllStringSubmatch(string(doc), -1)
	if len(rows) == 0 {
		t.Fatal("docs/rules.md has no table of rules with a column of functions")
	}
	for _, row := range rows {
		names := regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(row[2], -1)
		if len(names) == 0 {
			t.Errorf("rule %s names no function", row[1])
		}
		for _, n := range names {
			name := n[1]
			if !strings.HasPrefix(name, "(") && strings.Contains(name, ".") {
				continue // another package's table, such as cuda.Results
			}
			if !declared[name] {
				t.Errorf("rule %s: docs/rules.md names %s, which the package does not declare", row[1], name)
			}
		}
	}
}

// declaredNames are the package's functions ("name"), methods
// ("(*T).name" and "name") and the fields of attributionFacts, from its
// non-test files.
func declaredNames(t *testing.T) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, f := range pkgs["analyze"].Files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				out[d.Name.Name] = true
				if d.Recv != nil && len(d.Recv.List) == 1 {
					if star, ok := d.Recv.List[0].Type.(*ast.StarExpr); ok {
						if id, ok := star.X.(*ast.Ident); ok {
							out["(*"+id.Name+")."+d.Name.Name] = true
						}
					}
				}
			case *ast.GenDecl:
				for _, sp := range d.Specs {
					ts, ok := sp.(*ast.TypeSpec)
					if !ok || ts.Name.Name != "attributionFacts" {
						continue
					}
					out[ts.Name.Name] = true
					for _, fl := range ts.Type.(*ast.StructType).Fields.List {
						for _, n := range fl.Names {
							out[n.Name] = true
						}
					}
				}
			}
		}
	}
	return out
}
