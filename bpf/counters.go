package bpf

import "github.com/retrivium/forensic/store"

// Stats are the probes' loss and health counters (enum fx_counter), each
// combined over CPUs as its row in counters says.
type Stats [counterMax]uint64

// combine says how one counter's per-CPU values make the total.
type combine uint8

const (
	sum      combine = iota // counts add up
	earliest                // "first" times: the earliest nonzero one
	latest                  // "last" times: the latest one
)

// counter is one row of the counters table: how a counter combines over
// CPUs and which run.db field (store.Stats) it fills.
type counter struct {
	combine combine
	store   func(s *store.Stats, v uint64)
}

// counters maps every counter of enum fx_counter to its store.Stats field.
// Adding a counter: one line in the enum, one row here, one field in
// store.Stats (documented in docs/run-db.md). TestCountersTable checks that
// no counter lacks a row.
var counters = [counterMax]counter{
	forensicFxCounterFX_CTR_CALLS:              {sum, func(s *store.Stats, v uint64) { s.Calls = v }},
	forensicFxCounterFX_CTR_LOST_CALLS:         {sum, func(s *store.Stats, v uint64) { s.LostCalls = v }},
	forensicFxCounterFX_CTR_LOST_FIRST_NS:      {earliest, func(s *store.Stats, v uint64) { s.LostFirst = int64(v) }},
	forensicFxCounterFX_CTR_LOST_LAST_NS:       {latest, func(s *store.Stats, v uint64) { s.LostLast = int64(v) }},
	forensicFxCounterFX_CTR_LOST_INFLIGHT:      {sum, func(s *store.Stats, v uint64) { s.LostInflight = v }},
	forensicFxCounterFX_CTR_TOO_DEEP:           {sum, func(s *store.Stats, v uint64) { s.TooDeep = v }},
	forensicFxCounterFX_CTR_UNMATCHED_RETURNS:  {sum, func(s *store.Stats, v uint64) { s.Unmatched = v }},
	forensicFxCounterFX_CTR_LOST_PROC:          {sum, func(s *store.Stats, v uint64) { s.LostProc = v }},
	forensicFxCounterFX_CTR_LOST_PROC_FIRST_NS: {earliest, func(s *store.Stats, v uint64) { s.LostProcFirst = int64(v) }},
	forensicFxCounterFX_CTR_STACK_ERRORS:       {sum, func(s *store.Stats, v uint64) { s.StackErrors = v }},
	forensicFxCounterFX_CTR_FROZEN:             {sum, func(s *store.Stats, v uint64) { s.Frozen = v }},
	forensicFxCounterFX_CTR_UNTRACKED:          {sum, func(s *store.Stats, v uint64) { s.Untracked = v }},
	forensicFxCounterFX_CTR_UNTRACKED_FIRST_NS: {earliest, func(s *store.Stats, v uint64) { s.UntrackedFirst = int64(v) }},
	forensicFxCounterFX_CTR_LOST_HOLDS:         {sum, func(s *store.Stats, v uint64) { s.LostHolds = v }},
	forensicFxCounterFX_CTR_STACK_SKIPPED:      {sum, func(s *store.Stats, v uint64) { s.StackSkipped = v }},
	forensicFxCounterFX_CTR_STACK_LOST:         {sum, func(s *store.Stats, v uint64) { s.StackLost = v }},
}

// sumCPUs combines the per-CPU counter sets: the one place they are added.
func sumCPUs(per []forensicFxStats) Stats {
	var s Stats
	for _, cpu := range per {
		for i, v := range cpu.C {
			switch counters[i].combine {
			case sum:
				s[i] += v
			case earliest:
				if v != 0 && (s[i] == 0 || v < s[i]) {
					s[i] = v
				}
			case latest:
				s[i] = max(s[i], v)
			}
		}
	}
	return s
}

// Store copies the counters into the recorder's stats, leaving the fields
// user space counts itself (events stored, samples, ...) as they are.
func (s *Stats) Store(dst *store.Stats) {
	for i, c := range counters {
		c.store(dst, s[i])
	}
}
