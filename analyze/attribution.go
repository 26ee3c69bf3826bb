package analyze

import (
	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
)

// attributionFacts are the typed facts an attribution is decided from.
// Each comes from the rule of docs/rules.md that names it.
type attributionFacts struct {
	// failed is the failed call's symbol, and meaning what its result
	// code means (attribution-by-result-code); failed is nil when no
	// recorded call failed.
	failed  *cuda.Symbol
	meaning cuda.Meaning
	// judged is an attribution already decided from a run's own facts:
	// a report of several files starts from its chosen run's, and adds
	// what it finds across them (hidden).
	judged report.Attribution
	// hidden: missing evidence could hide an earlier failure
	// (hidden-failure, job-scope; across runs, a file that could not be
	// read, a rank with no run, failures that cannot be ordered).
	hidden bool
	// endedBadly: every failure was recovered, yet a process then ended
	// badly of something the record does not hold (recovered).
	endedBadly bool
}

// attribution decides the attribution from its facts. It is the only
// function that does: every Attribution in a report is its result or a
// copy of one.
func attribution(f attributionFacts) report.Attribution {
	switch {
	case f.hidden || f.endedBadly:
		return report.AttrMissingEvidence
	case f.judged != "":
		return f.judged
	case f.failed == nil:
		return report.AttrNone
	}
	return byResultCode(f.failed, f.meaning)
}

// byResultCode is the rule attribution-by-result-code: the operation class
// and what the result code means (cuda.Results). It is the only place
// where the two meet; only attribution calls it.
func byResultCode(sym *cuda.Symbol, m cuda.Meaning) report.Attribution {
	switch m {
	case cuda.MeaningNotMemory, cuda.MeaningSuccess:
		return report.AttrNotMemory
	case cuda.MeaningSticky, cuda.MeaningUnknown:
		return report.AttrMissingEvidence
	}
	switch sym.Op {
	case cuda.OpAllocation, cuda.OpHostAllocation, cuda.OpContext:
		return report.AttrAllocation
	case cuda.OpMapping:
		if m == cuda.MeaningResource && sym.Creates.View() == cuda.ViewHost {
			// Registering host memory that ran out of memory ran out of
			// page-locked host memory, what it creates: an allocation
			// problem of host memory, not a mapping of device memory.
			return report.AttrAllocation
		}
		return report.AttrMapping
	case cuda.OpFree:
		// A failed release belongs to the side that created what it
		// primarily releases (cuMemFree: allocations; cuMemUnmap: mappings).
		if len(sym.Releases) > 0 && sym.Releases[0].CreatedBy() == cuda.OpMapping {
			return report.AttrMapping
		}
		return report.AttrAllocation
	}
	if m == cuda.MeaningResource {
		return report.AttrAllocation
	}
	return report.AttrNotMemory
}
