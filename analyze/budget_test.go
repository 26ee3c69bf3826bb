package analyze

import (
	"bytes"
	"strings"
	"testing"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// budgetPart is a part as the tests compare it.
type budgetPart struct {
	kind  string
	pid   uint32 // 0: none
	bytes uint64
	bound string
}

func TestBudgetAtTheFailureAddsUpToTheTotal(t *testing.T) {
	const allocSym, freeSym = 0, 1
	base := tClock + 100*ms
	failAt := base + 50*ms
	failing := call(allocSym, failAt, 2, cuda.Fields{Has: cuda.FieldSize, Size: 4 * gib})
	// The round the failure triggered: the framebuffer (512 MiB reserved)
	// and the processes: pid 7 (recorded) and pid 99 (not).
	round := func(round uint64, used7 uint64, withProcs bool) []store.Sample {
		total, reserved := 16*gib, 512*mibB
		used := used7 + 2*gib
		free := total - reserved - used
		trig := []store.Trigger{{PID: 7, TID: 7, End: failAt}}
		fb := store.Sample{Round: round, GPU: store.GPURef{Index: 0}, Kind: store.KindFramebuffer, Scope: store.ScopeDevice,
			API: "nvmlDeviceGetMemoryInfo_v2", Struct: "nvmlMemory_v2_t", Status: store.Status{Name: "NVML_SUCCESS"},
			Start: failAt + 1000, End: failAt + 2000, Total: &total, Reserved: &reserved, Used: &used, Free: &free, Triggers: trig}
		out := []store.Sample{fb}
		if withProcs {
			ps := procSample(failAt+2000, "NVML_SUCCESS", map[uint32]uint64{7: used7, 99: 2 * gib})
			ps.Round, ps.Triggers = round, trig
			out = append(out, ps)
		}
		return out
	}
	cases := []struct {
		name    string
		events  []store.Event
		samples []store.Sample
		want    []budgetPart
	}{
		{"a recorded process splits into its traced allocations and its contexts",
			[]store.Event{alloc(allocSym, base, 12*gib, 0xa0), failing},
			round(9, 12*gib+256*mibB, true),
			[]budgetPart{{"reserved", 0, 512 * mibB, "exact"}, {"traced", 7, 12 * gib, "exact"}, {"untraced", 7, 256 * mibB, "exact"},
				{"process-not-recorded", 99, 2 * gib, "exact"}, {"unattributed", 0, 0, "exact"}, {"free", 0, 16*gib - 512*mibB - 14*gib - 256*mibB, "exact"}}},
		{"a free between the failure and its sample leaves the process whole",
			[]store.Event{alloc(allocSym, base, 12*gib, 0xa0), alloc(allocSym, base+10*ms, gib, 0xb0), failing, free(freeSym, failAt+500, 0xb0)},
			round(9, 12*gib+256*mibB, true),
			[]budgetPart{{"reserved", 0, 512 * mibB, "exact"}, {"process", 7, 12*gib + 256*mibB, "exact"},
				{"process-not-recorded", 99, 2 * gib, "exact"}, {"unattributed", 0, 0, "exact"}, {"free", 0, 16*gib - 512*mibB - 14*gib - 256*mibB, "exact"}}},
		{"without a per-process reading of that round, used is one part",
			[]store.Event{alloc(allocSym, base, 12*gib, 0xa0), failing},
			round(9, 12*gib, false),
			[]budgetPart{{"reserved", 0, 512 * mibB, "exact"}, {"unattributed", 0, 14 * gib, "exact"}, {"free", 0, 16*gib - 512*mibB - 14*gib, "exact"}}},
		{"no failure, no budget", []store.Event{alloc(allocSym, base, 12*gib, 0xa0)}, round(9, 12*gib, true), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := runSpec{symbols: []string{"cuMemAlloc_v2", "cuMemFree_v2"}, events: tc.events, samples: tc.samples}.analyze(t, nil)
			if tc.want == nil {
				if b := budgetsAt(rep, "first-failure"); len(b) != 0 {
					t.Fatalf("budget %+v, want none", b)
				}
				return
			}
			bs := budgetsAt(rep, "first-failure")
			if len(bs) != 1 {
				t.Fatalf("budgets %+v, want one", bs)
			}
			b := bs[0]
			var got []budgetPart
			var sum uint64
			for _, p := range b.Parts {
				bp := budgetPart{kind: p.Kind, bytes: p.Bytes, bound: p.Bound}
				if p.PID != nil {
					bp.pid = *p.PID
				}
				got = append(got, bp)
				sum += p.Bytes
			}
			if !equalParts(got, tc.want) {
				t.Errorf("parts\n%+v\nwant\n%+v", got, tc.want)
			}
			if sum != b.Total || b.Total != 16*gib || b.Note != "" {
				t.Errorf("parts add up to %d of %d (note %q)", sum, b.Total, b.Note)
			}
			checkSchema(t, rep)
		})
	}
}

