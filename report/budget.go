package report

import "strings"

// Budget is where one GPU view's memory went at one moment: parts that
// add up to the view's total, each with where its figure comes from and
// how sure it is.
type Budget struct {
	GPU     int    `json:"gpu"` // NVML index
	GPUUUID string `json:"gpu_uuid,omitempty"`
	View    string `json:"view"` // "framebuffer" or "bar1"
	// At names the moment: "first-failure" (the sample that best reflects
	// the state at the first failure) or "least-headroom" (the moment of
	// the view's least free, Headroom's AtNS, when that figure is exact:
	// the sample's round with each recorded process's traced part and
	// free as the traced calls left them then; else the sample nearest
	// it, and Note says so). TimeNS is that moment, else the sample's
	// start.
	At     string       `json:"at"`
	TimeNS int64        `json:"time_ns"`
	Total  uint64       `json:"total_bytes"`
	Parts  []BudgetPart `json:"parts"`
	// Note says why the parts do not add up to the total, when they do not.
	Note string `json:"note,omitempty"`
}

// BudgetPart is one share of a budget.
type BudgetPart struct {
	// Kind is reserved (the driver's), traced (a recorded process's live
	// traced allocations, outside memory pools when it has pool parts),
	// pool (a recorded process's traced allocations live in one memory
	// pool: the pool's memory in use), mapping (BAR1: a recorded
	// process's traced mappings of one kind), untraced (a recorded process's memory no traced
	// call sized: its contexts, above all), process (a recorded process's
	// use, not split), process-not-recorded (a process the recording did
	// not follow), unattributed (used memory no listed process holds) or
	// free.
	Kind    string  `json:"kind"`
	PID     *uint32 `json:"pid"`
	Command string  `json:"command,omitempty"`
	// User, Container and Pod name a process not recorded further, as
	// /proc showed it when a sample first listed it: its user (the name,
	// else "uid N"), the container id its cgroup names, and its
	// Kubernetes pod ("namespace/name", else the pod's uid).
	User      string `json:"user,omitempty"`
	Container string `json:"container,omitempty"`
	Pod       string `json:"pod,omitempty"`
	// Pool is a pool part's memory pool (its handle, "0x..."), PoolMax
	// the maxSize it was created with (absent: none recorded).
	// Mapping is a mapping part's kind of mapping (ipc-mapping,
	// peer-access, peer-access-range, pool-import).
	Mapping string  `json:"mapping,omitempty"`
	Pool    string  `json:"pool,omitempty"`
	PoolMax *uint64 `json:"pool_max_bytes,omitempty"`
	Bytes   uint64  `json:"bytes"`
	// Bound is exact, at-most or at-least.
	Bound  string `json:"bound"`
	Source string `json:"source"`
	// ByPhase and BySite split a traced part at the failure: its
	// allocations by the phase they were made in (markers, else before
	// and after the process's first free), and by the call site of
	// their stacks (the innermost frame of the program's own code), when
	// stacks were recorded. Each adds up to Bytes. ByPhase is absent when
	// all were made in one phase, BySite when none has a stack.
	ByPhase []BudgetShare `json:"by_phase,omitempty"`
	BySite  []BudgetShare `json:"by_site,omitempty"`
}

// BudgetShare is one share of a traced part: the bytes of its
// allocations made in one phase, or at one call site.
type BudgetShare struct {
	Name  string `json:"name"`
	Bytes uint64 `json:"bytes"`
}

// BudgetWho says whose a part not recorded is, in words: "user alice,
// container 0123456789ab, pod ml/serve-0" (the container id's first 12
// hex digits, as container tools show it), or "" when nothing is known.
func BudgetWho(p BudgetPart) string {
	var out []string
	if p.User != "" {
		out = append(out, "user "+p.User)
	}
	if c := p.Container; c != "" {
		out = append(out, "container "+c[:min(len(c), 12)])
	}
	if p.Pod != "" {
		out = append(out, "pod "+p.Pod)
	}
	return strings.Join(out, ", ")
}

// BudgetNotNamed ends the source of a part not recorded that could not be
// named, before the reason.
const BudgetNotNamed = "; not named: "

// BudgetUnnamed says why a part not recorded has no command, user,
// container or pod ("not readable in /proc (the process had exited)"),
// or "" when it was named or is not such a part.
func BudgetUnnamed(p BudgetPart) string {
	if i := strings.LastIndex(p.Source, BudgetNotNamed); i >= 0 {
		return p.Source[i+len(BudgetNotNamed):]
	}
	return ""
}
