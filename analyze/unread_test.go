package analyze

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/retrivium/forensic/internal/runfixture"
	"github.com/retrivium/forensic/report"
)

// badFile writes a file named name in dir that is not a readable run.
type badFile struct {
	name     string
	make     func(t *testing.T, dir, good string) string
	decisive bool // it may be a run, and could hold the first failure
	says     string
}

func badFiles() []badFile {
	write := func(name string, data func(good []byte) []byte) func(*testing.T, string, string) string {
		return func(t *testing.T, dir, good string) string {
			g, err := os.ReadFile(good)
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, data(g), 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}
	}
	return []badFile{
		{"empty", write("empty.db", func([]byte) []byte { return nil }), true, "empty"},
		{"truncated", write("trunc.db", func(g []byte) []byte { return g[:len(g)/3] }), true, "truncated"},
		{"not bbolt", write("notes.db", func([]byte) []byte { return []byte("rank 3 notes\n") }), true, "not bbolt"},
		{"foreign bbolt", func(t *testing.T, dir, _ string) string {
			p := filepath.Join(dir, "cache.db")
			db, err := bolt.Open(p, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("widgets")); return err })
			db.Close()
			return p
		}, false, "another program"},
	}
}

// Several runs with one bad file: the others are analyzed, and the report
// names the bad file and why. A file that may be a run (empty, truncated,
// unreadable) could hold the job's first failure, so the report cannot
// establish it; a database of another program is only noted.
func TestBadFileAmongRunsIsNamedNotFatal(t *testing.T) {
	for _, failed := range []bool{true, false} {
		for _, bf := range badFiles() {
			name := bf.name
			if !failed {
				name += ", no failure recorded"
			}
			t.Run(name, func(t *testing.T) {
				good := runfixture.BuildRun(t, 0)
				if !failed {
					good = runfixture.BuildRunNoFailure(t)
				}
				bad := bf.make(t, t.TempDir(), good)
				j, err := AnalyzeJobs([]string{good, bad}, Options{})
				if err != nil {
					t.Fatalf("AnalyzeJobs: %v", err)
				}
				if len(j.Reports) != 1 || j.Reports[0].Run.Path != good {
					t.Fatalf("%d reports, want the good run's alone", len(j.Reports))
				}
				if len(j.Unread) != 1 || j.Unread[0].Path != bad {
					t.Errorf("unread %+v, want %s", j.Unread, bad)
				}
				rep := j.Reports[0]
				var note *report.Missing
				for i, m := range rep.Missing {
					if strings.Contains(m.What, bad) {
						note = &rep.Missing[i]
					}
				}
				if note == nil || !strings.Contains(note.What, bf.says) {
					t.Fatalf("no note names %s (%s): %+v", bad, bf.says, rep.Missing)
				}
				if strings.Count(note.What, bad) != 1 || strings.Contains(note.What, "\n") {
					t.Errorf("the note is not one line naming the file once: %q", note.What)
				}
				if note.Decisive != bf.decisive {
					t.Errorf("note decisive %v, want %v", note.Decisive, bf.decisive)
				}
				wantAttr := report.AttrAllocation
				if !failed {
					wantAttr = report.AttrNone
				}
				if bf.decisive {
					wantAttr = report.AttrMissingEvidence
					if !strings.Contains(rep.Verdict, "cannot establish") || !strings.Contains(rep.Verdict, bad) {
						t.Errorf("the verdict does not say the bad file leaves it open: %s", rep.Verdict)
					}
				}
				if rep.Attribution != wantAttr {
					t.Errorf("attribution %s, want %s", rep.Attribution, wantAttr)
				}
			})
		}
	}
}

// A bad file given alone, or only bad files, is an error naming the file.
func TestOnlyBadFilesIsAnError(t *testing.T) {
	good := runfixture.BuildRun(t, 0)
	for _, bf := range badFiles() {
		t.Run(bf.name, func(t *testing.T) {
			dir := t.TempDir()
			bad := bf.make(t, dir, good)
			if _, err := AnalyzeJobs([]string{bad}, Options{}); err == nil || !strings.Contains(err.Error(), bad) {
				t.Errorf("alone: %v, want an error naming %s", err, bad)
			}
			other := badFiles()[0].make(t, t.TempDir(), good)
			if _, err := AnalyzeJobs([]string{bad, other}, Options{}); err == nil || !strings.Contains(err.Error(), "none of the 2 files") {
				t.Errorf("two bad files: %v, want an error saying none is readable", err)
			}
		})
	}
}

// A copy of a run beside it (forensic redact writes one there by default)
// is the same run: analyzed once, with the same verdict as the run alone,
// and a note that names the copy, never a second rank or run.
func TestCopyOfARunIsReadOnce(t *testing.T) {
	orig := runfixture.BuildRun(t, 0)
	data, err := os.ReadFile(orig)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "run.redacted.db")
	if err := os.WriteFile(cp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	alone, err := AnalyzeMany([]string{orig}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	j, err := AnalyzeJobs([]string{orig, cp}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(j.Reports) != 1 || j.Reports[0].Run.Path != orig || j.Reports[0].MultiRun != nil {
		t.Fatalf("%d reports (first of %s), want the original's alone", len(j.Reports), j.Reports[0].Run.Path)
	}
	rep := j.Reports[0]
	if rep.Attribution != alone.Attribution || rep.Verdict != alone.Verdict {
		t.Errorf("verdict %s %q, want the run's own %s %q", rep.Attribution, rep.Verdict, alone.Attribution, alone.Verdict)
	}
	var note *report.Missing
	for i, m := range rep.Missing {
		if strings.Contains(m.What, cp) {
			note = &rep.Missing[i]
		}
	}
	if note == nil || note.Decisive || !strings.Contains(note.What, "copy") {
		t.Errorf("no note names the copy as a copy: %+v", rep.Missing)
	}
}
