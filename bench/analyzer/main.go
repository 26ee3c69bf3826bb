// Command analyzer times forensic's read side on a large run.db (made by
// bench/genrun): `forensic analyze --json`, `forensic analyze` (text),
// `forensic report` and `forensic export --format perfetto`, each as its own
// process, with wall time, CPU time and peak memory from wait4's rusage
// (maxrss of the forensic process itself: it has no children), and the
// split of resident memory at its peak between anonymous memory and the
// mapped run.db (sampled from /proc/PID/status every 50 ms).
//
// With -cpuprofile, when a target is missed, it also runs the analysis in-process (store.Open,
// analyze.Analyze, report.WriteJSON) under runtime/pprof and prints the
// top of `go tool pprof -top`. It prints a markdown section on stdout.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/retrivium/forensic/analyze"
	"github.com/retrivium/forensic/bench/internal/benchutil"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

type timing struct {
	name     string
	args     []string
	wall     time.Duration
	user     time.Duration
	sys      time.Duration
	maxRSS   uint64 // bytes
	peakAnon uint64
	peakFile uint64
	out      string
	outSize  int64
}

func main() {
	db := flag.String("db", "build/bench/big.db", "run.db to read")
	profile := flag.String("cpuprofile", "", "when a target is missed, also profile an in-process analysis into this file")
	genInfo := flag.String("gen", "", "how the file was made (shown in the section)")
	flag.Parse()
	if err := run(*db, *profile, *genInfo); err != nil {
		fmt.Fprintln(os.Stderr, "analyzer:", err)
		os.Exit(1)
	}
}

func run(db, profile, genInfo string) error {
	env, err := benchutil.Setup()
	if err != nil {
		return err
	}
	r, err := store.Open(db)
	if err != nil {
		return err
	}
	stop, err := r.Stop()
	r.Close()
	if err != nil || stop == nil {
		return fmt.Errorf("%s: no stop record (%v)", db, err)
	}
	st, err := os.Stat(db)
	if err != nil {
		return err
	}
	base := filepath.Join(env.Work, strings.TrimSuffix(filepath.Base(db), ".db"))
	runs := []*timing{
		{name: "forensic analyze --json", args: []string{"analyze", "--json", db}, out: base + "-analyze.json"},
		{name: "forensic analyze (text)", args: []string{"analyze", "--no-color", db}, out: base + "-analyze.txt"},
		{name: "forensic report", args: []string{"report", db, "-o", base + "-report.html"}, out: base + "-report.html"},
		{name: "forensic export --format perfetto", args: []string{"export", "--format", "perfetto", db, "-o", base + "-trace.json"}, out: base + "-trace.json"},
	}
	for _, t := range runs {
		if err := measure(env, t); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		benchutil.Logf("analyzer: %s: %v wall, %v user, %v sys, maxrss %s (anon %s, file %s), output %s",
			t.name, t.wall.Round(time.Millisecond), t.user.Round(time.Millisecond), t.sys.Round(time.Millisecond),
			benchutil.MiB(t.maxRSS), benchutil.MiB(t.peakAnon), benchutil.MiB(t.peakFile), benchutil.MiB(uint64(t.outSize)))
	}
	// The JSON says what it analyzed.
	var rep struct {
		Run struct {
			Events uint64 `json:"events"`
		} `json:"run"`
		Sampling struct {
			Samples int `json:"samples"`
		} `json:"sampling"`
		FirstFailure *struct {
			Symbol string `json:"symbol"`
		} `json:"first_failure"`
	}
	if data, err := os.ReadFile(runs[0].out); err == nil {
		json.Unmarshal(data, &rep)
	}
	var top string
	if missed := runs[0].wall >= 10*time.Second || runs[0].maxRSS >= 256<<20; profile != "" && missed && stop.Stats.Events >= 10_000_000 {
		if top, err = profileAnalyze(db, profile); err != nil {
			return err
		}
	}
	for _, t := range runs {
		if t.out != "" && !strings.HasSuffix(t.out, ".json") || strings.HasSuffix(t.out, "-trace.json") {
			os.Remove(t.out) // big outputs; the JSON is kept for inspection
		}
	}

	w := os.Stdout
	fmt.Fprintf(w, "## 4. Analyzer on a %s-call run\n\n", benchutil.Thousands(stop.Stats.Events))
	fmt.Fprintf(w, "Input: `%s`, %s, made by `bench/genrun`%s through store.Create + Writer.Commit: %s call events "+
		"(the JSON report counts %s), %s NVML samples (the report counts %d), %d failures; first failure %s. "+
		"Each command runs as its own process; wall time, CPU and peak memory come from wait4's rusage of that process "+
		"(maxrss: it has no children). RssAnon/RssFile at the peak are sampled from /proc/PID/status every 50 ms: "+
		"RssFile is run.db's pages, which bbolt reads through mmap, so they count in maxrss.\n\n",
		filepath.Base(db), benchutil.MiB(uint64(st.Size())), genInfo, benchutil.Thousands(stop.Stats.Events),
		benchutil.Thousands(rep.Run.Events), benchutil.Thousands(stop.Stats.Samples), rep.Sampling.Samples,
		stop.TriggerDelay.Count, firstName(rep.FirstFailure))
	fmt.Fprintf(w, "| command | wall | user + sys CPU | peak memory (maxrss) | anon / file at peak | output |\n|---|---:|---:|---:|---:|---:|\n")
	for _, t := range runs {
		fmt.Fprintf(w, "| `%s` | %.2f s | %.2f s | %s | %s / %s | %s |\n", t.name, t.wall.Seconds(), (t.user + t.sys).Seconds(),
			benchutil.MiB(t.maxRSS), benchutil.MiB(t.peakAnon), benchutil.MiB(t.peakFile), benchutil.MiB(uint64(t.outSize)))
	}
	a := runs[0]
	if stop.Stats.Events >= 10_000_000 {
		fmt.Fprintf(w, "\n| target | measured | |\n|---|---:|---|\n")
		fmt.Fprintf(w, "| 10M-call `analyze` under 10 s | %.2f s | %s |\n", a.wall.Seconds(), benchutil.Verdict(a.wall < 10*time.Second))
		fmt.Fprintf(w, "| 10M-call `analyze` under 256 MiB peak | %s | %s |\n", benchutil.MiB(a.maxRSS), benchutil.Verdict(a.maxRSS < 256<<20))
		benchutil.Summary("4", "10M-call `analyze --json` under 10 s", fmt.Sprintf("%.2f s", a.wall.Seconds()), a.wall < 10*time.Second)
		benchutil.Summary("4", "10M-call `analyze --json` under 256 MiB peak (maxrss)", benchutil.MiB(a.maxRSS), a.maxRSS < 256<<20)
		if a.wall >= 10*time.Second {
			fmt.Fprintf(w, "\nThe time target is missed by %.1f s (%.0f%%).", (a.wall - 10*time.Second).Seconds(), 100*(a.wall.Seconds()/10-1))
		}
		if a.maxRSS >= 256<<20 {
			fmt.Fprintf(w, " The memory target is missed by %s; of the peak, %s is run.db mapped by bbolt and %s anonymous memory.",
				benchutil.MiB(a.maxRSS-256<<20), benchutil.MiB(a.peakFile), benchutil.MiB(a.peakAnon))
		}
	} else {
		fmt.Fprintf(w, "\nThe targets are about 10 million calls; this file has %s, so they are not judged here.\n",
			benchutil.Thousands(stop.Stats.Events))
		for _, t := range []string{"10M-call `analyze --json` under 10 s", "10M-call `analyze --json` under 256 MiB peak (maxrss)"} {
			benchutil.SummaryText("4", t, fmt.Sprintf("%.2f s, %s on %s calls", a.wall.Seconds(), benchutil.MiB(a.maxRSS),
				benchutil.Thousands(stop.Stats.Events)), "not judged (fewer calls)")
		}
	}
	fmt.Fprintln(w)
	if top != "" {
		fmt.Fprintf(w, "\nCPU profile of the same analysis in-process (`store.Open` + `analyze.Analyze` + `report.WriteJSON`; "+
			"`go tool pprof -top %s`), top entries:\n\n```\n%s\n```\n", filepath.Base(profile), top)
	}
	fmt.Fprintln(w)
	return nil
}

