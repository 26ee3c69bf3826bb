package html

import (
	"fmt"
	"strings"
	"time"

	"github.com/retrivium/forensic/report"
)

// page is everything report.html shows, prepared: every string is the
// text a person reads (html/template escapes it where it lands), every
// number of the timeline a coordinate. The template only lays it out.
type page struct {
	Title     string
	Version   string
	Header    header
	Verdict   verdictView
	Runs      *runsView
	Headroom  *headroomView
	Budgets   []budgetView
	Evidence  evidenceView
	Samples   *samplesView
	Missing   []missingRow
	Failures  failuresView
	Timeline  timelineView
	Views     viewsView
	Processes []processRow
	Kernel    []kernelRow
	Loss      lossView
	Coverage  []libraryRow
	Calls     []callRow
	Footer    footer
}

// clock converts run-clock times for display: relative to the run's
// start, and as wall time when the run recorded one.
type clock struct {
	start int64
	wall  time.Time // zero when the run has no wall time
}

// layouts of wall times.
const (
	wallLong  = "2006-01-02 15:04:05.000000 UTC"
	wallShort = "15:04:05.000000"
)

func newClock(run *report.RunInfo) clock {
	c := clock{start: run.StartNS}
	if w, err := time.Parse(time.RFC3339Nano, run.WallStart); err == nil && w.Year() > 1 {
		c.wall = w.UTC()
	}
	return c
}

// rel is t as seconds since the start of the run ("+1.200 s").
func (c clock) rel(t int64) string { return report.Rel(t, c.start) }

// at is t as wall time in layout, or "" without a wall time.
func (c clock) at(t int64, layout string) string {
	if c.wall.IsZero() {
		return ""
	}
	return c.wall.Add(time.Duration(t - c.start)).Format(layout)
}

// newPage prepares the view model of rep.
func newPage(rep *report.Report) *page {
	c := newClock(&rep.Run)
	p := &page{
		Title:     title(rep),
		Version:   rep.Run.Version,
		Header:    newHeader(rep, c),
		Verdict:   newVerdict(rep, c),
		Runs:      newRuns(rep),
		Headroom:  newHeadroom(rep, c),
		Budgets:   newBudgets(rep, c),
		Evidence:  newEvidence(rep.Evidence, c),
		Samples:   newSamples(rep.NearestSamples, c),
		Missing:   newMissing(rep.Missing),
		Failures:  newFailures(rep, c),
		Timeline:  newTimeline(rep, c),
		Views:     newViews(rep, c),
		Processes: newProcesses(rep.Processes, c),
		Kernel:    newKernel(rep, c),
		Loss:      newLoss(rep),
		Coverage:  newCoverage(rep.Coverage),
		Calls:     newCalls(rep),
	}
	p.Footer = footer{Version: rep.Run.Version, Path: rep.Run.Path, FileSchema: rep.Run.Schema, Schema: rep.Schema,
		Clock: orDash(rep.Run.Clock)}
	return p
}

func title(rep *report.Report) string {
	t := "forensic report: " + string(rep.Attribution)
	if f := rep.FirstFailure; f != nil {
		t += ", " + f.Symbol + " " + f.ResultName
	}
	return t
}

// header is the run at a glance. Recorded says how (spawn, pid or all
// mode; a flight recording says so); Flight is how a flight recording's
// segments were read, nil for a single run.db.
type header struct {
	Head, What, WhatFull                string
	ID, Recorded, Host, Kernel          string
	Started, Duration, Ended, StopError string
	Interrupted, Events, Job            string
	Flight                              *flightView
}

// flightView is how a flight recording was read: its segments, the live
// one, and what retention deleted.
type flightView struct {
	Segments string
	NotRead  []string
	Deleted  string
}

// newFlight describes how a flight recording was read; nil for a run.db.
func newFlight(f *report.FlightRead) *flightView {
	if f == nil {
		return nil
	}
	v := &flightView{Segments: report.Plural(f.SegmentsRead, "segment") + " read", NotRead: f.NotRead,
		Deleted: "nothing: every stretch recorded is still on disk"}
	switch f.Live {
	case "copy":
		v.Segments += ", the live one from a copy its recorder made at " + f.LiveTaken
	case "snapshot":
		v.Segments += ", the live one from its snapshot of " + f.LiveTaken
	case "not-read":
		v.Segments += "; the live one could not be read"
	}
	if f.DroppedRanges > 0 {
		v.Deleted = fmt.Sprintf("%s deleted by retention to keep the recording within its size bound (%s)",
			report.Plural(f.DroppedRanges, "stretch"), report.Plural(int(f.DroppedCalls), "call event"))
	}
	return v
}

