package recorder

import (
	"testing"

	"github.com/retrivium/forensic/bpf"
	"github.com/retrivium/forensic/store"
)

// feed hands the handler records as the ring would, then one idle poll
// (which publishes the processes).
func feed(h *handler, recs ...[]byte) {
	for _, r := range recs {
		h.handle(r)
	}
	h.publish()
}

// Each segment of a flight recording stands alone: a stack stored in an
// earlier segment is stored again with the first call of a later one that
// references it, with the file its frames resolve to; a new segment
// begins with the inventory, the libraries and the records of the live
// processes; the counters stay cumulative, and the last batch of a
// segment is counted in its stop record.
func TestSegmentsStandAlone(t *testing.T) {
	frames := []bpf.StackFrame{{Status: bpf.StackBuildID, BuildID: [20]byte{0xab}, Value: 0x42}}
	h, q, _, _ := testHandler(t, stackMap{5: frames})
	const id = "ab00000000000000000000000000000000000000"
	h.files.add(store.File{BuildID: id, Path: "/app/train", Source: "seen"})
	q.setInventory(&store.Inventory{Library: "libnvidia-ml.so.1"})
	q.addLibrary(store.Library{Path: "/usr/lib/libcuda.so.1", Device: 1, Inode: 2})
	h.addRoot(store.Process{PID: 100})

	feed(h, allocCall(t, 100, 1<<40, 2, 5, 1000), allocCall(t, 100, 1<<40, 2, 5, 2000))
	first, st := q.takeLast(nil, 3000)
	if len(first.Stacks) != 1 || len(first.Files) != 1 || len(first.Events) != 2 || st.Events != 2 {
		t.Fatalf("first segment: %d stacks, %d files, %d events, stop counts %d; want 1, 1, 2, 2",
			len(first.Stacks), len(first.Files), len(first.Events), st.Events)
	}

	feed(h, allocCall(t, 100, 1<<40, 2, 5, 4000), allocCall(t, 100, 1<<40, 2, 5, 5000))
	second := q.take(nil, 6000)
	if got := second.Stacks[5]; len(got) != 1 || got[0].BuildID != id {
		t.Errorf("second segment: stack 5 = %+v, want it stored again", got)
	}
	if len(second.Files) != 1 || second.Files[0].Path != "/app/train" {
		t.Errorf("second segment: files %+v, want the stack's file again", second.Files)
	}
	if second.Inventory == nil || len(second.Libraries) != 1 {
		t.Errorf("second segment begins with inventory %v and %d libraries; want both", second.Inventory, len(second.Libraries))
	}
	if len(second.Processes) != 1 || second.Processes[0].PID != 100 {
		t.Errorf("second segment: processes %+v, want the live one again", second.Processes)
	}
	if q.statsNow().Events != 4 {
		t.Errorf("counters %d events, want 4 over both segments", q.statsNow().Events)
	}
}

// In flight mode a process is forgotten once its exit is published, and a
// later process with its pid starts afresh: the reader's memory follows
// the processes alive, not all that ever ran.
func TestHandlerForgetsExitedProcesses(t *testing.T) {
	h, q, _, _ := testHandler(t, nil)
	h.evict = true
	for pid := uint32(200); pid < 300; pid++ {
		feed(h, procRecord(bpf.ProcFirstCall, pid, 1, 1000, 0), allocCall(t, pid, 4096, 0, -1, 1100),
			procRecord(bpf.ProcExit, pid, 1, 1200, 0))
	}
	feed(h, procRecord(bpf.ProcFirstCall, 999, 1, 1300, 0))
	h.publish()
	b := q.take(nil, 0)
	exits := 0
	for _, p := range b.Processes {
		if p.Exit != nil {
			exits++
		}
	}
	if exits != 100 {
		t.Errorf("%d exits published, want 100", exits)
	}
	if n := len(h.procs); n != 1 || h.tracked.Load() != 1 {
		t.Errorf("%d processes known after 100 exited (tracked %d), want the live one", n, h.tracked.Load())
	}
}

// Delays are summarized in bounded memory: exact while few, the count and
// maximum exact and the median close when there are many more.
func TestDelaySample(t *testing.T) {
	for _, n := range []int{1, 5, maxDelaySample, 50 * maxDelaySample} {
		var d delaySample
		for i := 1; i <= n; i++ {
			d.add(int64(i))
		}
		st := d.stats()
		lo, hi := int64(n/2), int64(n/2+1)
		if n > maxDelaySample {
			lo, hi = int64(n)*45/100, int64(n)*55/100
		}
		if st.Count != n || st.Max != int64(n) || st.Median < lo || st.Median > hi || len(d.keep) > maxDelaySample {
			t.Errorf("%d delays: %+v (kept %d), want count %d, max %d, median in [%d, %d]", n, st, len(d.keep), n, n, lo, hi)
		}
	}
}

// In flight mode every batch carries the counters as of it, so the count a
// segment (or a copy of the live one) stores matches the events committed
// with it and before it, however long ago the loss counters were read.
func TestBatchesCarryTheirCounts(t *testing.T) {
	h, q, _, _ := testHandler(t, nil)
	h.addRoot(store.Process{PID: 100})
	var committed uint64
	for i, n := range []int{3, 0, 5, 1} {
		for k := 0; k < n; k++ {
			feed(h, allocCall(t, 100, 4096, 0, -1, uint64(1000*(i+1)+k)))
		}
		var b store.Batch
		if i == 2 {
			var st store.Stats
			b, st = q.takeLast(nil, int64(1000*(i+1)+999))
			if st.Events != committed+uint64(n) {
				t.Errorf("takeLast: stop counts %d, want %d", st.Events, committed+uint64(n))
			}
		} else {
			b = q.takeCounted(nil, int64(1000*(i+1)+999))
		}
		committed += uint64(len(b.Events))
		if b.Counts == nil || b.Counts.Events != committed {
			t.Errorf("batch %d: counts %+v, want %d events (those of this batch and before)", i, b.Counts, committed)
		}
		q.giveBack(b)
	}
	if b := q.take(nil, 9999); b.Counts != nil {
		t.Errorf("an ordinary recording's batch carries counts %+v", b.Counts)
	}
}
