package analyze

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

const (
	sec    = int64(1_000_000_000)
	wall0  = int64(1_764_000_000) * sec
	clock0 = 1000 * sec
)

// segment is one segment of a synthetic flight recording: seq, the calls it
// holds (a failure at fail, seconds after clock0, when fail > 0), the
// counters its last commit stores (nil: none) and its last counter reading.
type segment struct {
	seq       uint64
	calls     int
	fail      float64
	counts    *store.Stats
	drops     uint64
	stop      string
	stopCount uint64
}

// writeFlight writes the segments into dir and returns their paths and
// what an index would say of each.
func writeFlight(t *testing.T, dir string, segs []segment) ([]string, []store.SegmentInfo) {
	t.Helper()
	var paths []string
	var infos []store.SegmentInfo
	for _, sg := range segs {
		from := clock0 + int64(sg.seq)*10*sec
		path := filepath.Join(dir, fmt.Sprintf("%08d.db", sg.seq))
		run := store.RunInfo{ID: "rec", Version: "test", Clock: store.ClockName, ClockStart: clock0, WallStart: time.Unix(0, wall0).UTC(),
			Hostname: "node", Mode: "spawn", Command: []string{"train"}, Interval: 100 * time.Millisecond}
		w, err := store.Create(path, store.CreateOptions{}, run, []string{"cuMemAlloc_v2"})
		if err != nil {
			t.Fatal(err)
		}
		w.Reserve = 0
		if err := w.SetFlight(store.FlightInfo{Seq: sg.seq, Start: from}); err != nil {
			t.Fatal(err)
		}
		b := store.Batch{Processes: []store.Process{{PID: 7, Start: clock0, Comm: "train", Root: true}}, Counts: sg.counts,
			Drops: []store.Drops{{Time: from, Stats: store.Stats{Events: sg.drops}}}}
		var failures uint64
		for k := 0; k < sg.calls; k++ {
			end := from + int64(k+1)*sec/100
			e := store.Event{Symbol: 0, PID: 7, TID: 7, Start: end - 1000, End: end, Stack: -1, Fields: cuda.Fields{Has: cuda.FieldSize, Size: 1 << 20}}
			if k == sg.calls-1 && sg.fail > 0 {
				e.End, e.Start, e.Result = clock0+int64(sg.fail*float64(sec)), clock0+int64(sg.fail*float64(sec))-1000, 2
				failures++
			}
			b.Events = append(b.Events, e)
		}
		if err := w.Commit(&b); err != nil {
			t.Fatal(err)
		}
		if sg.stop != "" {
			if err := w.Stop(store.StopInfo{Time: from + 10*sec, Reason: sg.stop, Stats: store.Stats{Events: sg.stopCount}}); err != nil {
				t.Fatal(err)
			}
		}
		w.Close()
		paths = append(paths, path)
		infos = append(infos, store.SegmentInfo{Seq: sg.seq, From: from, To: from + 10*sec, Calls: uint64(sg.calls), Failures: failures})
	}
	return paths, infos
}

