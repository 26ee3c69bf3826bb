package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/retrivium/forensic/analyze"
	"github.com/retrivium/forensic/flight"
	"github.com/retrivium/forensic/recorder"
	"github.com/retrivium/forensic/store"
)

// liveCopyPattern names analyze's copy of a live segment in the
// recording's directory while it reads it (removed after).
const liveCopyPattern = ".analyze-live-*.db"

// Flight mode's defaults.
const (
	defaultMaxSize = 1 << 30
	defaultKeep    = 5 * time.Minute
	// defaultKeepPrevious is --keep-previous without a count.
	defaultKeepPrevious = 3
)

// flightFlags are record's flags for flight mode and the metrics.
type flightFlags struct {
	on           bool
	maxSize      uint64
	keepBefore   time.Duration
	keepAfter    time.Duration
	keepPrevious int
	segmentAge   time.Duration // hidden: for tests that rotate quickly
	metricsAddr  string
}

// add declares the flags.
func (f *flightFlags) add(fs *pflag.FlagSet) {
	f.maxSize, f.keepBefore, f.keepAfter, f.segmentAge = defaultMaxSize, defaultKeep, defaultKeep, flight.DefaultSegmentAge
	fs.BoolVar(&f.on, "flight", false, "flight mode: -o names a directory; run until stopped, keeping the recent past and a window around every failure within --max-size")
	fs.Var(sizeFlag{v: &f.maxSize, check: maxSizeCheck}, "max-size", "flight mode: the disk all segments take together, at most (snapshots are extra: the newest four, each up to a segment's size)")
	fs.Var(durationFlag{v: &f.keepBefore, zeroOK: true}, "keep-before", "flight mode: how much before each failure is kept")
	fs.Var(durationFlag{v: &f.keepAfter, zeroOK: true}, "keep-after", "flight mode: how much after each failure is kept")
	fs.IntVar(&f.keepPrevious, "keep-previous", 0, "flight mode: move a recording found in the directory to DIR/previous (older ones to previous.2, ...) instead of refusing, keeping at most `N` in all (--keep-previous alone: 3; give a count as --keep-previous=N)")
	fs.Lookup("keep-previous").NoOptDefVal = strconv.Itoa(defaultKeepPrevious)
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus metrics and /healthz on this `ADDRESS` (for example :9401)")
	fs.Var(durationFlag{v: &f.segmentAge, min: 100 * time.Millisecond}, "segment-age", "flight mode: close a segment this old")
	fs.MarkHidden("segment-age")
}

// maxSizeCheck refuses a bound below two of the smallest segments.
func maxSizeCheck(n uint64) error {
	if n < flight.MinMaxBytes {
		return fmt.Errorf("%s is below %s (two segments of %s)", sizeWords(n), formatSize(flight.MinMaxBytes),
			formatSize(flight.MinSegmentBytes))
	}
	return nil
}

// config completes the recorder's configuration, refusing flight mode's
// flags without --flight.
func (f *flightFlags) config(cfg *recorder.Config, fs *pflag.FlagSet) error {
	cfg.MetricsAddr = f.metricsAddr
	if !f.on {
		for _, name := range []string{"max-size", "keep-before", "keep-after", "keep-previous", "segment-age"} {
			if fs.Changed(name) {
				return usageErr("--%s is a flight mode flag: give --flight too", name)
			}
		}
		return nil
	}
	if cfg.Force {
		return usageErr("--force does not apply to --flight (--keep-previous keeps a recording found in the directory)")
	}
	if f.keepPrevious < 0 {
		return usageErr("--keep-previous=%d: give a count of 0 or more", f.keepPrevious)
	}
	pol, err := flight.NewPolicy(int64(f.maxSize), f.keepBefore, f.keepAfter)
	if err != nil {
		return usageErr("%v", err)
	}
	pol.SegmentAge = f.segmentAge
	cfg.Flight = &recorder.FlightConfig{Policy: pol, KeepPrevious: f.keepPrevious}
	return nil
}

// snapshotSignals turns SIGUSR1 into snapshot requests (flight mode).
func snapshotSignals() <-chan os.Signal {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	return ch
}

func (c *cli) snapshotCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "snapshot DIR",
		Short: "copy a flight recording's live segment, while it records",
		Long: `Asks the recorder writing the flight recording DIR for a consistent copy
of its live segment (the minutes before now), written to DIR/snapshots/
while recording goes on. The closed segments are readable as they are;
with the snapshot, "forensic analyze DIR" reads the recording up to now
even where the recorder cannot be asked (a copy of DIR on another machine).
The newest four snapshots are kept. SIGUSR1 to the recorder does the same.`,
		Annotations: map[string]string{"exit": `  0    the snapshot was written; its path is printed
  1    no recorder answered for DIR, it refused, or the copy failed
  2    the command line is wrong
`},
		Example: `  forensic snapshot /var/lib/forensic/flight`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErr("give the flight recording's directory")
			}
			return nil
		},
		RunE: work(func(cmd *cobra.Command, args []string) error {
			if !flight.IsRecording(args[0]) {
				return fmt.Errorf("%s: %w", args[0], flight.ErrIndex)
			}
			path, err := recorder.Snapshot(args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "wrote %s\n", path)
			return nil
		}),
	}
}

