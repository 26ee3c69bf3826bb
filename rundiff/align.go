package rundiff

import (
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/retrivium/forensic/jobenv"
	"github.com/retrivium/forensic/report"
)

// proc is one process of a run as the alignment sees it: a recorded
// process, or one NVML listed that the recording did not follow.
type proc struct {
	info     report.DiffProcess
	exe      string // base name of the executable
	args     string
	start    int64
	recorded bool
}

// role is what a process does in its job, the same in every run of it.
func (p *proc) role() string { return p.exe + "\x00" + p.args + "\x00" + rankText(p.info.Rank) }

// exeRole is the role without the arguments.
func (p *proc) exeRole() string { return p.exe + "\x00" + rankText(p.info.Rank) }

func rankText(r *int) string {
	if r == nil {
		return "-"
	}
	return strconv.Itoa(*r)
}

// pair is an aligned pair of processes; either may be nil.
type pair struct {
	bad, good *proc
	by        string
}

// processes lists a run's processes: the recorded ones in start order,
// then those NVML listed that the recording did not follow, most memory
// first.
func processes(rep *report.Report) []*proc {
	peaks := nvmlPeaks(rep)
	var out []*proc
	seen := map[uint32]bool{}
	for _, p := range rep.Processes {
		if seen[p.PID] {
			continue
		}
		seen[p.PID] = true
		if _, held := peaks[p.PID]; p.Calls == 0 && !held {
			continue // a helper with no GPU footprint (a shell, a sleep): no role in the comparison
		}
		job := jobenv.Parse(p.Env)
		info := report.DiffProcess{PID: p.PID, Command: commandLine(p), Recorded: true, Rank: job.Rank,
			TracedCalls: p.Calls}
		if v, ok := peaks[p.PID]; ok {
			info.NVMLPeak = &v
		}
		args := ""
		if len(p.Args) > 1 {
			args = strings.Join(p.Args[1:], "\x00")
		}
		out = append(out, &proc{info: info, exe: filepath.Base(p.Exe), args: args, start: p.StartNS, recorded: true})
	}
	var extra []*proc
	for pid, v := range peaks {
		if !seen[pid] {
			v := v
			extra = append(extra, &proc{info: report.DiffProcess{PID: pid, NVMLPeak: &v}, exe: "(not recorded)"})
		}
	}
	sort.Slice(extra, func(i, j int) bool {
		if a, b := *extra[i].info.NVMLPeak, *extra[j].info.NVMLPeak; a != b {
			return a > b
		}
		return extra[i].info.PID < extra[j].info.PID
	})
	return append(out, extra...)
}

// commandLine is a recorded process's command line as one string.
func commandLine(p report.ProcessInfo) string {
	if len(p.Args) == 0 {
		return p.Exe
	}
	s := strings.Join(p.Args, " ")
	if p.ArgsCut {
		s += " ..."
	}
	return s
}

// nvmlPeaks is the most NVML attributed to each process, over its GPUs.
func nvmlPeaks(rep *report.Report) map[uint32]uint64 {
	out := map[uint32]uint64{}
	for _, r := range rep.MemoryViews {
		if r.Field != "process used" || r.PID == 0 || r.Peak == nil {
			continue
		}
		if *r.Peak > out[r.PID] {
			out[r.PID] = *r.Peak
		}
	}
	return out
}

// align pairs the failing run's processes with a good run's by role:
// first executable, arguments and rank, then executable and rank alone
// (the arguments of one job's runs may differ: a batch size, a path),
// each in start order. Processes NVML listed that neither recording
// followed have no role: they pair by memory, most first.
func align(bad, good []*proc) []pair {
	var out []pair
	usedB, usedG := map[*proc]bool{}, map[*proc]bool{}
	match := func(key func(*proc) string, by string, recorded bool) {
		for _, b := range bad {
			if usedB[b] || b.recorded != recorded {
				continue
			}
			for _, g := range good {
				if !usedG[g] && g.recorded == recorded && key(b) == key(g) {
					usedB[b], usedG[g] = true, true
					out = append(out, pair{bad: b, good: g, by: by})
					break
				}
			}
		}
	}
	match((*proc).role, "role", true)
	match((*proc).exeRole, "executable", true)
	match(func(*proc) string { return "" }, "memory", false)
	for _, b := range bad {
		if !usedB[b] {
			out = append(out, pair{bad: b})
		}
	}
	for _, g := range good {
		if !usedG[g] {
			out = append(out, pair{good: g})
		}
	}
	return out
}
