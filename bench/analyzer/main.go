// Command analyzer times forensic's read side on large run.db files (made
// by bench/genrun): `forensic analyze --json`, `forensic analyze` (text),
// `forensic report`, `forensic export` (Perfetto's protobuf trace) and
// `forensic export --format chrome-json`, each as its own process, with
// wall time, CPU time and peak memory from wait4's rusage (maxrss of the
// forensic process itself: it has no children), and the split of resident
// memory between anonymous memory and the mapped run.db (sampled from
// /proc/PID/status every 50 ms).
//
// With -scale, a second, larger run (typically ten times the calls) is
// measured with `analyze --json` and the Perfetto export, and the section
// says how time and memory grow from one to the other.
//
// With -cpuprofile, when a target is missed, it also runs the analysis
// in-process (store.Open, analyze.Analyze, report.WriteJSON) under
// runtime/pprof and prints the top of `go tool pprof -top`. It prints a
// markdown section on stdout.
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
	"strings"
	"syscall"
	"time"

	"github.com/retrivium/forensic/bench/internal/benchutil"
	"github.com/retrivium/forensic/store"
)

// timing is one command's measurement.
type timing struct {
	name     string
	args     []string
	wall     time.Duration
	user     time.Duration
	sys      time.Duration
	maxRSS   uint64 // bytes
	peakAnon uint64 // RssAnon and RssFile when their sum peaked
	peakFile uint64
	maxAnon  uint64 // the largest RssAnon seen
	out      string
	outSize  int64
	keep     bool // the output is small: kept for inspection
}

func (t *timing) cpu() time.Duration { return t.user + t.sys }

// point is one run.db and what was measured on it.
type point struct {
	db     string
	size   int64
	stop   *store.StopInfo
	gen    string
	runs   []*timing
	events uint64 // as the JSON report counts them
	samps  int
	first  string
}

func (p *point) run(name string) *timing {
	for _, t := range p.runs {
		if t.name == name {
			return t
		}
	}
	return nil
}

const (
	cmdJSON   = "forensic analyze --json"
	cmdText   = "forensic analyze (text)"
	cmdReport = "forensic report"
	cmdProto  = "forensic export (Perfetto protobuf)"
	cmdChrome = "forensic export --format chrome-json"
)

func main() {
	db := flag.String("db", "build/bench/big.db", "run.db to read")
	scale := flag.String("scale", "", "a larger run.db: also measure analyze --json and the Perfetto export on it")
	profile := flag.String("cpuprofile", "", "when a target is missed, also profile an in-process analysis into this file")
	genInfo := flag.String("gen", "", "how the file was made (shown in the section)")
	scaleGen := flag.String("scale-gen", "", "how the -scale file was made")
	flag.Parse()
	if err := run(*db, *scale, *profile, *genInfo, *scaleGen); err != nil {
		fmt.Fprintln(os.Stderr, "analyzer:", err)
		os.Exit(1)
	}
}

func run(db, scale, profile, genInfo, scaleGen string) error {
	env, err := benchutil.Setup()
	if err != nil {
		return err
	}
	small, err := measurePoint(env, db, genInfo, true)
	if err != nil {
		return err
	}
	var large *point
	if scale != "" {
		if large, err = measurePoint(env, scale, scaleGen, false); err != nil {
			return err
		}
	}
	var top string
	a := small.run(cmdJSON)
	if missed := a.wall >= 10*time.Second || a.maxRSS >= 256<<20; profile != "" && missed && small.stop.Stats.Events >= 10_000_000 {
		if top, err = profileAnalyze(db, profile); err != nil {
			return err
		}
	}
	w := os.Stdout
	writeMain(w, small)
	writeExports(w, small, large)
	if large != nil {
		writeScale(w, small, large)
	}
	if top != "" {
		fmt.Fprintf(w, "\nCPU profile of the same analysis in-process (`store.Open` + `analyze.Analyze` + `report.WriteJSON`; "+
			"`go tool pprof -top %s`), top entries:\n\n```\n%s\n```\n", filepath.Base(profile), top)
	}
	fmt.Fprintln(w)
	return nil
}

// measurePoint runs the commands on one run.db: all of them (full), or
// only analyze --json and the Perfetto export.
func measurePoint(env *benchutil.Env, db, gen string, full bool) (*point, error) {
	stop, err := benchutil.ReadStop(db)
	if err != nil {
		return nil, err
	}
	st, err := os.Stat(db)
	if err != nil {
		return nil, err
	}
	p := &point{db: db, size: st.Size(), stop: stop, gen: gen}
	base := filepath.Join(env.Work, strings.TrimSuffix(filepath.Base(db), ".db"))
	p.runs = []*timing{{name: cmdJSON, args: []string{"analyze", "--json", db}, out: base + "-analyze.json", keep: true}}
	if full {
		p.runs = append(p.runs,
			&timing{name: cmdText, args: []string{"analyze", "--no-color", db}, out: base + "-analyze.txt", keep: true},
			&timing{name: cmdReport, args: []string{"report", db, "-o", base + "-report.html"}, out: base + "-report.html"})
	}
	p.runs = append(p.runs, &timing{name: cmdProto, args: []string{"export", db, "-o", base + "-trace.pftrace"}, out: base + "-trace.pftrace"})
	if full {
		p.runs = append(p.runs, &timing{name: cmdChrome, args: []string{"export", "--format", "chrome-json", db, "-o", base + "-trace.json"},
			out: base + "-trace.json"})
	}
	for _, t := range p.runs {
		err := measure(env, t)
		if !t.keep {
			os.Remove(t.out) // large outputs: only their size is kept
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", t.name, err)
		}
		benchutil.Logf("analyzer: %s %s: %v wall, %v user, %v sys, maxrss %s (anon %s, file %s), output %s",
			filepath.Base(db), t.name, t.wall.Round(time.Millisecond), t.user.Round(time.Millisecond), t.sys.Round(time.Millisecond),
			benchutil.MiB(t.maxRSS), benchutil.MiB(t.peakAnon), benchutil.MiB(t.peakFile), benchutil.MiB(uint64(t.outSize)))
	}
	p.readJSON(p.runs[0].out)
	return p, nil
}

// readJSON takes what the JSON report says it analyzed.
func (p *point) readJSON(path string) {
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
	if data, err := os.ReadFile(path); err == nil {
		json.Unmarshal(data, &rep)
	}
	p.events, p.samps, p.first = rep.Run.Events, rep.Sampling.Samples, "none"
	if rep.FirstFailure != nil {
		p.first = rep.FirstFailure.Symbol
	}
}

func measure(env *benchutil.Env, t *timing) error {
	cmd := exec.Command(env.Forensic, t.args...)
	var stdout io.Writer = io.Discard
	if !strings.Contains(strings.Join(t.args, " "), " -o ") {
		f, err := os.Create(t.out)
		if err != nil {
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
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
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
				t.maxAnon = max(t.maxAnon, anon)
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	<-sampled
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
