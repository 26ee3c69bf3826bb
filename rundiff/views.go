package rundiff

import (
	"fmt"
	"time"

	"github.com/retrivium/forensic/report"
)

// rowKey names one memory-view row across runs.
type rowKey struct {
	gpu   int
	field string
}

// deviceRows indexes a report's whole-GPU sampled rows and traced rows
// (MIG instances and processes apart), and lists their keys in the
// report's order, so that differences come out in the same order every
// time.
func deviceRows(rep *report.Report) (map[rowKey]*report.ViewRow, []rowKey) {
	out := map[rowKey]*report.ViewRow{}
	var keys []rowKey
	for i := range rep.MemoryViews {
		r := &rep.MemoryViews[i]
		if r.PID != 0 || r.MIGIndex != nil {
			continue
		}
		k := rowKey{r.GPU, r.Field}
		if out[k] == nil {
			keys = append(keys, k)
		}
		out[k] = r
	}
	return out, keys
}

// viewMeasure is one value compared per GPU and view.
type viewMeasure struct {
	kind, field, view string
	// value reads the row's value; lower says less is worse.
	value func(*report.ViewRow) *uint64
	lower bool
	exact bool
	what  string
}

// viewMeasures: the least free NVML sampled and the traced peak, per view.
func viewMeasures() []viewMeasure {
	low := func(r *report.ViewRow) *uint64 { return r.Low }
	peak := func(r *report.ViewRow) *uint64 { return r.Peak }
	return []viewMeasure{
		{report.DiffLeastFree, "framebuffer free", "framebuffer", low, true, false, "least free framebuffer (NVML samples)"},
		{report.DiffLeastFree, "BAR1 free", "bar1", low, true, false, "least free BAR1 (NVML samples)"},
		{report.DiffTracedPeak, "traced device allocations", "framebuffer", peak, false, true, "peak of traced device allocations"},
		{report.DiffTracedPeak, "traced aperture mappings", "bar1", peak, false, true, "peak of traced BAR1 mappings"},
	}
}

// viewDiffs compares the least free and the traced peak per GPU and view.
func viewDiffs(bad, good *report.Report) []cand {
	br, keys := deviceRows(bad)
	gr, _ := deviceRows(good)
	var out []cand
	for _, m := range viewMeasures() {
		for _, k := range keys {
			b, g := br[k], gr[k]
			if k.field != m.field || g == nil || m.value(b) == nil || m.value(g) == nil {
				continue
			}
			bv, gv := *m.value(b), *m.value(g)
			worse, by := bv > gv, bv-gv
			if m.lower {
				worse, by = bv < gv, gv-bv
			}
			if !worse || by < minBytes {
				continue
			}
			gpu := k.gpu
			dd := report.Difference{Kind: m.kind, GPU: &gpu, View: m.view, Bytes: by, Good: i64(gv), Failing: i64(bv), Exact: m.exact,
				Summary: fmt.Sprintf("%s on GPU %d: %s in the failing run, %s in the good run", m.what, gpu,
					report.HumanBytes(bv), report.HumanBytes(gv))}
			out = append(out, cand{key: fmt.Sprintf("%s\x00%d\x00%s", m.kind, gpu, m.view), d: dd})
		}
	}
	return out
}

func i64(v uint64) *int64 { x := int64(v); return &x }

// phaseDiffs compares, phase by phase (aligned by marker label), how much
// the traced memory grew and how long the phase took. Phases cut at the
// run's own landmarks (no markers) do not align between runs.
func phaseDiffs(bad, good *report.Report, d *report.Diff) []cand {
	if bad.PhasesFrom != "markers" || good.PhasesFrom != "markers" {
		d.Notes = append(d.Notes, "phases are compared only between runs with markers (forensic mark): a run without them has none to align")
		return nil
	}
	var out []cand
	br, keys := deviceRows(bad)
	gr, _ := deviceRows(good)
	for _, k := range keys {
		b, g := br[k], gr[k]
		if g == nil || (k.field != "traced device allocations" && k.field != "traced aperture mappings") {
			continue
		}
		out = append(out, growthDiffs(k, b, g)...)
	}
	out = append(out, durationDiffs(bad.Phases, good.Phases)...)
	return out
}

// growth is how much a traced row grew in each phase: its peak in the
// phase minus what was live when the phase began (the previous phase's
// last value; 0 before the first).
func growth(r *report.ViewRow) map[string]uint64 {
	out := map[string]uint64{}
	var before uint64
	for _, p := range r.Phases {
		if p.Peak != nil && *p.Peak > before {
			out[p.Phase] = *p.Peak - before
		} else {
			out[p.Phase] = 0
		}
		if p.Last != nil {
			before = *p.Last
		}
	}
	return out
}

