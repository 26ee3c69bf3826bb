// Package runpaths turns what a user names on the command line (files,
// directories, flight recordings, patterns the shell left unexpanded) into
// the recordings to read. It is the command line's concern, kept out of
// the store, which opens one path at a time.
package runpaths

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/retrivium/forensic/store"
)

// Expand turns what a user names on the command line into recordings: a
// file is itself, a flight recording's directory (it holds store.FlightIndex) is
// itself, one recording, another directory is every *.db file directly in
// it (sorted), and a pattern the shell did not expand (quoted, or from a
// script) is globbed. Each path is returned once, in the order named.
func Expand(args []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, a := range args {
		paths, err := expandOne(a)
		if err != nil {
			return nil, err
		}
		for _, p := range paths {
			add(p)
		}
	}
	return out, nil
}

// expandOne is what one argument names.
func expandOne(arg string) ([]string, error) {
	st, err := os.Stat(arg)
	switch {
	case err == nil && st.IsDir() && store.IsFlightDir(arg):
		return []string{arg}, nil
	case err == nil && st.IsDir():
		paths, err := filepath.Glob(filepath.Join(arg, "*.db"))
		if err != nil {
			return nil, err
		}
		if len(paths) == 0 {
			return nil, fmt.Errorf("%s: no *.db file in this directory", arg)
		}
		sort.Strings(paths)
		return paths, nil
	case err == nil:
		return []string{arg}, nil
	case errors.Is(err, os.ErrNotExist) && strings.ContainsAny(arg, "*?["):
		paths, gerr := filepath.Glob(arg)
		if gerr != nil {
			return nil, fmt.Errorf("%s: %w", arg, gerr)
		}
		if len(paths) == 0 {
			return nil, fmt.Errorf("%s: no file matches", arg)
		}
		sort.Strings(paths)
		return paths, nil
	}
	return []string{arg}, nil // Open says what is wrong with it
}
