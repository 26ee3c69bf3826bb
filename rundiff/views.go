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

// tracedMeasure is a traced row compared per GPU and view.
type tracedMeasure struct {
	field, view, what string
}

// tracedMeasures: the traced peak, per view.
func tracedMeasures() []tracedMeasure {
	return []tracedMeasure{
		{"traced device allocations", "framebuffer", "peak of traced device allocations"},
		{"traced aperture mappings", "bar1", "peak of traced BAR1 mappings"},
	}
}

// viewDiffs compares the least free and the traced peak per GPU and view.
func viewDiffs(bad, good *report.Report) []cand {
	out := headroomDiffs(bad, good)
	br, keys := deviceRows(bad)
	gr, _ := deviceRows(good)
	for _, m := range tracedMeasures() {
		for _, k := range keys {
			b, g := br[k], gr[k]
			if k.field != m.field || g == nil || b.Peak == nil || g.Peak == nil || *b.Peak < *g.Peak+minBytes {
				continue
			}
			bv, gv := *b.Peak, *g.Peak
			gpu := k.gpu
			dd := report.Difference{Kind: report.DiffTracedPeak, GPU: &gpu, View: m.view, Bytes: bv - gv, Good: i64(gv), Failing: i64(bv),
				Exact: true, Summary: fmt.Sprintf("%s on GPU %d: %s in the failing run, %s in the good run", m.what, gpu,
					report.HumanBytes(bv), report.HumanBytes(gv))}
			out = append(out, cand{key: fmt.Sprintf("%s\x00%d\x00%s", report.DiffTracedPeak, gpu, m.view), d: dd})
		}
	}
	return out
}

// headKey names one whole GPU's view in the headroom.
type headKey struct {
	gpu  int
	view string
}

// wholeGPUHeadroom indexes a report's headroom of whole GPUs (MIG
// instances apart) and lists its keys in the report's order.
func wholeGPUHeadroom(rep *report.Report) (map[headKey]*report.Headroom, []headKey) {
	out := map[headKey]*report.Headroom{}
	var keys []headKey
	for i := range rep.Headroom {
		h := &rep.Headroom[i]
		if h.MIG != nil {
			continue
		}
		k := headKey{h.GPU, h.View}
		if out[k] == nil {
			keys = append(keys, k)
		}
		out[k] = h
	}
	return out, keys
}

// headroomDiffs compares the least free memory per GPU and view: the
// analysis's headroom, the samples corrected by the traced calls between
// them, which a sample alone can miss. The difference is exact when both
// figures are; otherwise one of them is a bound and the summary says so.
func headroomDiffs(bad, good *report.Report) []cand {
	bh, keys := wholeGPUHeadroom(bad)
	gh, _ := wholeGPUHeadroom(good)
	var out []cand
	for _, k := range keys {
		b, g := bh[k], gh[k]
		if g == nil || b.LeastFree+minBytes > g.LeastFree {
			continue
		}
		gpu := k.gpu
		exact := b.Exact && g.Exact
		dd := report.Difference{Kind: report.DiffLeastFree, GPU: &gpu, View: k.view, Bytes: g.LeastFree - b.LeastFree,
			Good: i64(g.LeastFree), Failing: i64(b.LeastFree), Exact: exact,
			Summary: fmt.Sprintf("least free %s on GPU %d: %s in the failing run, %s in the good run%s", viewName(k.view), gpu,
				report.HumanBytes(b.LeastFree), report.HumanBytes(g.LeastFree), boundText(b.Exact, g.Exact))}
		out = append(out, cand{key: fmt.Sprintf("%s\x00%d\x00%s", report.DiffLeastFree, gpu, k.view), d: dd})
	}
	return out
}

// boundText says which of two headroom figures is a bound, not exact.
func boundText(bad, good bool) string {
	switch {
	case bad && good:
		return ""
	case !bad && !good:
		return " (both bounds, not exact)"
	case !bad:
		return " (the failing run's a bound, not exact)"
	}
	return " (the good run's a bound, not exact)"
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
