package e2e

import (
	"strconv"
	"testing"

	"github.com/retrivium/forensic/report"
)

// TestBudgetShowsAMemoryPoolInUse: a job draws 3 GiB from a stream-ordered
// pool created with a 4 GiB maxSize, allocates 8 GiB outside it, and then
// runs out of framebuffer. The budget at the failure has the pool as a
// part of its own (its handle, its maxSize, the 3 GiB in use), the job's
// other traced allocations apart, and still adds up to the GPU's total.
func TestBudgetShowsAMemoryPoolInUse(t *testing.T) {
	w := newWorld(t, "SIMGPU_CTX_MEM=0")
	res := w.record(nil, simwork, "init; use 0; pool-create 4G; alloc-pool 3G; alloc 8G; sleep 200; alloc 8G; sleep 300")
	_, events, _ := stored(t, res.db)
	var handle uint64
	for _, e := range events {
		if e.Name == "cuMemPoolCreate" && e.Result == 0 {
			handle = e.Ptr
		}
	}
	if handle == 0 {
		t.Fatal("no cuMemPoolCreate recorded")
	}
	rep, _ := analyzeJSON(t, res.db)
	if rep.Capacity == nil || *rep.Capacity != report.CapFBExhausted || len(failureBudgets(rep)) != 1 {
		t.Fatalf("capacity %v, budgets %d: want an exhausted framebuffer and its budget", rep.Capacity, len(failureBudgets(rep)))
	}
	b := failureBudgets(rep)[0]
	job := rep.FirstFailure.PID
	var sum uint64
	got := map[string]uint64{}
	for _, p := range b.Parts {
		sum += p.Bytes
		if p.PID == nil || *p.PID != job {
			continue
		}
		got[p.Kind] += p.Bytes
		if p.Kind == "pool" {
			if want := "0x" + strconv.FormatUint(handle, 16); p.Pool != want || p.PoolMax == nil || *p.PoolMax != 4<<30 {
				t.Errorf("pool part %+v: want pool %s with maxSize 4 GiB", p, want)
			}
		}
	}
	if got["pool"] != 3<<30 || got["traced"] != 8<<30 {
		t.Errorf("the job's parts %v: want 3 GiB in the pool, 8 GiB traced outside it", got)
	}
	if sum != b.Total {
		t.Errorf("parts add up to %d, total %d", sum, b.Total)
	}
}
