package fleet

import (
	"fmt"
	"strings"
)

// NoteKind is what a note of the order says. Callers decide by the kind,
// never by the note's words, which may change.
type NoteKind string

// The kinds of note Order makes.
const (
	// NoteDuplicateRank: two or more runs name one rank.
	NoteDuplicateRank NoteKind = "duplicate_rank"
	// NoteWorldSizeDisagrees: the runs report different world sizes.
	NoteWorldSizeDisagrees NoteKind = "world_size_disagrees"
	// NoteWorldSizeTooLarge: the world size is too large to list the
	// missing ranks.
	NoteWorldSizeTooLarge NoteKind = "world_size_too_large"
	// NoteMissingRanks: ranks below the world size have no run
	// (Result.MissingRanks says which).
	NoteMissingRanks NoteKind = "missing_ranks"
	// NoteNoClockMapping: a failed run has no wall-clock mapping.
	NoteNoClockMapping NoteKind = "no_clock_mapping"
	// NoteNoClockBound: a failed run's clock has no error bound.
	NoteNoClockBound NoteKind = "no_clock_bound"
	// NoteUncertainOrder: the first failure cannot be ordered against
	// others (Result.Order is OrderUncertain).
	NoteUncertainOrder NoteKind = "uncertain_order"
)

// FixClockBound is the advice for any failure that cannot be ordered for
// want of a clock bound.
const FixClockBound = "run a time daemon (chrony or linuxptp) on every host so each run records a bound on its clock's error"

// noteKinds is, for each kind, the advice that goes with it and whether
// the note only restates a field of the Result (MissingRanks, Order) that
// a caller reports from the field itself.
var noteKinds = map[NoteKind]struct {
	fix      string
	restates bool
}{
	NoteDuplicateRank:      {fix: "give the runs of one attempt of the job: a restarted job's earlier runs belong to another analysis"},
	NoteWorldSizeDisagrees: {fix: "see docs/multi-run.md"},
	NoteWorldSizeTooLarge:  {fix: "see docs/multi-run.md"},
	NoteMissingRanks:       {fix: "see docs/multi-run.md", restates: true},
	NoteNoClockMapping:     {fix: FixClockBound},
	NoteNoClockBound:       {fix: FixClockBound},
	NoteUncertainOrder:     {fix: FixClockBound, restates: true},
}

// Fix is the advice for a note of this kind.
func (k NoteKind) Fix() string { return noteKinds[k].fix }

// Restates reports whether a note of this kind only says in words what a
// field of the Result already holds (MissingRanks, Order), so a caller
// that reports from the field need not repeat the note.
func (k NoteKind) Restates() bool { return noteKinds[k].restates }

// Note is one thing the order found worth saying: its kind, which callers
// decide by, and its text, which they show.
type Note struct {
	Kind NoteKind `json:"kind"`
	Text string   `json:"text"`
}

// String is the note's text.
func (n Note) String() string { return n.Text }

func missingNote(missing []int, ws, unnamed int) Note {
	list := joinInts(missing[:min(len(missing), 32)])
	if len(missing) > 32 {
		list += ", …"
	}
	n := fmt.Sprintf("%d of %d ranks have no run (%s): the rank that failed first is often the one whose file is missing "+
		"(its node crashed, was not recorded, or its run.db was not gathered); collect it before trusting this order",
		len(missing), ws, list)
	if unnamed > 0 {
		n += fmt.Sprintf("; %d run(s) name no rank and may be among them", unnamed)
	}
	return Note{Kind: NoteMissingRanks, Text: n}
}

func duplicateNotes(has map[int][]string) []Note {
	var notes []Note
	for _, k := range sortedKeys(has) {
		if paths := has[k]; len(paths) > 1 {
			notes = append(notes, Note{Kind: NoteDuplicateRank,
				Text: fmt.Sprintf("rank %d has %d runs (%s): a restarted job, or two recorders on one process",
					k, len(paths), strings.Join(paths, ", "))})
		}
	}
	return notes
}

func worldSizeNote(sizes map[int]bool, ws int) Note {
	return Note{Kind: NoteWorldSizeDisagrees,
		Text: fmt.Sprintf("the runs disagree on the world size (%s): the largest, %d, is used", joinInts(sortedKeys(sizes)), ws)}
}

func tooLargeNote(ws int) Note {
	return Note{Kind: NoteWorldSizeTooLarge, Text: fmt.Sprintf("world size %d is too large to list missing ranks", ws)}
}

// boundNotes names the failed runs whose failure cannot be ordered against
// another boot's failure because their clock has no bound. Runs of one boot
// share a clock and need none: a run is named only when a failure of
// another boot (or of a run that names no boot) is there to order it
// against.
func boundNotes(runs []Run) []Note {
	var notes []Note
	for i, r := range runs {
		if r.Failure == nil || !otherBootFailed(runs, i) {
			continue
		}
		switch {
		case r.Clock == nil:
			notes = append(notes, Note{Kind: NoteNoClockMapping,
				Text: fmt.Sprintf("%s (host %s) has no wall-clock mapping: its failure cannot be ordered against other hosts", r.Path, r.Host)})
		case r.Clock.ErrorNS == nil:
			why := r.Clock.ErrorWhy
			if why == "" {
				why = "no clock error bound was recorded"
			}
			notes = append(notes, Note{Kind: NoteNoClockBound,
				Text: fmt.Sprintf("%s (host %s) has no clock bound (%s): its failure cannot be ordered against other hosts or boots", r.Path, r.Host, why)})
		}
	}
	return notes
}

func uncertainNote(f *Candidate) Note {
	var parts []string
	for _, u := range f.Unordered {
		switch u.Reason {
		case ReasonOverlap:
			parts = append(parts, fmt.Sprintf("%s (intervals overlap by %d ns)", u.RunPath, *u.OverlapNS))
		case ReasonNoBound:
			parts = append(parts, u.RunPath+" (no clock bound)")
		default:
			parts = append(parts, u.RunPath+" (same time on the same clock)")
		}
	}
	return Note{Kind: NoteUncertainOrder,
		Text: fmt.Sprintf("the first failure is uncertain: %s has the earliest estimate, but it cannot be ordered against %s",
			f.RunPath, strings.Join(parts, ", "))}
}