// equalParts compares parts in order.
func equalParts(a, b []budgetPart) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// checkSchema validates a report against the published JSON Schema.
func checkSchema(t *testing.T, rep *report.Report) {
	t.Helper()
	var b bytes.Buffer
	if err := report.WriteJSON(&b, rep); err != nil {
		t.Fatal(err)
	}
	if err := report.ValidateReportJSON(b.Bytes()); err != nil {
		t.Errorf("the report does not follow the schema: %v", err)
	}
}

func TestBudgetNamesAProcessNotRecordedAsTheRecorderReadIt(t *testing.T) {
	const allocSym = 0
	failAt := tClock + 150*ms
	total, reserved, used := 16*gib, 512*mibB, 14*gib
	free := total - reserved - used
	trig := []store.Trigger{{PID: 7, TID: 7, End: failAt}}
	fb := store.Sample{Round: 9, GPU: store.GPURef{Index: 0}, Kind: store.KindFramebuffer, Scope: store.ScopeDevice,
		API: "nvmlDeviceGetMemoryInfo_v2", Struct: "nvmlMemory_v2_t", Status: store.Status{Name: "NVML_SUCCESS"},
		Start: failAt + 1000, End: failAt + 2000, Total: &total, Reserved: &reserved, Used: &used, Free: &free, Triggers: trig}
	ps := procSample(failAt+2000, "NVML_SUCCESS", map[uint32]uint64{7: 12 * gib, 99: 2 * gib})
	ps.Round, ps.Triggers = 9, trig
	events := []store.Event{alloc(allocSym, tClock+100*ms, 12*gib, 0xa0),
		call(allocSym, failAt, 2, cuda.Fields{Has: cuda.FieldSize, Size: 4 * gib})}
	uid := func(v uint32) *uint32 { return &v }
	id := strings.Repeat("0123456789abcdef", 4)
	after := ps.End + ms // read just after the sample that first listed it
	cases := []struct {
		name       string
		neighbours []store.Neighbour
		want       report.BudgetPart // Kind, PID, Bytes, Bound left out
		source     string            // what the source ends with
	}{
		{"named by command line, user, container and pod",
			[]store.Neighbour{{PID: 99, Time: after, Comm: "python3", Args: []string{"python3", "serve.py", "--port", "8000"},
				UID: uid(1000), User: "alice", Container: id, Pod: &store.Pod{UID: "u-1", Namespace: "ml", Name: "serve-0"}}},
			report.BudgetPart{Command: "python3 serve.py --port 8000", User: "alice", Container: id, Pod: "ml/serve-0"},
			"; named from /proc when a sample first listed it"},
		{"a user the passwd file did not list is its uid; a cut command line says so",
			[]store.Neighbour{{PID: 99, Time: after, Comm: "train", Args: []string{"train", "--data"}, ArgsCut: true, UID: uid(4242)}},
			report.BudgetPart{Command: "train --data ...", User: "uid 4242"},
			"; named from /proc when a sample first listed it"},
		{"the reading before the sample wins over a later one of a reused pid",
			[]store.Neighbour{{PID: 99, Time: tClock, Args: []string{"first"}, UID: uid(0), User: "root"},
				{PID: 99, Time: after + 500*ms, Args: []string{"reused"}, UID: uid(0), User: "root"}},
			report.BudgetPart{Command: "first", User: "root"},
			"; named from /proc when a sample first listed it"},
		{"a process gone before the recorder looked is not named, and says why",
			[]store.Neighbour{{PID: 99, Time: after, Comm: "gone", Error: "not readable in /proc (the process had exited)"}},
			report.BudgetPart{}, "; not named: not readable in /proc (the process had exited)"},
		{"a recording without readings (an older file) names nobody",
			nil, report.BudgetPart{}, "; not named: the recording has no reading of its /proc"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := runSpec{symbols: []string{"cuMemAlloc_v2"}, events: events, samples: []store.Sample{fb, ps},
				neighbours: tc.neighbours}.analyze(t, nil)
			bs := budgetsAt(rep, "first-failure")
			if len(bs) != 1 {
				t.Fatalf("budgets %+v, want one", bs)
			}
			var got *report.BudgetPart
			for i, p := range bs[0].Parts {
				if p.Kind == "process-not-recorded" {
					got = &bs[0].Parts[i]
				}
			}
			if got == nil || got.PID == nil || *got.PID != 99 || got.Bytes != 2*gib {
				t.Fatalf("parts %+v: want pid 99's 2 GiB not recorded", bs[0].Parts)
			}
			if got.Command != tc.want.Command || got.User != tc.want.User || got.Container != tc.want.Container || got.Pod != tc.want.Pod {
				t.Errorf("named %q user %q container %q pod %q, want %q %q %q %q", got.Command, got.User, got.Container, got.Pod,
					tc.want.Command, tc.want.User, tc.want.Container, tc.want.Pod)
			}
			if !strings.HasSuffix(got.Source, tc.source) {
				t.Errorf("source %q, want it to end with %q", got.Source, tc.source)
			}
			checkSchema(t, rep)
		})
	}
}

