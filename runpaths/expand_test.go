package runpaths

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/retrivium/forensic/store"
)

func TestExpand(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"rank0.db", "rank1.db", "notes.txt"} {
		os.WriteFile(filepath.Join(dir, n), nil, 0o600)
	}
	r0, r1 := filepath.Join(dir, "rank0.db"), filepath.Join(dir, "rank1.db")
	// A flight recording: its segments are in a subdirectory, and the
	// directory names the one recording.
	fl := filepath.Join(dir, "flight")
	os.MkdirAll(filepath.Join(fl, "segments"), 0o700)
	os.WriteFile(filepath.Join(fl, store.FlightIndex), []byte("{}"), 0o600)
	os.WriteFile(filepath.Join(fl, "segments", "00000001.db"), nil, 0o600)
	tests := []struct {
		name string
		args []string
		want []string
		err  bool
	}{
		{"a file", []string{r1}, []string{r1}, false},
		{"a directory", []string{dir}, []string{r0, r1}, false},
		{"a quoted glob", []string{filepath.Join(dir, "rank*.db")}, []string{r0, r1}, false},
		{"each once, in order named", []string{r1, dir}, []string{r1, r0}, false},
		{"a missing file is left to Open", []string{filepath.Join(dir, "x.db")}, []string{filepath.Join(dir, "x.db")}, false},
		{"a glob matching nothing", []string{filepath.Join(dir, "*.parquet")}, nil, true},
		{"a directory with no run", []string{t.TempDir()}, nil, true},
		{"a flight recording is one", []string{fl}, []string{fl}, false},
		{"a flight recording among runs", []string{r0, fl}, []string{r0, fl}, false},
	}
	for _, tt := range tests {
		got, err := Expand(tt.args)
		if (err != nil) != tt.err || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: Expand(%v) = %v, %v; want %v (error %v)", tt.name, tt.args, got, err, tt.want, tt.err)
		}
	}
}
