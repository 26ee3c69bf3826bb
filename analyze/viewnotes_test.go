package analyze

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/store"
)

// When no sample was taken while the traced processes held their most
// device memory, the sampled "framebuffer used" never shows it: a note
// says so (and when the samples were taken), so that a table reading 0
// next to "the framebuffer was exhausted" does not read as a
// contradiction. A sample that caught the peak needs no note.
func TestPeakNotSampledNote(t *testing.T) {
	events := []store.Event{
		alloc(0, tClock+100*ms, 8*gib, 0x1000),
		alloc(0, tClock+110*ms, 7*gib, 0x2000),
		call(0, tClock+120*ms, 2, cuda.Fields{Has: cuda.FieldSize, Size: gib}),
		free(1, tClock+130*ms, 0x2000),
		free(1, tClock+131*ms, 0x1000),
	}
	tests := []struct {
		name    string
		samples []store.Sample
		want    []string // "" entries: no note
	}{
		{"samples before and after the peak", []store.Sample{fbSample(tClock+50*ms, 0), fbSample(tClock+150*ms, 0)},
			[]string{"GPU 0: no sample was taken", "at its peak (15.00 GiB, from +0.110 s to +0.130 s)", "(at most 0 B in any sample)",
				"at +0.050 s, before the peak, and at +0.150 s, after it"}},
		{"only a sample after it", []store.Sample{fbSample(tClock+150*ms, 0)},
			[]string{"The nearest sample was taken at +0.150 s, after it."}},
		{"a sample during the peak", []store.Sample{fbSample(tClock+50*ms, 0), fbSample(tClock+115*ms, 15*gib), fbSample(tClock+150*ms, 0)},
			nil},
		{"a sample during a lower value", []store.Sample{fbSample(tClock+105*ms, 8*gib), fbSample(tClock+150*ms, 0)},
			[]string{"(at most 8.00 GiB in any sample)", "at +0.105 s, before the peak"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := runSpec{symbols: []string{"cuMemAlloc_v2", "cuMemFree_v2"}, events: events, samples: tt.samples}.analyze(t, nil)
			notes := strings.Join(rep.MemoryViewNotes, "\n")
			if tt.want == nil {
				if len(rep.MemoryViewNotes) != 0 {
					t.Errorf("notes %q, want none", notes)
				}
				return
			}
			if len(rep.MemoryViewNotes) != 1 {
				t.Fatalf("notes %q, want one", notes)
			}
			for _, w := range tt.want {
				if !strings.Contains(notes, w) {
					t.Errorf("note lacks %q: %s", w, notes)
				}
			}
		})
	}
}

// The peak stretches of a field: from the time it reaches its peak to the
// time it drops below it, each return to the peak a new stretch.
func TestPeakSpans(t *testing.T) {
	lm := &landmarks{first: -1, phases: newPhaseSet(nil, -1)}
	var a fieldAcc
	for _, o := range []struct {
		v uint64
		t int64
	}{{1, 10}, {5, 20}, {5, 25}, {3, 30}, {5, 40}, {2, 50}, {5, 60}} {
		a.observe(o.v, o.t, lm)
	}
	want := []span{{20, 30}, {40, 50}, {60, -1}}
	if len(a.peakSpans) != len(want) {
		t.Fatalf("spans %v, want %v", a.peakSpans, want)
	}
	for i := range want {
		if a.peakSpans[i] != want[i] {
			t.Errorf("span %d = %v, want %v", i, a.peakSpans[i], want[i])
		}
	}
	a.observe(9, 70, lm) // a new peak starts over
	if len(a.peakSpans) != 1 || a.peakSpans[0] != (span{70, -1}) {
		t.Errorf("after a new peak: %v", a.peakSpans)
	}
}