// growthDiffs are the phases where a traced row grew more in the failing
// run.
func growthDiffs(k rowKey, b, g *report.ViewRow) []cand {
	bg, gg := growth(b), growth(g)
	var out []cand
	for _, p := range b.Phases {
		gv, ok := gg[p.Phase]
		bv := bg[p.Phase]
		if !ok || bv < gv+minBytes {
			continue
		}
		gpu := k.gpu
		dd := report.Difference{Kind: report.DiffPhaseGrowth, GPU: &gpu, View: b.View, Phase: p.Phase, Bytes: bv - gv,
			Good: i64(gv), Failing: i64(bv), Exact: true,
			Summary: fmt.Sprintf("in phase %q, %s grew by %s on GPU %d, against %s in the good run", p.Phase,
				tracedWhat(b.View), report.HumanBytes(bv), gpu, report.HumanBytes(gv))}
		out = append(out, cand{key: fmt.Sprintf("phase-growth\x00%d\x00%s\x00%s", gpu, b.View, p.Phase), d: dd})
	}
	return out
}

func tracedWhat(view string) string {
	if view == "bar1" {
		return "traced BAR1 mappings"
	}
	return "traced device allocations"
}

// durationDiffs are the phases (the last one aside: it ends where the run
// ends, at the failure in a failing run) that took half again as long or
// two thirds as long, and at least a second more or less: a busy node
// stretches short phases by more than that ratio.
func durationDiffs(bad, good []report.Phase) []cand {
	gd := map[string]int64{}
	for _, p := range good {
		gd[p.Label] = p.EndNS - p.StartNS
	}
	var out []cand
	for i, p := range bad {
		g, ok := gd[p.Label]
		if !ok || i == len(bad)-1 {
			continue
		}
		b := p.EndNS - p.StartNS
		if abs(b-g) < minPhaseChange || (2*b < 3*g && 3*b > 2*g) {
			continue
		}
		dd := report.Difference{Kind: report.DiffPhaseDuration, Phase: p.Label, Good: &g, Failing: &b, Exact: true,
			Summary: fmt.Sprintf("phase %q took %s, against %s in the good run", p.Label, report.Duration(b), report.Duration(g))}
		out = append(out, cand{key: "phase-duration\x00" + p.Label, d: dd})
	}
	return out
}

// minPhaseChange is the least change of a phase's duration reported.
const minPhaseChange = int64(time.Second)

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// platformDiffs compares the inventories: the driver, and each GPU's
// model, framebuffer and BAR1 sizes and MIG mode. A value either side
// lacks is not compared.
func platformDiffs(bad, good Platform) []cand {
	var out []cand
	out = appendText(out, nil, "driver version", bad.Driver, good.Driver)
	gg := map[int]GPUPlatform{}
	for _, g := range good.GPUs {
		gg[g.Index] = g
	}
	for _, b := range bad.GPUs {
		g, ok := gg[b.Index]
		if !ok {
			continue
		}
		i := b.Index
		out = appendText(out, &i, "model", b.Name, g.Name)
		out = appendSize(out, i, "framebuffer size", "framebuffer", b.FBTotal, g.FBTotal)
		out = appendSize(out, i, "BAR1 size", "bar1", b.BAR1, g.BAR1)
		out = appendText(out, &i, "MIG mode", b.MIG, g.MIG)
	}
	return out
}

// inventoryCand is an inventory difference of one field.
func inventoryCand(gpu *int, field, b, g string) cand {
	where, key := "", "inventory\x00"+field
	if gpu != nil {
		where = fmt.Sprintf(" of GPU %d", *gpu)
		key += fmt.Sprintf("\x00%d", *gpu)
	}
	return cand{key: key, d: report.Difference{Kind: report.DiffInventory, GPU: gpu, Field: field,
		FailingText: b, GoodText: g, Exact: true,
		Summary: fmt.Sprintf("%s%s: %s in the failing run, %s in the good run", field, where, b, g)}}
}

// appendText adds a difference of a text field both sides have.
func appendText(out []cand, gpu *int, field, b, g string) []cand {
	if b == "" || g == "" || b == g {
		return out
	}
	return append(out, inventoryCand(gpu, field, b, g))
}

// appendSize adds a difference of a size both sides have; a smaller one
// in the failing run stands for the bytes it lacks, in its view.
func appendSize(out []cand, gpu int, field, view string, b, g *uint64) []cand {
	if b == nil || g == nil || *b == *g {
		return out
	}
	c := inventoryCand(&gpu, field, report.HumanBytes(*b), report.HumanBytes(*g))
	c.d.View, c.d.Good, c.d.Failing = view, i64(*g), i64(*b)
	if *b < *g {
		c.d.Bytes = *g - *b
	}
	return append(out, c)
}