// openRun opens a recording: a run.db, or a flight recording's directory
// as one recording. While the directory's recorder runs, its live segment
// is read from a consistent copy the recorder sends now (its newest
// snapshot when the recorder cannot be asked); one line on stderr says
// what was read. done closes the recording and removes the copy.
func (c *cli) openRun(path string) (src analyze.Source, done func() error, err error) {
	if !store.IsFlightDir(path) {
		r, err := store.Open(path)
		if err != nil {
			return nil, nil, err
		}
		return r, r.Close, nil
	}
	set, copyPath, err := c.openFlight(path)
	if err != nil {
		return nil, nil, err
	}
	c.sayRead(set)
	return set, func() error {
		err := set.Close()
		if copyPath != "" {
			os.Remove(copyPath)
		}
		return err
	}, nil
}

// openFlight opens a flight recording's directory; a live segment is read
// from a copy its recorder makes now (copyPath, removed by the caller). A
// segment that rotated between the copy and the index read makes the copy
// one of a segment now closed, which the set refuses: the copy is taken
// again, so that the events read and the recorder's count stored with
// them come from the same moment.
func (c *cli) openFlight(path string) (set *store.Set, copyPath string, err error) {
	for try := 0; ; try++ {
		var opts flight.OpenOptions
		copyPath = ""
		if x, err := flight.ReadIndex(path); err == nil && len(x.Segments) > 0 && x.Segments[len(x.Segments)-1].Live {
			copyPath, opts.Live = c.copyLive(path)
		}
		set, err = flight.OpenWith(path, opts)
		if err == nil && copyPath != "" && set.Live() == nil && try < 2 {
			set.Close()
			os.Remove(copyPath)
			continue
		}
		if err != nil && copyPath != "" {
			os.Remove(copyPath)
		}
		return set, copyPath, err
	}
}

// copyLive asks a flight recording's recorder for a copy of its live
// segment, into a temporary file (mode 0600) beside the recording: on the
// filesystem sized for it, not in /tmp (a small tmpfs in a container);
// nothing when no recorder answers or the directory cannot be written.
func (c *cli) copyLive(dir string) (string, *store.LiveCopy) {
	f, err := os.CreateTemp(dir, liveCopyPattern)
	if err != nil {
		c.note("forensic: %s: no room for a copy of the live segment beside the recording: %s", dir, oneLine(err))
		return "", nil
	}
	lc, err := recorder.CopyLive(dir, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		if !errors.Is(err, recorder.ErrNoRecorder) {
			c.note("forensic: %s: the recorder could not copy its live segment: %s", dir, oneLine(err))
		}
		return "", nil
	}
	lc.Copy = f.Name()
	return f.Name(), &lc
}

// sayRead says on stderr how a flight recording was read.
func (c *cli) sayRead(set *store.Set) {
	what := count(uint64(len(set.Segments())), "segment", "segments")
	if lc := set.Live(); lc != nil {
		switch lc.From {
		case store.LiveFromRecorder:
			what += ", the live one from a copy its recorder made now"
		case store.LiveFromSnapshot:
			what += ", the live one from its snapshot of " + lc.Taken.Local().Format(time.DateTime)
		}
	}
	for _, sk := range set.Skipped() {
		if sk.Lost() {
			what += fmt.Sprintf("; segment %d is missing (%s): its records are lost", sk.Segment.Seq, sk.Path)
		} else {
			what += "; not read: " + oneLine(sk.Err) // the error names the path
		}
	}
	what += gapsText(set.Gaps())
	c.note("forensic: %s: read %s", set.Path(), what)
}

// gapsText says how many stretches retention deleted, by the index's
// reason: routine retention, or cuts into a failure's window.
func gapsText(gaps []store.Gap) string {
	var routine, cut uint64
	for _, g := range gaps {
		if g.Reason == store.GapWindowCut {
			cut++
		} else {
			routine++
		}
	}
	var out string
	if routine > 0 {
		out += "; " + count(routine, "stretch", "stretches") + " deleted by retention"
	}
	if cut > 0 {
		out += "; " + count(cut, "stretch", "stretches") + " deleted from failure windows (the windows alone exceeded --max-size)"
	}
	return out
}
