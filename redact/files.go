package redact

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/retrivium/forensic/store"
)

// ErrExists: the copy's path is taken; a redaction never replaces a file.
var ErrExists = errors.New("already exists; a redacted copy is written to a new path")

// File writes a redacted copy of the run.db src to dst, a new file.
func File(src, dst string) (Summary, error) {
	if _, err := os.Lstat(dst); err == nil {
		return Summary{}, fmt.Errorf("%s: %w", dst, ErrExists)
	}
	rd, err := store.Open(src)
	if err != nil {
		return Summary{}, err
	}
	defer rd.Close()
	r := New()
	if err := r.Learn(rd); err != nil {
		return Summary{}, fmt.Errorf("%s: %w", src, err)
	}
	if err := r.Copy(rd, dst); err != nil {
		return r.Summary(), fmt.Errorf("%s: %w", dst, err)
	}
	return r.Summary(), nil
}

// indexFile is a flight directory's index (docs/flight.md).
const indexFile = "index.json"

// Dir writes a redacted copy of the flight directory src to dst, a new
// directory: its index and every segment and snapshot, all with the same
// placeholders. Other files are left out and named in the summary. A
// segment being written by a live recorder cannot be read: take a
// snapshot, or redact once the recording stops.
func Dir(src, dst string) (Summary, error) {
	idx, err := os.ReadFile(filepath.Join(src, indexFile))
	if err != nil {
		return Summary{}, fmt.Errorf("%s: not a flight recording directory (no %s)", src, indexFile)
	}
	if _, err := os.Lstat(dst); err == nil {
		return Summary{}, fmt.Errorf("%s: %w", dst, ErrExists)
	}
	dbs, other, err := listFlight(src)
	if err != nil {
		return Summary{}, err
	}
	r := New()
	readers := make([]*store.Reader, 0, len(dbs))
	defer func() {
		for _, rd := range readers {
			rd.Close()
		}
	}()
	for _, rel := range dbs {
		rd, err := store.Open(filepath.Join(src, rel))
		if err != nil {
			return Summary{}, err
		}
		readers = append(readers, rd)
		if err := r.Learn(rd); err != nil {
			return Summary{}, fmt.Errorf("%s: %w", rel, err)
		}
	}
	r.sum.LeftOut = append(r.sum.LeftOut, other...)
	if err := os.Mkdir(dst, 0o700); err != nil {
		return Summary{}, err
	}
	if err := r.copyIndex(idx, filepath.Join(dst, indexFile)); err != nil {
		return r.Summary(), err
	}
	for i, rel := range dbs {
		out := filepath.Join(dst, rel)
		if err := os.MkdirAll(filepath.Dir(out), 0o700); err != nil {
			return r.Summary(), err
		}
		if err := r.Copy(readers[i], out); err != nil {
			return r.Summary(), fmt.Errorf("%s: %w", out, err)
		}
	}
	return r.Summary(), nil
}

// listFlight lists a flight directory's run.db files (segments and
// snapshots, relative paths) and its other files.
func listFlight(src string) (dbs, other []string, err error) {
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		switch {
		case rel == indexFile:
		case strings.HasSuffix(rel, ".db") && (filepath.Dir(rel) == "segments" || filepath.Dir(rel) == "snapshots"):
			dbs = append(dbs, rel)
		default:
			other = append(other, rel)
		}
		return nil
	})
	return dbs, other, err
}

// copyIndex writes the redacted index.
func (r *Redactor) copyIndex(idx []byte, dst string) error {
	r.replacers()
	doc, err := decode(idx)
	if err != nil {
		return fmt.Errorf("%s: %w", indexFile, err)
	}
	out, err := encode(r.redact(doc, "", false))
	if err != nil {
		return err
	}
	return os.WriteFile(dst, append(out, '\n'), 0o600)
}
