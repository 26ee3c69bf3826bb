package analyze

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

func TestPoolAllocationJudgedAgainstThePoolsLimit(t *testing.T) {
	const createSym, poolAllocSym, freeSym = 0, 1, 2
	const pool = 0x77
	base := tClock + 100*ms
	create := func(maxSize uint64) store.Event {
		return call(createSym, base, 0, cuda.Fields{Has: cuda.FieldPtr | cuda.FieldSize, Ptr: pool, Size: maxSize})
	}
	draw := func(end int64, size, ptr uint64) store.Event {
		return call(poolAllocSym, end, 0, cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr | cuda.FieldTarget, Size: size, Ptr: ptr, Target: pool})
	}
	failing := call(poolAllocSym, base+50*ms, 2, cuda.Fields{Has: cuda.FieldSize | cuda.FieldTarget, Size: 512 * mibB, Target: pool})
	cases := []struct {
		name     string
		events   []store.Event
		want     report.Capacity
		poolRows bool // the evidence shows the pool
	}{
		{"a pool at its limit refuses it, whatever the framebuffer had free",
			[]store.Event{create(gib), draw(base+10*ms, 768*mibB, 0xa0), failing}, report.CapPoolExhausted, true},
		{"a pool under its limit by what it holds leaves the framebuffer to judge",
			[]store.Event{create(gib), draw(base+10*ms, 256*mibB, 0xa0), failing}, report.CapFBHadRoom, true},
		{"memory freed back to the pool is room in it",
			[]store.Event{create(gib), draw(base+10*ms, 768*mibB, 0xa0), free(freeSym, base+20*ms, 0xa0), failing}, report.CapFBHadRoom, true},
		{"a pool with no maximum size is not a limit",
			[]store.Event{create(0), draw(base+10*ms, 768*mibB, 0xa0), failing}, report.CapFBHadRoom, false},
		{"a pool the record never saw created is not judged by a limit it does not know",
			[]store.Event{failing}, report.CapFBHadRoom, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := runSpec{symbols: []string{"cuMemPoolCreate", "cuMemAllocFromPoolAsync", "cuMemFreeAsync"}, events: tc.events,
				samples: []store.Sample{fbSample(base+40*ms, 2*gib)}}.analyze(t, nil)
			if rep.Capacity == nil || *rep.Capacity != tc.want {
				t.Fatalf("capacity %v, want %s (verdict %q)", rep.Capacity, tc.want, rep.Verdict)
			}
			var decisive []string
			pooled := false
			for _, ev := range rep.Evidence {
				if ev.Decisive {
					decisive = append(decisive, ev.Field)
				}
				pooled = pooled || strings.HasPrefix(ev.Field, "memory pool")
			}
			if pooled != tc.poolRows {
				t.Errorf("pool evidence %v, want %v", pooled, tc.poolRows)
			}
			if len(decisive) != 1 {
				t.Errorf("decisive rows %q, want exactly one", decisive)
			}
			if tc.want == report.CapPoolExhausted {
				if decisive[0] != "memory pool room at the failure" {
					t.Errorf("decisive row %q, want the pool's room", decisive[0])
				}
				if !strings.Contains(rep.Verdict, "memory pool 0x77") || !strings.Contains(rep.Verdict, "maxSize 1.00 GiB") {
					t.Errorf("verdict %q does not name the pool and its limit", rep.Verdict)
				}
			}
		})
	}
}
