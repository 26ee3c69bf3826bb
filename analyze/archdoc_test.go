package analyze

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// docs/architecture.md follows one failed call from the probe to the
// verdict text by file and function: every file it names exists, and
// every name it gives is declared in the repository's Go or BPF C, so a
// rename or a move fails here until the doc follows.
func TestArchitecturePathNamesWhatExists(t *testing.T) {
	doc, err := os.ReadFile("../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	sec := string(doc)
	i := strings.Index(sec, "## One call, from the kernel to the verdict")
	if i < 0 {
		t.Fatal("docs/architecture.md has no section following one call")
	}
	sec = sec[i:]
	if j := strings.Index(sec, "\nTwo things ride"); j > 0 {
		sec = sec[:j]
	}
	names := declaredInRepo(t, "..")
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(sec, -1) {
		tok := m[1]
		switch {
		case strings.Contains(tok, " "):
			continue // a command line
		case regexp.MustCompile(`\.(go|c|h)$`).MatchString(tok):
			if _, err := os.Stat(filepath.Join("..", tok)); err != nil && strings.Contains(tok, "/") {
				t.Errorf("the doc names %s, which does not exist", tok)
			}
		default:
			last := tok[strings.LastIndex(tok, ".")+1:]
			if !names[last] {
				t.Errorf("the doc names %s, which nothing declares", tok)
			}
		}
	}
}

// declaredInRepo is every name the repository's non-test Go files
// declare (functions, methods, types, fields, variables, constants,
// string constants such as bucket names) and every word of its BPF C.
func declaredInRepo(t *testing.T, root string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	word := regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == "testdata" || n == "build" || n == "bin" || strings.HasPrefix(n, ".") && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case strings.HasPrefix(path, filepath.Join(root, "bpf")) && (strings.HasSuffix(path, ".c") || strings.HasSuffix(path, ".h")):
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, w := range word.FindAllString(string(src), -1) {
				out[w] = true
			}
		case strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go"):
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.FuncDecl:
					out[n.Name.Name] = true
				case *ast.TypeSpec:
					out[n.Name.Name] = true
				case *ast.ValueSpec:
					for _, id := range n.Names {
						out[id.Name] = true
					}
				case *ast.Field:
					for _, id := range n.Names {
						out[id.Name] = true
					}
				case *ast.BasicLit:
					if s, err := strconv.Unquote(n.Value); err == nil && n.Kind == token.STRING {
						out[s] = true
					}
				}
				return true
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