func firstName(f *struct {
	Symbol string `json:"symbol"`
}) string {
	if f == nil {
		return "none"
	}
	return f.Symbol
}

func measure(env *benchutil.Env, t *timing) error {
	cmd := exec.Command(env.Forensic, t.args...)
	var stdout io.Writer = io.Discard
	var f *os.File
	if !strings.Contains(strings.Join(t.args, " "), " -o ") {
		var err error
		if f, err = os.Create(t.out); err != nil {
			return err
		}
		defer f.Close()
		stdout = f
	}
	cmd.Stdout = stdout
	var errb bytes.Buffer
	cmd.Stderr = &errb
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-done:
				return
			case <-tk.C:
				anon, file := rss(cmd.Process.Pid)
				if anon+file > t.peakAnon+t.peakFile {
					t.peakAnon, t.peakFile = anon, file
				}
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	t.wall = time.Since(start)
	if err != nil {
		return fmt.Errorf("%v: %s", err, errb.String())
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	t.user = time.Duration(ru.Utime.Nano())
	t.sys = time.Duration(ru.Stime.Nano())
	t.maxRSS = uint64(ru.Maxrss) << 10
	if fi, err := os.Stat(t.out); err == nil {
		t.outSize = fi.Size()
	}
	return nil
}

func rss(pid int) (anon, file uint64) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, l := range strings.Split(string(data), "\n") {
		var v uint64
		if _, err := fmt.Sscanf(l, "RssAnon: %d kB", &v); err == nil {
			anon = v << 10
		}
		if _, err := fmt.Sscanf(l, "RssFile: %d kB", &v); err == nil {
			file = v << 10
		}
	}
	return anon, file
}

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
