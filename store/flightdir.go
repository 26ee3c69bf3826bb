package store

import (
	"os"
	"path/filepath"
)

// FlightIndex is the name of a flight recording's index in its directory
// (package flight writes it): a directory holding one is one recording.
const FlightIndex = "index.json"

// IsFlightDir reports whether path is a flight recording's directory.
func IsFlightDir(path string) bool {
	st, err := os.Stat(filepath.Join(path, FlightIndex))
	return err == nil && st.Mode().IsRegular()
}