func newHeader(rep *report.Report, c clock) header {
	r := rep.Run
	what := r.Mode
	if len(r.Command) > 0 {
		what = strings.Join(r.Command, " ")
	} else if r.TargetPID != 0 {
		what = fmt.Sprintf("pid %d", r.TargetPID)
	}
	h := header{What: clip(what, 400), WhatFull: what, ID: r.ID, Recorded: r.Mode + " mode", Host: orDash(r.Host), Kernel: orDash(r.Kernel),
		Started: orDash(c.at(r.StartNS, wallLong)), Duration: report.Duration(r.DurationNS), Ended: ended(&r),
		StopError: r.StopError, Events: report.Plural(int(r.Events), "event"), Job: jobText(rep)}
	if h.Flight = newFlight(r.Flight); h.Flight != nil {
		h.Recorded = "flight mode (" + r.Mode + "), a directory of segments,"
	}
	if r.Interrupted != "" {
		h.Interrupted = "interrupted by " + r.Interrupted + ": stopped by the user or forensic, not a crash"
	}
	switch f := rep.FirstFailure; {
	case f != nil:
		h.Head = f.Symbol + " → " + f.ResultName
	case rep.Attribution == report.AttrMissingEvidence:
		h.Head = "No recorded call failed, but evidence is missing"
	default:
		h.Head = "No recorded call failed"
	}
	return h
}

// jobText is the job the run belongs to, as its environment named it,
// and how many runs of it were analyzed together; "" when none.
func jobText(rep *report.Report) string {
	r := rep.Run
	var parts []string
	if r.Rank != nil {
		s := fmt.Sprintf("rank %d", *r.Rank)
		if r.WorldSize != nil {
			s += fmt.Sprintf(" of %d", *r.WorldSize)
		}
		parts = append(parts, s)
	}
	if r.JobID != "" {
		parts = append(parts, "job "+r.JobID)
	}
	if m := rep.MultiRun; m != nil {
		parts = append(parts, report.Plural(len(m.Runs), "run")+" analyzed together (see Runs)")
	}
	return strings.Join(parts, ", ")
}

// ended says how the run ended and how its workload exited.
func ended(r *report.RunInfo) string {
	end := r.Ended
	if r.StopReason != "" {
		end += " (" + r.StopReason + ")"
	}
	if x := r.WorkloadExit; x != nil {
		switch {
		case x.Code != nil:
			end += fmt.Sprintf(", workload exit status %d", *x.Code)
		case x.Signal != nil:
			end += ", workload killed by " + x.Name
		}
		if x.Core {
			end += " (core dumped)"
		}
	}
	return end
}

// footer says where the page came from.
type footer struct {
	Version, Path, Schema, Clock string
	FileSchema                   uint32
}

// orDash is s, or a dash for a missing value.
func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// clip shortens s to n runes, marking the cut.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// bytesText is v in binary units, or a dash.
func bytesText(v *uint64) string {
	if v == nil {
		return "—"
	}
	return report.HumanBytes(*v)
}

// gpuText names an NVML GPU index, or says it is unknown.
func gpuText(i *int) string {
	if i == nil {
		return "unknown"
	}
	return fmt.Sprintf("GPU %d", *i)
}

// statusClass is the CSS class of an NVML or support status: ok for a
// value that was read, warn for anything else.
func statusClass(s string) string {
	switch s {
	case "NVML_SUCCESS", "recorded", "supported", "decided":
		return "ok"
	}
	return "warn"
}

// procName is pid's command line (its executable when no arguments were
// recorded), or "".
func procName(ps []report.ProcessInfo, pid uint32) string {
	for _, p := range ps {
		if p.PID == pid {
			return p.CommandLine()
		}
	}
	return ""
}

// sameCall reports whether two failures name the same call: a thread
// makes one call at a time.
func sameCall(a *report.Failure, timeNS int64, pid, tid uint32, symbol string) bool {
	return a != nil && a.TimeNS == timeNS && a.PID == pid && a.TID == tid && a.Symbol == symbol
}