func TestBudgetShowsEachMemoryPoolInUse(t *testing.T) {
	const allocSym, createSym, drawSym = 0, 1, 2
	const pool = 0x77
	base := tClock + 100*ms
	failAt := base + 50*ms
	draw := func(end int64, size, ptr uint64) store.Event {
		return call(drawSym, end, 0, cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr | cuda.FieldTarget, Size: size, Ptr: ptr, Target: pool})
	}
	create := func(maxSize uint64) store.Event {
		return call(createSym, base+ms, 0, cuda.Fields{Has: cuda.FieldPtr | cuda.FieldSize, Ptr: pool, Size: maxSize})
	}
	failing := call(allocSym, failAt, 2, cuda.Fields{Has: cuda.FieldSize, Size: 4 * gib})
	trig := []store.Trigger{{PID: 7, TID: 7, End: failAt}}
	total, reserved, used := 16*gib, 512*mibB, 12*gib
	free := total - reserved - used
	fb := store.Sample{Round: 9, GPU: store.GPURef{Index: 0}, Kind: store.KindFramebuffer, Scope: store.ScopeDevice,
		API: "nvmlDeviceGetMemoryInfo_v2", Struct: "nvmlMemory_v2_t", Status: store.Status{Name: "NVML_SUCCESS"},
		Start: failAt + 1000, End: failAt + 2000, Total: &total, Reserved: &reserved, Used: &used, Free: &free, Triggers: trig}
	ps := procSample(failAt+2000, "NVML_SUCCESS", map[uint32]uint64{7: 12 * gib})
	ps.Round, ps.Triggers = 9, trig
	cases := []struct {
		name   string
		events []store.Event
		want   []budgetPart
		max    *uint64 // the pool part's maxSize
	}{
		{"a pool's allocations are its own part, the rest of the traced ones another",
			[]store.Event{alloc(allocSym, base, 8*gib, 0xa0), create(4 * gib), draw(base+2*ms, 2*gib, 0xb0), draw(base+3*ms, gib, 0xc0), failing},
			[]budgetPart{{"reserved", 0, 512 * mibB, "exact"}, {"traced", 7, 8 * gib, "exact"}, {"pool", 7, 3 * gib, "exact"},
				{"untraced", 7, gib, "exact"}, {"unattributed", 0, 0, "exact"}, {"free", 0, free, "exact"}},
			ptr(4 * gib)},
		{"only pool allocations: no empty traced part; a pool without maxSize has none",
			[]store.Event{create(0), draw(base+2*ms, 11*gib, 0xb0), failing},
			[]budgetPart{{"reserved", 0, 512 * mibB, "exact"}, {"pool", 7, 11 * gib, "exact"},
				{"untraced", 7, gib, "exact"}, {"unattributed", 0, 0, "exact"}, {"free", 0, free, "exact"}},
			nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := runSpec{symbols: []string{"cuMemAlloc_v2", "cuMemPoolCreate", "cuMemAllocFromPoolAsync"}, events: tc.events,
				samples: []store.Sample{fb, ps}}.analyze(t, nil)
			bs := budgetsAt(rep, "first-failure")
			if len(bs) != 1 {
				t.Fatalf("budgets %+v, want one", bs)
			}
			var got []budgetPart
			for _, p := range bs[0].Parts {
				bp := budgetPart{kind: p.Kind, bytes: p.Bytes, bound: p.Bound}
				if p.PID != nil {
					bp.pid = *p.PID
				}
				got = append(got, bp)
				if p.Kind != "pool" {
					continue
				}
				if p.Pool != "0x77" || (p.PoolMax == nil) != (tc.max == nil) || (p.PoolMax != nil && *p.PoolMax != *tc.max) {
					t.Errorf("pool part names pool %q, maxSize %v: want 0x77, %v", p.Pool, p.PoolMax, tc.max)
				}
			}
			if !equalParts(got, tc.want) {
				t.Errorf("parts\n%+v\nwant\n%+v", got, tc.want)
			}
			checkSchema(t, rep)
		})
	}
}

