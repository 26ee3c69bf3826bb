package e2e

import (
	"reflect"
	"testing"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/store"
)

// accessEvent returns the one cuMemSetAccess event of a run, and whether
// the failures index holds it too.
func accessEvent(t *testing.T, db string) (store.Event, bool) {
	t.Helper()
	_, evs, _ := stored(t, db)
	var found []store.Event
	for _, e := range evs {
		if e.Name == "cuMemSetAccess" {
			found = append(found, e)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d cuMemSetAccess events stored, want 1", len(found))
	}
	r, err := store.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	indexed := false
	r.Failures(func(e *store.Event) error {
		if e.Name == "cuMemSetAccess" && reflect.DeepEqual(e.Grants, found[0].Grants) {
			indexed = true
		}
		return nil
	})
	return found[0], indexed
}

// How NCCL's cuMem buffers and PyTorch's expandable segments grant access:
// one cuMemSetAccess with the owner (GPU 0) first, then the peer (GPU 1).
// With BAR1 nearly full the peer's mapping fails (205), and the stored
// event carries both grants: the peer is no longer hidden behind the
// owner's descriptor.
func TestAccessGrantsOwnerThenPeer(t *testing.T) {
	w := newWorld(t, "SIMGPU_DEVICES=2", "SIMGPU_BAR1_TOTAL=64M", "SIMGPU_BAR1_USED=40M")
	res := w.record(nil, simwork, "init; use 0; vmm 32M 0 1")
	if res.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", res.code, res.stderr)
	}
	w.checkComplete(res.db)
	e, indexed := accessEvent(t, res.db)
	if e.Result != 205 {
		t.Fatalf("cuMemSetAccess result %d, want 205 (CUDA_ERROR_MAP_FAILED); stderr:\n%s", e.Result, res.stderr)
	}
	rw := uint32(3) // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
	want := []cuda.Grant{{Type: cuda.LocationDevice, Device: 0, Flags: rw}, {Type: cuda.LocationDevice, Device: 1, Flags: rw}}
	if e.Has&cuda.FieldItems == 0 || e.Items != 2 || !reflect.DeepEqual(e.Grants, want) {
		t.Fatalf("stored %d items (has %v), grants %+v; want %+v", e.Items, e.Has&cuda.FieldItems != 0, e.Grants, want)
	}
	if e.Has&cuda.FieldCount == 0 || e.Count != 2 || e.Size != 32<<20 {
		t.Errorf("count %d, size %d; want 2 descriptors over 32 MiB", e.Count, e.Size)
	}
	if e.Flags&(store.EventArrayCut|store.EventArrayFault) != 0 {
		t.Errorf("flags %#x: the two descriptors were neither cut nor unreadable", e.Flags)
	}
	if !indexed {
		t.Error("the failures index lacks the grants")
	}
}

// More descriptors than the probes keep: the first eight are stored, the
// cut is flagged, and Count keeps how many the caller passed.
func TestAccessGrantsCut(t *testing.T) {
	w := newWorld(t, "SIMGPU_DEVICES=2")
	res := w.record(nil, simwork, "init; use 0; vmm 2M 0 1 1 1 1 1 1 1 1 1")
	if res.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", res.code, res.stderr)
	}
	w.checkComplete(res.db)
	e, _ := accessEvent(t, res.db)
	if e.Result != 0 || e.Count != 10 || e.Items != 8 || len(e.Grants) != 8 {
		t.Fatalf("result %d, count %d, %d items, %d grants; want 0, 10, 8, 8", e.Result, e.Count, e.Items, len(e.Grants))
	}
	if e.Flags&store.EventArrayCut == 0 {
		t.Errorf("flags %#x lack the array-cut flag", e.Flags)
	}
	if e.Grants[0].Device != 0 || e.Grants[7].Device != 1 {
		t.Errorf("grants %+v: owner first, then the peer", e.Grants)
	}
}

// The other array arguments are read with the same capture: an empty
// list reads nothing and says so (zero items, no fault).
func TestOtherArraysCounted(t *testing.T) {
	w := newWorld(t)
	res := w.record(nil, simwork, "init; use 0; map-array; map-array-ptsz; gfx; gfx-ptsz")
	w.checkComplete(res.db)
	_, evs, _ := stored(t, res.db)
	seen := map[string]bool{}
	for _, e := range evs {
		if s, _, _ := cuda.Lookup(e.Name); s == nil || s.Array.Len == 0 {
			continue
		}
		seen[e.Name] = true
		if e.Has&cuda.FieldItems == 0 || e.Items != 0 || e.Flags&(store.EventArrayCut|store.EventArrayFault) != 0 {
			t.Errorf("%s: %d items (has %v), flags %#x; want 0 items read, no fault", e.Name, e.Items, e.Has&cuda.FieldItems != 0, e.Flags)
		}
	}
	for _, name := range []string{"cuMemMapArrayAsync", "cuMemMapArrayAsync_ptsz", "cuGraphicsMapResources", "cuGraphicsMapResources_ptsz"} {
		if !seen[name] {
			t.Errorf("no %s event", name)
		}
	}
}
