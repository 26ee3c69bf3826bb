package main

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/retrivium/forensic/analyze"
	"github.com/retrivium/forensic/runpaths"
)

// jobFlags are analyze's flags that select one job of a recording.
type jobFlags struct {
	id  string
	pid uint32
	pod string
}

func (f *jobFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.id, "job", "", "give the verdict of job `ID` (tree:PID, job:ID, pod:NS/NAME, cgroup:PATH) alone")
	cmd.Flags().Uint32Var(&f.pid, "pid", 0, "give the verdict of the job of process `PID` alone")
	cmd.Flags().StringVar(&f.pod, "pod", "", "give the verdict of the job of pod `NAMESPACE/NAME` alone")
}

// selector is the job the flags select (nil: none), checked against the
// runs args name: a job is one recording's.
func (f *jobFlags) selector(args []string) (*analyze.JobSelector, error) {
	sel := analyze.JobSelector{ID: f.id, PID: f.pid, Pod: f.pod}
	n := 0
	for _, set := range []bool{f.id != "", f.pid != 0, f.pod != ""} {
		if set {
			n++
		}
	}
	switch {
	case n == 0:
		return nil, nil
	case n > 1:
		return nil, usageErr("give one of --job, --pid and --pod")
	case f.pod != "" && (!strings.Contains(f.pod, "/") || strings.HasPrefix(f.pod, "/") || strings.HasSuffix(f.pod, "/")):
		return nil, usageErr("--pod %q: give NAMESPACE/NAME", f.pod)
	}
	paths, err := runpaths.Expand(args)
	if err != nil {
		return nil, err
	}
	if len(paths) > 1 {
		return nil, usageErr("%s selects a job of one recording: give one run.db (%s)", sel, runsFound(paths))
	}
	return &sel, nil
}