func analyzeSet(t *testing.T, paths []string, infos []store.SegmentInfo) *report.Report {
	t.Helper()
	set, err := store.OpenSet(paths, store.SetOptions{Path: filepath.Dir(paths[0]), Segments: infos})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	rep, err := Analyze(set, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// A closed segment whose file is gone is a gap in the recording: its
// records are lost. The last one takes the recording's end with it, which
// is not a recorder that failed to stop; its path is named once, and the
// advice is to restore it, not to snapshot a live segment. One before the
// failure, holding a failure of its own, leaves the first unestablished.
func TestFlightLostSegment(t *testing.T) {
	stats := func(n uint64) *store.Stats { return &store.Stats{Events: n} }
	segs := []segment{
		{seq: 1, calls: 10, fail: 10.05, counts: stats(10), drops: 10, stop: store.StopRotated, stopCount: 10},
		{seq: 2, calls: 10, fail: 25, counts: stats(20), drops: 20, stop: store.StopRotated, stopCount: 20},
		{seq: 3, calls: 10, counts: stats(30), drops: 30, stop: "signal", stopCount: 30},
	}
	tests := []struct {
		name     string
		lose     int
		ended    string
		decisive bool
		has      string
	}{
		{"the last", 2, "clean", false, "segment 3 is missing: its records are lost"},
		{"one before the failure", 0, "clean", true, "segment 1 is missing: its records are lost"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			paths, infos := writeFlight(t, t.TempDir(), segs)
			os.Remove(paths[tt.lose])
			rep := analyzeSet(t, paths, infos)
			if rep.Run.Ended != tt.ended {
				t.Errorf("ended %q, want %q", rep.Run.Ended, tt.ended)
			}
			var found *report.Missing
			for i, m := range rep.Missing {
				for _, bad := range []string{"did not stop cleanly", "ended abruptly", "take a snapshot of the live segment"} {
					if strings.Contains(m.What+m.Fix, bad) {
						t.Errorf("missing evidence says %q: %s / %s", bad, m.What, m.Fix)
					}
				}
				if strings.Count(m.What, filepath.Base(paths[tt.lose])) > 1 {
					t.Errorf("the path is doubled: %s", m.What)
				}
				if strings.Contains(m.What, tt.has) {
					found = &rep.Missing[i]
				}
			}
			if found == nil || found.Decisive != tt.decisive || !strings.Contains(found.Fix, "restore") {
				t.Fatalf("missing evidence %+v lacks %q (decisive %v, advice to restore it)", rep.Missing, tt.has, tt.decisive)
			}
			if tt.decisive != (rep.Attribution == report.AttrMissingEvidence) {
				t.Errorf("attribution %s: a lost segment with a failure before the first found decides it", rep.Attribution)
			}
			fr := rep.Run.Flight
			if fr == nil || len(fr.SegmentsLost) != 1 || fr.SegmentsLost[0] != infos[tt.lose].Seq || fr.LostCalls != 10 {
				t.Errorf("flight read %+v, want segment %d lost with 10 calls", fr, infos[tt.lose].Seq)
			}
			for _, n := range fr.NotRead {
				if strings.Count(n, filepath.Base(paths[tt.lose])) != 1 {
					t.Errorf("not read: %q names the path %d times", n, strings.Count(n, filepath.Base(paths[tt.lose])))
				}
			}
			for _, m := range rep.Missing {
				if strings.Contains(m.What, "are in no file read") {
					t.Errorf("the lost segment is counted again as unaccounted events: %s", m.What)
				}
			}
		})
	}
}

// The recorder's count is the one its last commit stored with the data:
// a counter reading taken before later commits runs behind them and must
// neither exceed nor hide what was read. A count above what the files hold
// is missing evidence.
func TestFlightRecordedCount(t *testing.T) {
	stats := func(n uint64) *store.Stats { return &store.Stats{Events: n} }
	tests := []struct {
		name       string
		last       segment
		recorded   uint64
		unaccounts bool
	}{
		{"the commit's count, not the stale reading", segment{seq: 2, calls: 10, counts: stats(20), drops: 12}, 20, false},
		{"a file from before commits stored counts: the last reading", segment{seq: 2, calls: 10, drops: 12}, 12, false},
		{"the count exceeds what the files hold", segment{seq: 2, calls: 10, counts: stats(25), drops: 12}, 25, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first := segment{seq: 1, calls: 10, counts: stats(10), drops: 10, stop: store.StopRotated, stopCount: 10}
			paths, infos := writeFlight(t, t.TempDir(), []segment{first, tt.last})
			rep := analyzeSet(t, paths, infos)
			fr := rep.Run.Flight
			if fr == nil || fr.EventsRead != 20 || fr.EventsRecorded != tt.recorded {
				t.Fatalf("flight read %+v, want 20 read and %d recorded", fr, tt.recorded)
			}
			got := false
			for _, m := range rep.Missing {
				got = got || strings.Contains(m.What, "are in no file read")
			}
			if got != tt.unaccounts {
				t.Errorf("unaccounted events reported %v, want %v: %+v", got, tt.unaccounts, rep.Missing)
			}
		})
	}
}

// What is live at the first failure is counted by kind, so a report can
// name a mapping a mapping; and the verdict on a recovered failure before
// a bad exit reads as English: it says who ended and how, and leaves why
// the record cannot tell, and the frameworks to check, to MISSING EVIDENCE.
func TestLiveKindsAndRecoveredWording(t *testing.T) {
	fail := tClock + 300*ms
	evs := []store.Event{
		alloc(0, tClock+100*ms, gib, 0xa000), alloc(0, tClock+150*ms, gib, 0xb000),
		call(0, fail, 2, cuda.Fields{Has: cuda.FieldSize, Size: 10 * gib}),
		alloc(0, fail+20*ms, 10*gib, 0xc000),
	}
	x := exitAt(fail+100*ms, 1)
	procs := []store.Process{{PID: 7, Start: tClock, Exe: "/bin/app", Root: true, Exit: x,
		Devices: []store.DeviceMap{{Ordinal: 0, GPU: 0, Method: "uuid"}}}}
	rep := runSpec{symbols: allocFreeSyms, events: evs, procs: procs, workload: x}.analyze(t, nil)
	if len(rep.LiveAtFailure) != 1 {
		t.Fatalf("live %+v", rep.LiveAtFailure)
	}
	l := rep.LiveAtFailure[0]
	if len(l.Kinds) != 1 || l.Kinds[0] != (report.KindCount{Kind: "device-pointer", Count: 2}) {
		t.Errorf("kinds %+v, want 2 device-pointer", l.Kinds)
	}
	if !strings.Contains(rep.Verdict, "yet process 7 (app) exited with status 1: what ended it is not in the record.") ||
		strings.Contains(rep.Verdict, "JAX") {
		t.Errorf("verdict %q", rep.Verdict)
	}
	if m := rep.Missing[len(rep.Missing)-1]; !strings.Contains(m.What, "after it recovered from each of its failed calls") ||
		!strings.Contains(m.What, "JAX") {
		t.Errorf("missing %+v", rep.Missing)
	}
}
