package bpf

// Stats are the probes' loss and health counters (enum fx_counter), each
// combined over CPUs as its row in counters says. The recorder copies them
// into the run's stop record; the fields keep the names they have there.
type Stats struct {
	Calls          uint64 // completed tracked calls the probes saw
	LostCalls      uint64 // completed calls not delivered: ring buffer full
	LostFirst      int64  // exit time of the earliest lost call
	LostLast       int64  // exit time of the latest lost call
	LostInflight   uint64 // calls not followed: no per-thread storage at entry or return
	TooDeep        uint64 // entries beyond FX_MAX_DEPTH
	Unmatched      uint64 // returns without a stashed entry
	LostProc       uint64 // lifecycle records not delivered
	LostProcFirst  int64  // time of the first lost lifecycle record
	StackErrors    uint64 // stack captures that failed
	Frozen         uint64 // processes stopped by --freeze-on-failure
	Untracked      uint64 // processes the tracked table had no room for
	UntrackedFirst int64  // time of the first untracked process
	LostHolds      uint64 // libcuda mappings not held: the holds ring was full
	StackSkipped   uint64 // stack captures left out by their rate limit
	StackLost      uint64 // stack captures made but not delivered
	// UninspectedMaps: executable mappings the map hook could not look
	// at (the address space was locked), each held uninspected.
	UninspectedMaps uint64
}

// combine says how one counter's per-CPU values make the total.
type combine uint8

const (
	sum      combine = iota // counts add up
	earliest                // "first" times: the earliest nonzero one
	latest                  // "last" times: the latest one
)

// counter is one row of the counters table: how a counter combines over
// CPUs and which Stats field it fills.
type counter struct {
	combine combine
	set     func(s *Stats, v uint64)
}

// counters maps every counter of enum fx_counter to its Stats field.
// Adding a counter: one line in the enum, one row here, one field in Stats
// and in store.Stats (documented in docs/run-db.md), and one line where the
// recorder copies it. TestCountersTable checks that no counter lacks a row.
var counters = [counterMax]counter{
	forensicFxCounterFX_CTR_CALLS:              {sum, func(s *Stats, v uint64) { s.Calls = v }},
	forensicFxCounterFX_CTR_LOST_CALLS:         {sum, func(s *Stats, v uint64) { s.LostCalls = v }},
	forensicFxCounterFX_CTR_LOST_FIRST_NS:      {earliest, func(s *Stats, v uint64) { s.LostFirst = int64(v) }},
	forensicFxCounterFX_CTR_LOST_LAST_NS:       {latest, func(s *Stats, v uint64) { s.LostLast = int64(v) }},
	forensicFxCounterFX_CTR_LOST_INFLIGHT:      {sum, func(s *Stats, v uint64) { s.LostInflight = v }},
	forensicFxCounterFX_CTR_TOO_DEEP:           {sum, func(s *Stats, v uint64) { s.TooDeep = v }},
	forensicFxCounterFX_CTR_UNMATCHED_RETURNS:  {sum, func(s *Stats, v uint64) { s.Unmatched = v }},
	forensicFxCounterFX_CTR_LOST_PROC:          {sum, func(s *Stats, v uint64) { s.LostProc = v }},
	forensicFxCounterFX_CTR_LOST_PROC_FIRST_NS: {earliest, func(s *Stats, v uint64) { s.LostProcFirst = int64(v) }},
	forensicFxCounterFX_CTR_STACK_ERRORS:       {sum, func(s *Stats, v uint64) { s.StackErrors = v }},
	forensicFxCounterFX_CTR_FROZEN:             {sum, func(s *Stats, v uint64) { s.Frozen = v }},
	forensicFxCounterFX_CTR_UNTRACKED:          {sum, func(s *Stats, v uint64) { s.Untracked = v }},
	forensicFxCounterFX_CTR_UNTRACKED_FIRST_NS: {earliest, func(s *Stats, v uint64) { s.UntrackedFirst = int64(v) }},
	forensicFxCounterFX_CTR_LOST_HOLDS:         {sum, func(s *Stats, v uint64) { s.LostHolds = v }},
	forensicFxCounterFX_CTR_STACK_SKIPPED:      {sum, func(s *Stats, v uint64) { s.StackSkipped = v }},
	forensicFxCounterFX_CTR_STACK_LOST:         {sum, func(s *Stats, v uint64) { s.StackLost = v }},
	forensicFxCounterFX_CTR_UNINSPECTED_MAPS:   {sum, func(s *Stats, v uint64) { s.UninspectedMaps = v }},
}

// sumCPUs combines the per-CPU counter sets: the one place they are added.
func sumCPUs(per []forensicFxStats) Stats {
	var total [counterMax]uint64
	for _, cpu := range per {
		for i, v := range cpu.C {
			switch counters[i].combine {
			case sum:
				total[i] += v
			case earliest:
				if v != 0 && (total[i] == 0 || v < total[i]) {
					total[i] = v
				}
			case latest:
				total[i] = max(total[i], v)
			}
		}
	}
	var s Stats
	for i, c := range counters {
		c.set(&s, total[i])
	}
	return s
}
