package recorder

import (
	"github.com/retrivium/forensic/bpf"
	"github.com/retrivium/forensic/store"
)

// storeCounters copies the probes' loss and health counters into the
// run's stats, leaving the fields user space counts itself (events stored,
// samples, ...) as they are. The bpf package knows nothing of the run.db:
// this is the one place its counters meet store.Stats.
func storeCounters(dst *store.Stats, c *bpf.Stats) {
	dst.Calls = c.Calls
	dst.LostCalls = c.LostCalls
	dst.LostFirst = c.LostFirst
	dst.LostLast = c.LostLast
	dst.LostInflight = c.LostInflight
	dst.TooDeep = c.TooDeep
	dst.Unmatched = c.Unmatched
	dst.LostProc = c.LostProc
	dst.LostProcFirst = c.LostProcFirst
	dst.StackErrors = c.StackErrors
	dst.Frozen = c.Frozen
	dst.Untracked = c.Untracked
	dst.UntrackedFirst = c.UntrackedFirst
	dst.LostHolds = c.LostHolds
	dst.StackSkipped = c.StackSkipped
	dst.StackLost = c.StackLost
	dst.UninspectedMaps = c.UninspectedMaps
}
