package text

import (
	"fmt"
	"path"
	"strings"

	"github.com/retrivium/forensic/report"
)

// jobCommandWidth bounds the command line a job's line shows.
const jobCommandWidth = 24

// jobs lists a shared recording's jobs, one line each, with each job's
// first failure, and says whose failure the verdict is about.
func (t *writer) jobs(rep *report.Report) {
	if len(rep.Jobs) == 0 {
		return
	}
	head := fmt.Sprintf("JOBS  %d on this recording; ", len(rep.Jobs))
	switch {
	case rep.JobSelected:
		head += "the verdict is " + rep.SubjectJob + "'s alone (selected)"
	case rep.SubjectJob != "":
		head += "the verdict is " + rep.SubjectJob + "'s failure"
	default:
		head += "none failed"
	}
	t.heading(clip(head, t.o.Width))
	for _, j := range rep.Jobs {
		mark := "  "
		if j.Headline {
			mark = "* "
		}
		for _, line := range hangLines("  "+mark, "      ", t.jobLine(j), t.o.Width) {
			t.printf("%s\n", line)
		}
	}
	if rep.JobSelected {
		t.wrap("  ", "The other jobs' processes are neighbours: their memory is in the views and live bytes, their failures are not judged here.")
		return
	}
	t.wrap("  ", "One job's verdict: forensic analyze --job ID (or --pid PID, --pod NAMESPACE/NAME).")
}

// jobLine is one job: its id, command and first failure.
func (t *writer) jobLine(j report.Job) string {
	line := j.ID
	if j.Command != "" {
		line += " (" + clip(shortCommand(j.Command), jobCommandWidth) + ")"
	}
	f := j.FirstFailure
	if f == nil {
		return line + ": no call failed"
	}
	line += ": " + f.Symbol
	if f.Size != nil {
		line += " " + report.HumanBytes(*f.Size)
	}
	return line + fmt.Sprintf(" %s at %s, pid %d: %s", f.Result, report.Rel(f.AtNS, t.start), f.PID, j.Attribution)
}

// shortCommand names a command line by its program's base name: the
// directory it was run from says little of whose job it is.
func shortCommand(cmd string) string {
	prog, rest, _ := strings.Cut(cmd, " ")
	return strings.TrimSpace(path.Base(prog) + " " + rest)
}
