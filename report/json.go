package report

import (
	"encoding/json"
	"io"
)

// WriteJSON writes the report as the --json contract.
func WriteJSON(w io.Writer, rep *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}
