package e2e

import (
	"strconv"

	"github.com/retrivium/forensic/report"
)

// failureBudgets are the report's budgets at the first failure (a report
// also has one per GPU framebuffer at its least free).
func failureBudgets(rep *report.Report) []report.Budget {
	return budgetsAt(rep, "first-failure")
}

// budgetsAt are the report's budgets at one moment ("first-failure",
// "least-headroom").
func budgetsAt(rep *report.Report, at string) []report.Budget {
	var out []report.Budget
	for _, b := range rep.Budget {
		if b.At == at {
			out = append(out, b)
		}
	}
	return out
}

// pidText is "pid N".
func pidText(pid uint32) string { return "pid " + strconv.FormatUint(uint64(pid), 10) }
