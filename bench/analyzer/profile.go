package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/retrivium/forensic/analyze"
	"github.com/retrivium/forensic/bench/internal/benchutil"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// profileAnalyze runs the analysis in this process under the CPU profiler
// and returns the top of `go tool pprof -top`.
func profileAnalyze(db, profile string) (string, error) {
	f, err := os.Create(profile)
	if err != nil {
		return "", err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return "", err
	}
	start := time.Now()
	r, err := store.Open(db)
	if err == nil {
		var rep *report.Report
		if rep, err = analyze.Analyze(r, analyze.Options{}); err == nil {
			err = report.WriteJSON(io.Discard, rep)
		}
		r.Close()
	}
	pprof.StopCPUProfile()
	f.Close()
	if err != nil {
		return "", err
	}
	benchutil.Logf("analyzer: in-process analysis under the profiler: %v", time.Since(start).Round(time.Millisecond))
	exe, _ := os.Executable()
	out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=30", exe, profile).Output()
	if err != nil {
		return "", fmt.Errorf("go tool pprof: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	// Drop the header lines about the binary and build id.
	for len(lines) > 0 && !strings.HasPrefix(strings.TrimSpace(lines[0]), "Duration") && !strings.HasPrefix(strings.TrimSpace(lines[0]), "Showing") {
		lines = lines[1:]
	}
	return strings.Join(lines, "\n"), nil
}