func TestBudgetOfBAR1SplitsTracedMappingsByKind(t *testing.T) {
	key1 := []byte("0123456789abcdef0123456789abcdef")
	key2 := []byte("fedcba9876543210fedcba9876543210")
	failAt := tClock + 300*ms
	trig := store.Trigger{PID: 8, TID: 8, Symbol: "cuIpcOpenMemHandle_v2", End: failAt}
	ev := func(sym uint16, pid uint32, end int64, res int32, f cuda.Fields) store.Event {
		return store.Event{Symbol: sym, PID: pid, TID: pid, Start: end - 1000, End: end, Result: res, Ctx: 1, Dev: 0, Stack: -1, Fields: f}
	}
	events := []store.Event{
		ev(0, 7, tClock+100*ms, 0, cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr, Size: 64 * mibB, Ptr: 0x1000}),
		ev(1, 7, tClock+110*ms, 0, cuda.Fields{Has: cuda.FieldTarget | cuda.FieldKey, Target: 0x1000, Key: key1}),
		ev(0, 7, tClock+120*ms, 0, cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr, Size: 192 * mibB, Ptr: 0x2000}),
		ev(1, 7, tClock+130*ms, 0, cuda.Fields{Has: cuda.FieldTarget | cuda.FieldKey, Target: 0x2000, Key: key2}),
		ev(2, 8, tClock+200*ms, 0, cuda.Fields{Has: cuda.FieldKey | cuda.FieldFlags | cuda.FieldPtr, Key: key1, Flags: 1, Ptr: 0x9000}),
		ev(2, 8, failAt, 205, cuda.Fields{Has: cuda.FieldKey | cuda.FieldFlags, Key: key2, Flags: 1}),
	}
	one := []store.DeviceMap{{Ordinal: 0, GPU: 0, Method: "uuid"}}
	procs := []store.Process{{PID: 7, Start: tClock, Exe: "/bin/exporter", Root: true, Devices: one},
		{PID: 8, Start: tClock, Exe: "/bin/importer", Args: []string{"importer", "--rank", "1"}, Devices: one}}
	// An import of a handle exported before the record: a mapping no call
	// sized, so the importer's part is at least what was sized and the
	// rest at most what is left.
	unsized := append(append([]store.Event(nil), events[:5]...),
		ev(2, 8, tClock+210*ms, 0, cuda.Fields{Has: cuda.FieldKey | cuda.FieldFlags | cuda.FieldPtr, Key: []byte("an export made before the record"), Flags: 1, Ptr: 0xa000}),
		events[5])
	cases := []struct {
		name   string
		events []store.Event
		sample store.Sample
		want   []budgetPart
	}{
		{"the failure's own sample: the importer's IPC mappings, the rest, free", events,
			bar1Of(0, failAt+300_000, 188*mibB, trig),
			[]budgetPart{{"mapping", 8, 64 * mibB, "exact"}, {"unattributed", 0, 4 * mibB, "exact"}, {"free", 0, 188 * mibB, "exact"}}},
		{"a sample before the failure, not its own: used is one part", events,
			bar1Of(0, failAt-50*ms, 188*mibB),
			[]budgetPart{{"unattributed", 0, 68 * mibB, "exact"}, {"free", 0, 188 * mibB, "exact"}}},
		{"a mapping no call sized: the importer's part at least, the rest at most", unsized,
			bar1Of(0, failAt+300_000, 188*mibB, trig),
			[]budgetPart{{"mapping", 8, 64 * mibB, "at-least"}, {"unattributed", 0, 4 * mibB, "at-most"}, {"free", 0, 188 * mibB, "exact"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := runSpec{symbols: []string{"cuMemAlloc_v2", "cuIpcGetMemHandle", "cuIpcOpenMemHandle_v2"}, events: tc.events,
				samples: []store.Sample{tc.sample}, procs: procs}.analyze(t, nil)
			bs := budgetsAt(rep, "first-failure")
			if len(bs) != 1 || bs[0].View != "bar1" {
				t.Fatalf("budgets %+v, want BAR1's (verdict %q)", bs, rep.Verdict)
			}
			var got []budgetPart
			for _, p := range bs[0].Parts {
				bp := budgetPart{kind: p.Kind, bytes: p.Bytes, bound: p.Bound}
				if p.PID != nil {
					bp.pid = *p.PID
					if p.Mapping != "ipc-mapping" || p.Command != "importer --rank 1" {
						t.Errorf("mapping part %+v: want the importer's ipc-mapping", p)
					}
				}
				got = append(got, bp)
			}
			if !equalParts(got, tc.want) {
				t.Errorf("parts\n%+v\nwant\n%+v", got, tc.want)
			}
			checkSchema(t, rep)
		})
	}
}

