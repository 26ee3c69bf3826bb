package analyze

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// headroomOf returns the report's headroom entry of GPU 0's view, or nil.
func headroomOf(rep *report.Report, view string) *report.Headroom {
	for i := range rep.Headroom {
		if h := &rep.Headroom[i]; h.GPU == 0 && h.View == view {
			return h
		}
	}
	return nil
}

// analyzeWith writes and analyzes the spec with options.
func (sp runSpec) analyzeWith(t *testing.T, o Options) *report.Report {
	t.Helper()
	r, err := store.Open(sp.write(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rep, err := Analyze(r, o)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// onDevice moves a call to another CUDA device of its process.
func onDevice(e store.Event, dev int32) store.Event {
	e.Dev = dev
	return e
}

func TestHeadroomLeastFreeBetweenSamples(t *testing.T) {
	const allocSym, freeSym = 0, 1
	base := tClock + 100*ms
	// A 15 GiB burst between two samples that read 1 GiB used: neither
	// sample saw it, the traced calls did.
	burst := []store.Event{alloc(allocSym, base+50*ms, 15*gib, 0xa000), free(freeSym, base+60*ms, 0xa000)}
	cases := []struct {
		name      string
		events    []store.Event
		samples   []store.Sample
		wantFree  uint64
		wantExact bool
		wantSrc   string
		wantAt    int64
		wantCall  string // symbol of the call named, "" for none
		wantNote  string // a word the note must hold when not exact
	}{
		{
			name:     "a burst between agreeing samples is exact",
			events:   burst,
			samples:  []store.Sample{fbSample(base, gib), fbSample(base+100*ms, gib)},
			wantFree: 0, wantExact: true, wantSrc: "sample and traced calls", wantAt: base + 50*ms, wantCall: "cuMemAlloc_v2",
		},
		{
			name: "a neighbour that grew between the samples makes it a bound on the side that leaves least free",
			// The second sample reads 1 GiB more used than the traced calls explain.
			events:   []store.Event{alloc(allocSym, base+50*ms, 10*gib, 0xa000), free(freeSym, base+60*ms, 0xa000)},
			samples:  []store.Sample{fbSample(base, gib), fbSample(base+100*ms, 2*gib)},
			wantFree: 16*gib - 2*gib - 10*gib, wantExact: false, wantSrc: "sample and traced calls", wantAt: base + 50*ms,
			wantCall: "cuMemAlloc_v2", wantNote: "grew by 1.00 GiB",
		},
		{
			name:    "memory held across a sample is read by it",
			events:  []store.Event{alloc(allocSym, base+50*ms, 12*gib, 0xa000), free(freeSym, base+150*ms, 0xa000)},
			samples: []store.Sample{fbSample(base, gib), fbSample(base+100*ms, 13*gib), fbSample(base+200*ms, gib)},
			// The traced peak and the sample agree: the reading comes first.
			wantFree: 3 * gib, wantExact: true, wantSrc: "sample and traced calls", wantAt: base + 50*ms, wantCall: "cuMemAlloc_v2",
		},
		{
			name: "a reading of the same figure makes a bound exact",
			events: []store.Event{free(freeSym, base+20*ms, 0xdead), alloc(allocSym, base+50*ms, 12*gib, 0xa000),
				free(freeSym, base+150*ms, 0xa000)},
			samples:  []store.Sample{fbSample(base, gib), fbSample(base+100*ms, 13*gib), fbSample(base+200*ms, gib)},
			wantFree: 3 * gib, wantExact: true, wantSrc: "sample", wantAt: base + 100*ms, wantCall: "cuMemAlloc_v2",
		},
		{
			name:     "no traced call: the lowest reading",
			samples:  []store.Sample{fbSample(base, gib), fbSample(base+100*ms, 9*gib), fbSample(base+200*ms, 2*gib)},
			wantFree: 7 * gib, wantExact: true, wantSrc: "sample", wantAt: base + 100*ms,
		},
		{
			name:     "a burst after the last sample is a bound",
			events:   []store.Event{alloc(allocSym, base+150*ms, 14*gib, 0xa000)},
			samples:  []store.Sample{fbSample(base, gib), fbSample(base+100*ms, gib)},
			wantFree: gib, wantExact: false, wantSrc: "sample and traced calls", wantAt: base + 150*ms,
			wantCall: "cuMemAlloc_v2", wantNote: "no sample was taken after it",
		},
		{
			name: "a release of unknown size between the samples makes it a bound",
			events: append([]store.Event{free(freeSym, base+20*ms, 0xdead)},
				alloc(allocSym, base+50*ms, 15*gib, 0xa000), free(freeSym, base+60*ms, 0xa000)),
			samples:  []store.Sample{fbSample(base, gib), fbSample(base+100*ms, gib)},
			wantFree: 0, wantExact: false, wantSrc: "sample and traced calls", wantAt: base + 50*ms,
			wantCall: "cuMemAlloc_v2", wantNote: "unknown size",
		},
		{
			name: "device memory on a GPU the record does not name makes it a bound",
			events: append([]store.Event{onDevice(alloc(allocSym, base+20*ms, mibB, 0xb000), 5)},
				alloc(allocSym, base+50*ms, 15*gib, 0xa000), free(freeSym, base+60*ms, 0xa000)),
			samples:  []store.Sample{fbSample(base, gib), fbSample(base+100*ms, gib)},
			wantFree: 0, wantExact: false, wantSrc: "sample and traced calls", wantAt: base + 50*ms,
			wantCall: "cuMemAlloc_v2", wantNote: "does not name",
		},
		{
			name: "a release of unknown size after the peak, with agreeing samples, leaves it exact",
			events: []store.Event{alloc(allocSym, base+50*ms, 15*gib, 0xa000), free(freeSym, base+60*ms, 0xa000),
				free(freeSym, base+70*ms, 0xdead)},
			samples:  []store.Sample{fbSample(base, gib), fbSample(base+100*ms, gib)},
			wantFree: 0, wantExact: true, wantSrc: "sample and traced calls", wantAt: base + 50*ms, wantCall: "cuMemAlloc_v2",
		},
		{
			name:     "a traced call that overlaps a sample's query makes it a bound",
			events:   []store.Event{alloc(allocSym, base+500, 14*gib, 0xa000), free(freeSym, base+60*ms, 0xa000)},
			samples:  []store.Sample{fbSample(base, gib), fbSample(base+100*ms, gib)},
			wantFree: gib, wantExact: false, wantSrc: "sample and traced calls", wantAt: base + 500,
			wantCall: "cuMemAlloc_v2", wantNote: "overlapped",
		},
		{
			// The middle sample's query straddles the allocation and reads
			// it: only with it does the reading agree with the one before.
			name: "a sample that overlapped a call and read it is exact",
			events: []store.Event{alloc(allocSym, base+100*ms+500, 14*gib, 0xa000),
				free(freeSym, base+150*ms, 0xa000)},
			samples:  []store.Sample{fbSample(base, gib), fbSample(base+100*ms, 15*gib), fbSample(base+200*ms, gib)},
			wantFree: gib, wantExact: true, wantSrc: "sample and traced calls", wantAt: base + 100*ms + 500,
			wantCall: "cuMemAlloc_v2",
		},
		{
			// A neighbour's 1 GiB makes neither reading agree: the bound
			// stays on the side that leaves least free.
			name: "a sample that overlapped a call and agrees with neither reading stays a bound",
			events: []store.Event{alloc(allocSym, base+100*ms+500, 12*gib, 0xa000),
				free(freeSym, base+150*ms, 0xa000)},
			samples:  []store.Sample{fbSample(base, gib), fbSample(base+100*ms, 14*gib), fbSample(base+200*ms, gib)},
			wantFree: 0, wantExact: false, wantSrc: "sample and traced calls", wantAt: base + 100*ms + 500,
			wantCall: "cuMemAlloc_v2", wantNote: "overlapped",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := runSpec{symbols: []string{"cuMemAlloc_v2", "cuMemFree_v2"}, events: tc.events, samples: tc.samples}.analyze(t, nil)
			h := headroomOf(rep, "framebuffer")
			if h == nil {
				t.Fatalf("no framebuffer headroom in %+v", rep.Headroom)
			}
			if h.LeastFree != tc.wantFree || h.Exact != tc.wantExact || h.Source != tc.wantSrc || h.AtNS != tc.wantAt {
				t.Errorf("least free %d exact %v source %q at %d, want %d %v %q %d (note %q)",
					h.LeastFree, h.Exact, h.Source, h.AtNS, tc.wantFree, tc.wantExact, tc.wantSrc, tc.wantAt, h.Note)
			}
			if h.Total != 16*gib {
				t.Errorf("total %d, want 16 GiB", h.Total)
			}
			call := ""
			if h.Call != nil {
				call = h.Call.Symbol
			}
			if call != tc.wantCall {
				t.Errorf("call %q, want %q", call, tc.wantCall)
			}
			if !tc.wantExact && !strings.Contains(h.Note, tc.wantNote) {
				t.Errorf("note %q does not say %q", h.Note, tc.wantNote)
			}
		})
	}
}

func TestHeadroomNearMiss(t *testing.T) {
	const allocSym, freeSym = 0, 1
	base := tClock + 100*ms
	samples := []store.Sample{fbSample(base, gib), fbSample(base+100*ms, gib)}
	// Least free after a burst of size: 15 GiB - size of 16 GiB.
	burst := func(size uint64) []store.Event {
		return []store.Event{alloc(allocSym, base+50*ms, size, 0xa000), free(freeSym, base+60*ms, 0xa000)}
	}
	failed := call(allocSym, base+70*ms, 2, cuda.Fields{Has: cuda.FieldSize, Size: 20 * gib})
	cases := []struct {
		name    string
		events  []store.Event
		percent float64
		want    bool
	}{
		{"under 5% free is a near miss", burst(15*gib - 512*mibB), 0, true},
		{"6% free is not", burst(15*gib - 983*mibB), 0, false},
		{"6% free is under a threshold of 10%", burst(15*gib - 983*mibB), 10, true},
		{"a run that failed is no near miss", append(burst(15*gib-512*mibB), failed), 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := runSpec{symbols: []string{"cuMemAlloc_v2", "cuMemFree_v2"}, events: tc.events, samples: samples}.
				analyzeWith(t, Options{NearMissPercent: tc.percent})
			if rep.NearMiss != tc.want {
				t.Fatalf("near miss %v, want %v (headroom %+v)", rep.NearMiss, tc.want, rep.Headroom)
			}
			if tc.want != strings.Contains(rep.Verdict, "Near miss") {
				t.Errorf("verdict %q: the near miss is said if and only if it is one", rep.Verdict)
			}
		})
	}
}
