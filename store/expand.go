package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// FlightIndex is the name of a flight recording's index in its directory
// (package flight writes it): a directory holding one is one recording.
const FlightIndex = "index.json"

// IsFlightDir reports whether path is a flight recording's directory.
func IsFlightDir(path string) bool {
	st, err := os.Stat(filepath.Join(path, FlightIndex))
	return err == nil && st.Mode().IsRegular()
}

// Expand turns what a user names on the command line into recordings: a
// file is itself, a flight recording's directory (it holds FlightIndex) is
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

func expandOne(arg string) ([]string, error) {
	st, err := os.Stat(arg)
	switch {
	case err == nil && st.IsDir() && IsFlightDir(arg):
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