// budgetsAt are the report's budgets at one moment ("first-failure",
// "least-headroom").
func budgetsAt(rep *report.Report, at string) []report.Budget {
	var out []report.Budget
	for _, b := range rep.Budget {
		if b.At == at {
			out = append(out, b)
		}
	}
	return out
}

func TestBudgetFromTheSampleBeforeTheFailureBoundsTheContext(t *testing.T) {
	const allocSym, freeSym = 0, 1
	base := tClock + 100*ms
	failAt := base + 50*ms
	ctx := 256 * mibB
	// No sample is triggered by the failure: the nearest before it (round
	// 4, 10 ms before) is the reference, with its per-process reading.
	before := func() []store.Sample {
		reserved := 512 * mibB
		fb := fbSample(failAt-10*ms, reserved+12*gib+ctx)
		fb.Round, fb.Reserved = 4, &reserved
		ps := procSample(failAt-10*ms+1000, "NVML_SUCCESS", map[uint32]uint64{7: 12*gib + ctx})
		ps.Round = 4
		return []store.Sample{fb, ps}
	}
	failing := call(allocSym, failAt, 2, cuda.Fields{Has: cuda.FieldSize, Size: 4 * gib})
	freeLeft := 16*gib - 512*mibB - 12*gib - ctx
	cases := []struct {
		name   string
		events []store.Event
		want   []budgetPart
	}{
		{"nothing between: the context is at least what the sample read",
			[]store.Event{alloc(allocSym, base, 12*gib, 0xa0), failing},
			[]budgetPart{{"reserved", 0, 512 * mibB, "exact"}, {"traced", 7, 12 * gib, "exact"}, {"untraced", 7, ctx, "at-least"},
				{"unattributed", 0, 0, "exact"}, {"free", 0, freeLeft, "exact"}}},
		{"a traced change between: the process is not split",
			[]store.Event{alloc(allocSym, base, 12*gib, 0xa0), alloc(allocSym, failAt-5*ms, mibB, 0xb0), failing},
			[]budgetPart{{"reserved", 0, 512 * mibB, "exact"}, {"process", 7, 12*gib + ctx, "exact"},
				{"unattributed", 0, 0, "exact"}, {"free", 0, freeLeft, "exact"}}},
		{"a release of unknown size between: the process is not split",
			[]store.Event{alloc(allocSym, base, 12*gib, 0xa0), free(freeSym, failAt-5*ms, 0xdead), failing},
			[]budgetPart{{"reserved", 0, 512 * mibB, "exact"}, {"process", 7, 12*gib + ctx, "exact"},
				{"unattributed", 0, 0, "exact"}, {"free", 0, freeLeft, "exact"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := runSpec{symbols: []string{"cuMemAlloc_v2", "cuMemFree_v2"}, events: tc.events, samples: before()}.analyze(t, nil)
			bs := budgetsAt(rep, "first-failure")
			if len(bs) != 1 {
				t.Fatalf("budgets %+v, want one at the failure", rep.Budget)
			}
			var got []budgetPart
			for _, p := range bs[0].Parts {
				var pid uint32
				if p.PID != nil {
					pid = *p.PID
				}
				got = append(got, budgetPart{p.Kind, pid, p.Bytes, p.Bound})
			}
			if !equalParts(got, tc.want) {
				t.Errorf("parts\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
