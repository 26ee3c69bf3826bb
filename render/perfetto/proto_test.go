package perfetto

import (
	"bytes"
	"io"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/retrivium/forensic/analyze"
	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/internal/runfixture"
	pb "github.com/retrivium/forensic/render/perfetto/traceproto"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// exportProto analyzes the run at path with a Trace observer writing to w.
func exportProto(path string, w io.Writer) (*Trace, error) {
	r, err := store.Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	tr := NewTrace(w)
	rep, err := analyze.Analyze(r, analyze.Options{Observer: tr, NoTimeline: true})
	if err != nil {
		return nil, err
	}
	return tr, tr.Finish(rep)
}

func protoOf(t testing.TB, path string) *decoded {
	t.Helper()
	var buf bytes.Buffer
	if _, err := exportProto(path, &buf); err != nil {
		t.Fatal(err)
	}
	return decodeTrace(t, buf.Bytes())
}

// callKey identifies a call by what a slice must show of it.
type callKey struct {
	pid, tid   int32
	symbol     string
	start, end int64
}

// storeCalls lists the run's calls as stored.
func storeCalls(t testing.TB, path string) []callKey {
	t.Helper()
	r, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var calls []callKey
	if err := r.Events(func(e *store.Event) error {
		calls = append(calls, callKey{int32(e.PID), int32(e.TID), e.Name, e.Start, e.End})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return calls
}

// sliceCalls lists the decoded slices on thread tracks as calls.
func sliceCalls(t testing.TB, d *decoded) []callKey {
	t.Helper()
	var calls []callKey
	for _, s := range d.slices {
		pid, tid, ok := d.threadOf(s.track)
		if !ok {
			t.Errorf("slice %q on track %#x, not a thread's", s.name, s.track)
			continue
		}
		calls = append(calls, callKey{pid, tid, s.name, s.ts, s.ts + s.dur})
	}
	return calls
}

func sortCalls(c []callKey) {
	slices.SortFunc(c, func(a, b callKey) int {
		if a.start != b.start {
			return int(a.start - b.start)
		}
		return strings.Compare(a.symbol, b.symbol)
	})
}

func TestProtoTrace(t *testing.T) {
	path := runfixture.BuildRun(t, 0)
	d := protoOf(t, path)
	if d.primaryClock != pb.BuiltinClock_BUILTIN_CLOCK_MONOTONIC {
		t.Errorf("primary trace clock %v, want MONOTONIC (the run's clock)", d.primaryClock)
	}
	// One slice per call, on its thread's track, with its times.
	want, got := storeCalls(t, path), sliceCalls(t, d)
	sortCalls(want)
	sortCalls(got)
	if !slices.Equal(want, got) {
		t.Errorf("slices differ from the stored calls:\n got %v\nwant %v", got, want)
	}
	// Tracks named by process and thread.
	procNames := map[int32]string{}
	for id, td := range d.tracks {
		if pd := td.GetProcess(); pd != nil {
			procNames[pd.GetPid()] = pd.GetProcessName()
			if id != processUUID(uint32(pd.GetPid())) {
				t.Errorf("process %d has track %#x", pd.GetPid(), id)
			}
		}
	}
	if procNames[runfixture.PIDTrain] != "python3 train.py --batch 64" || procNames[runfixture.PIDServe] != "serve --port 8000" {
		t.Errorf("process names %v", procNames)
	}
	for _, c := range want {
		td := d.tracks[threadUUID(uint32(c.pid), uint32(c.tid))]
		if td.GetThread().GetThreadName() == "" || td.GetParentUuid() != processUUID(uint32(c.pid)) {
			t.Errorf("thread %d/%d: track %v", c.pid, c.tid, td)
		}
	}
	checkFailure(t, d)
	checkCounters(t, d)
	checkInstants(t, d)
}

// checkFailure: the failed allocation's slice carries its result, code and
// size; an instant names the failure on its thread; successful slices
// carry their size and no result.
func checkFailure(t *testing.T, d *decoded) {
	t.Helper()
	failedTrack := threadUUID(runfixture.PIDTrain, runfixture.PIDTrain)
	var failed, sized int
	for _, s := range d.slices {
		if s.args["result"] != nil {
			failed++
			if s.track != failedTrack || s.name != "cuMemAlloc_v2" || s.args["result"] != "CUDA_ERROR_OUT_OF_MEMORY" ||
				s.args["code"] != int64(2) || s.args["size"] != uint64(24<<30) || s.ts+s.dur != runfixture.TFail {
				t.Errorf("failed slice %+v", s)
			}
			if !slices.Contains(s.cats, "allocation") {
				t.Errorf("failed slice categories %v", s.cats)
			}
			continue
		}
		if s.name == "cuMemAlloc_v2" {
			sized++
			if s.args["size"] == nil || len(s.args) != 1 {
				t.Errorf("successful allocation args %v, want its size only", s.args)
			}
		}
	}
	if failed != 1 || sized != 7 {
		t.Errorf("%d failed slices, %d successful allocations with a size", failed, sized)
	}
	var instant bool
	for _, in := range d.instants {
		if in.name == "FAILED cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY" {
			instant = in.track == failedTrack && in.ts == runfixture.TFail && slices.Contains(in.cats, "failure")
		}
	}
	if !instant {
		t.Error("no failure instant on the failing thread at the failure's time")
	}
}

// checkCounters: one counter track per GPU, view and field, under the
// GPU's track, in bytes; framebuffer and BAR1 never share one.
func checkCounters(t *testing.T, d *decoded) {
	t.Helper()
	names := map[string]uint64{}
	for id, td := range d.tracks {
		if td.Counter == nil {
			continue
		}
		names[td.GetName()] = id
		lower := strings.ToLower(td.GetName())
		if strings.Contains(lower, "framebuffer") == strings.Contains(lower, "bar1") {
			t.Errorf("counter %q is not one view", td.GetName())
		}
		parent := d.tracks[td.GetParentUuid()]
		gpu := strings.Fields(td.GetName())[1]
		if !strings.HasPrefix(parent.GetName(), "GPU "+gpu+" NVML samples") {
			t.Errorf("counter %q under %q", td.GetName(), parent.GetName())
		}
		if td.GetCounter().GetUnit() != pb.CounterDescriptor_UNIT_SIZE_BYTES {
			t.Errorf("counter %q unit %v", td.GetName(), td.GetCounter().GetUnit())
		}
	}
	for _, n := range []string{"GPU 0 framebuffer used", "GPU 0 framebuffer free", "GPU 0 framebuffer reserved",
		"GPU 0 BAR1 used", "GPU 0 BAR1 free", "GPU 1 framebuffer used", "GPU 1 BAR1 free"} {
		if len(d.counters[names[n]]) == 0 {
			t.Errorf("no values on counter %q (have %v)", n, names)
		}
	}
	// GPU 1 holds 2 GiB from 150 ms to 1.45 s: its samples say so.
	for _, p := range d.counters[names["GPU 1 framebuffer used"]] {
		held := p.ts >= runfixture.TClock+150_020_000 && p.ts < runfixture.TClock+1_450_010_000
		if want := map[bool]int64{true: 2 << 30, false: 0}[held]; p.value != want {
			t.Errorf("GPU 1 framebuffer used at %d = %d, want %d", p.ts, p.value, want)
		}
	}
	// 16 rounds (every 100 ms from 50 ms to 1.55 s) and the one the failure triggered.
	if n := len(d.counters[names["GPU 0 BAR1 used"]]); n != 17 {
		t.Errorf("GPU 0 BAR1 used has %d values, want 17", n)
	}
}

func checkInstants(t *testing.T, d *decoded) {
	t.Helper()
	kernel, markers := d.trackByName(t, "Kernel log"), d.trackByName(t, "Markers")
	var xid, mark bool
	for _, in := range d.instants {
		switch in.track {
		case kernel:
			xid = strings.HasPrefix(in.name, "Xid 31: ") && in.ts == runfixture.TFail+100_000_000 && in.args["xid"] == int64(31) &&
				strings.Contains(in.args["text"].(string), "MMU Fault")
		case markers:
			mark = in.name == "mark: weights loaded" && in.ts == runfixture.TClock+700_000_000 && in.args["label"] == "weights loaded"
		}
	}
	if !xid || !mark {
		t.Errorf("kernel log instant %v, marker instant %v", xid, mark)
	}
}

// TestFieldNumbers checks every field number the writer uses against the
// generated descriptors of trace.proto.
func TestFieldNumbers(t *testing.T) {
	msg := func(m interface{ ProtoReflect() protoreflect.Message }) protoreflect.MessageDescriptor {
		return m.ProtoReflect().Descriptor()
	}
	for _, c := range []struct {
		m     protoreflect.MessageDescriptor
		field string
		num   int
	}{
		{msg(&pb.Trace{}), "packet", fTracePacket},
		{msg(&pb.TracePacket{}), "timestamp", fTimestamp},
		{msg(&pb.TracePacket{}), "timestamp_clock_id", fTimestampClockID},
		{msg(&pb.TracePacket{}), "track_event", fTrackEvent},
		{msg(&pb.TracePacket{}), "track_descriptor", fTrackDescriptor},
		{msg(&pb.TracePacket{}), "clock_snapshot", fClockSnapshot},
		{msg(&pb.TracePacket{}), "trusted_packet_sequence_id", fSequenceID},
		{msg(&pb.TracePacket{}), "interned_data", fInternedData},
		{msg(&pb.TracePacket{}), "sequence_flags", fSequenceFlags},
		{msg(&pb.TracePacket{}), "trace_packet_defaults", fPacketDefaults},
		{msg(&pb.TracePacketDefaults{}), "timestamp_clock_id", fDefaultsClockID},
		{msg(&pb.TracePacketDefaults{}), "track_event_defaults", fDefaultsTrackEvent},
		{msg(&pb.TrackEventDefaults{}), "track_uuid", fDefaultsTrackUUID},
		{msg(&pb.ClockSnapshot{}), "clocks", fClocks},
		{msg(&pb.ClockSnapshot{}), "primary_trace_clock", fPrimaryClock},
		{msg(&pb.ClockSnapshot_Clock{}), "clock_id", fClockID},
		{msg(&pb.ClockSnapshot_Clock{}), "timestamp", fClockTime},
		{msg(&pb.ClockSnapshot_Clock{}), "is_incremental", fClockIncrease},
		{msg(&pb.InternedData{}), "event_categories", fInternCategories},
		{msg(&pb.InternedData{}), "event_names", fInternNames},
		{msg(&pb.InternedData{}), "debug_annotation_names", fInternAnnNames},
		{msg(&pb.EventName{}), "iid", fInternIID},
		{msg(&pb.EventName{}), "name", fInternName},
		{msg(&pb.EventCategory{}), "iid", fInternIID},
		{msg(&pb.EventCategory{}), "name", fInternName},
		{msg(&pb.DebugAnnotationName{}), "iid", fInternIID},
		{msg(&pb.DebugAnnotationName{}), "name", fInternName},
		{msg(&pb.TrackEvent{}), "category_iids", fCategoryIIDs},
		{msg(&pb.TrackEvent{}), "categories", fCategories},
		{msg(&pb.TrackEvent{}), "name_iid", fNameIID},
		{msg(&pb.TrackEvent{}), "name", fName},
		{msg(&pb.TrackEvent{}), "type", fType},
		{msg(&pb.TrackEvent{}), "track_uuid", fTrackUUID},
		{msg(&pb.TrackEvent{}), "counter_value", fCounterValue},
		{msg(&pb.TrackEvent{}), "debug_annotations", fDebugAnnotations},
		{msg(&pb.DebugAnnotation{}), "name_iid", fAnnNameIID},
		{msg(&pb.DebugAnnotation{}), "name", fAnnName},
		{msg(&pb.DebugAnnotation{}), "bool_value", fAnnBool},
		{msg(&pb.DebugAnnotation{}), "uint_value", fAnnUint},
		{msg(&pb.DebugAnnotation{}), "int_value", fAnnInt},
		{msg(&pb.DebugAnnotation{}), "string_value", fAnnString},
		{msg(&pb.DebugAnnotation{}), "pointer_value", fAnnPointer},
		{msg(&pb.TrackDescriptor{}), "uuid", fTrackUUIDDesc},
		{msg(&pb.TrackDescriptor{}), "parent_uuid", fTrackParent},
		{msg(&pb.TrackDescriptor{}), "name", fTrackName},
		{msg(&pb.TrackDescriptor{}), "process", fTrackProcess},
		{msg(&pb.TrackDescriptor{}), "thread", fTrackThread},
		{msg(&pb.TrackDescriptor{}), "counter", fTrackCounter},
		{msg(&pb.ProcessDescriptor{}), "pid", fProcessPID},
		{msg(&pb.ProcessDescriptor{}), "cmdline", fProcessCmdline},
		{msg(&pb.ProcessDescriptor{}), "process_name", fProcessName},
		{msg(&pb.ThreadDescriptor{}), "pid", fThreadPID},
		{msg(&pb.ThreadDescriptor{}), "tid", fThreadTID},
		{msg(&pb.ThreadDescriptor{}), "thread_name", fThreadName},
		{msg(&pb.CounterDescriptor{}), "unit", fCounterUnit},
	} {
		fd := c.m.Fields().ByName(protoreflect.Name(c.field))
		if fd == nil || int(fd.Number()) != c.num {
			t.Errorf("%s.%s: writer uses %d, trace.proto says %v", c.m.FullName(), c.field, c.num, fd)
		}
	}
	enums := map[string][2]int{
		"TYPE_SLICE_BEGIN": {typeSliceBegin, int(pb.TrackEvent_TYPE_SLICE_BEGIN)},
		"TYPE_SLICE_END":   {typeSliceEnd, int(pb.TrackEvent_TYPE_SLICE_END)},
		"TYPE_INSTANT":     {typeInstant, int(pb.TrackEvent_TYPE_INSTANT)},
		"TYPE_COUNTER":     {typeCounter, int(pb.TrackEvent_TYPE_COUNTER)},
		"SEQ_CLEARED":      {seqStateCleared, int(pb.TracePacket_SEQ_INCREMENTAL_STATE_CLEARED)},
		"SEQ_NEEDS":        {seqNeedsState, int(pb.TracePacket_SEQ_NEEDS_INCREMENTAL_STATE)},
		"MONOTONIC":        {clockMonotonic, int(pb.BuiltinClock_BUILTIN_CLOCK_MONOTONIC)},
		"UNIT_SIZE_BYTES":  {counterUnitBytes, int(pb.CounterDescriptor_UNIT_SIZE_BYTES)},
	}
	for name, v := range enums {
		if v[0] != v[1] {
			t.Errorf("%s: writer uses %d, trace.proto says %d", name, v[0], v[1])
		}
	}
}

// nestedRun writes a run with calls made inside other calls (a library
// calling itself, Depth 1), one of them failed, a call stamped before its
// thread's previous one, and NVML samples where BAR1 is unsupported for a
// while, then fails otherwise, then works again.
func nestedRun(t testing.TB) string {
	t.Helper()
	const t0 = int64(9_000_000_000)
	path := filepath.Join(t.TempDir(), "nested.db")
	names := []string{"cuMemAlloc", "cuMemAlloc_v2", "cuMemFree_v2"}
	run := store.RunInfo{ID: "nested", Version: "test", Clock: store.ClockName, ClockStart: t0, WallStart: time.Unix(1700000000, 0),
		Mode: "pid", TargetPID: 500, Interval: 100 * time.Millisecond}
	w, err := store.Create(path, store.CreateOptions{}, run, names)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Reserve = 0
	ev := func(sym uint16, tid uint32, start, end int64, depth uint8, res int32, size uint64) store.Event {
		return store.Event{Symbol: sym, PID: 500, TID: tid, Start: t0 + start, End: t0 + end, Depth: depth, Result: res, Dev: 0, Stack: -1,
			Fields: cuda.Fields{Has: cuda.FieldSize, Size: size}}
	}
	events := []store.Event{
		// cuMemAlloc (1000..5000) calls cuMemAlloc_v2 twice; the second fails.
		ev(1, 500, 1500, 2000, 1, 0, 4096),
		ev(1, 500, 2500, 4000, 1, 2, 1<<40),
		ev(0, 500, 1000, 5000, 0, 2, 1<<40),
		ev(1, 500, 6000, 7000, 0, 0, 8192),
		// Another thread: a call whose return is stamped before its start,
		// and one that began before the previous call on its thread ended
		// (its begin cannot be a delta: it is written with its absolute time).
		ev(1, 501, 3000, 2900, 0, 0, 64),
		ev(2, 501, 8000, 9000, 0, 0, 0),
		ev(1, 501, 7000, 9500, 0, 0, 128),
	}
	ref := store.GPURef{Index: 0, UUID: "GPU-nested"}
	u := func(v uint64) *uint64 { return &v }
	var samples []store.Sample
	bar1 := []store.Status{{Code: 3, Name: "NVML_ERROR_NOT_SUPPORTED"}, {Code: 3, Name: "NVML_ERROR_NOT_SUPPORTED"},
		{Code: 999, Name: "NVML_ERROR_UNKNOWN"}, {Code: 0, Name: "NVML_SUCCESS"}}
	for i, st := range bar1 {
		at := t0 + int64(i+1)*100_000
		samples = append(samples,
			store.Sample{Round: uint64(i + 1), GPU: ref, Kind: store.KindFramebuffer, Scope: store.ScopeDevice, API: "nvmlDeviceGetMemoryInfo_v2",
				Status: store.Status{Name: "NVML_SUCCESS"}, Start: at, End: at + 10, Total: u(16 << 30), Used: u(uint64(i) << 30), Free: u(uint64(16-i) << 30)},
			store.Sample{Round: uint64(i + 1), GPU: ref, Kind: store.KindBAR1, Scope: store.ScopeAperture, API: "nvmlDeviceGetBAR1MemoryInfo",
				Status: st, Start: at + 20, End: at + 30})
		if st.OK() {
			samples[len(samples)-1].Total, samples[len(samples)-1].Used, samples[len(samples)-1].Free = u(256<<20), u(2<<20), u(254<<20)
		}
	}
	b := store.Batch{Processes: []store.Process{{PID: 500, Start: t0, Exe: "/usr/bin/app", Root: true}}, Events: events, Samples: samples}
	if err := w.Commit(&b); err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(store.StopInfo{Time: t0 + 1_000_000, Reason: "target-exited", Stats: store.Stats{Calls: 7, Events: 7}}); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestProtoNestedCalls(t *testing.T) {
	path := nestedRun(t)
	d := protoOf(t, path)
	want, got := storeCalls(t, path), sliceCalls(t, d)
	for i := range want {
		want[i].end = max(want[i].end, want[i].start) // a slice never ends before it begins
	}
	sortCalls(want)
	sortCalls(got)
	if !slices.Equal(want, got) {
		t.Errorf("slices differ from the stored calls:\n got %v\nwant %v", got, want)
	}
	if d.absolute != 1 {
		t.Errorf("%d packets with an absolute time, want 1 (the call that began before its predecessor ended)", d.absolute)
	}
	var outer = -1
	for i, s := range d.slices {
		if s.name == "cuMemAlloc" {
			outer = i
		}
	}
	if outer < 0 {
		t.Fatal("no cuMemAlloc slice")
	}
	var inner int
	for _, s := range d.slices {
		if s.name == "cuMemAlloc_v2" && s.args["depth"] == uint64(1) {
			inner++
			if s.parentIx != outer || s.depth != 1 {
				t.Errorf("nested call %+v is not inside cuMemAlloc", s)
			}
		}
	}
	if inner != 2 {
		t.Errorf("%d nested slices, want 2", inner)
	}
	var fails []string
	for _, in := range d.instants {
		if strings.HasPrefix(in.name, "FAILED") {
			fails = append(fails, in.name)
		}
	}
	if len(fails) != 2 {
		t.Errorf("failure instants %v, want the nested and the outer failure", fails)
	}
}

// Writing a call allocates nothing.
func TestProtoCallAllocs(t *testing.T) {
	tr := NewTrace(io.Discard)
	rep := &report.Report{}
	rep.Run.StartNS = 1000
	if err := tr.Begin(rep); err != nil {
		t.Fatal(err)
	}
	size := uint64(4096)
	c := &report.Call{Symbol: "cuMemAlloc_v2", Operation: "allocation", PID: 7, TID: 8, StartNS: 2000, EndNS: 2500, Args: report.Args{Size: &size}}
	failed := *c
	failed.Result, failed.ResultName = 2, "CUDA_ERROR_OUT_OF_MEMORY"
	for _, c := range []*report.Call{c, &failed} {
		if err := tr.Call(c); err != nil { // names the thread, interns the names
			t.Fatal(err)
		}
	}
	allocs := testing.AllocsPerRun(1000, func() {
		c.StartNS += 1000
		c.EndNS += 1000
		if err := tr.Call(c); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per call, want 0", allocs)
	}
}

// A query that failed is never a zero: no counter value, one instant per
// change of status.
func TestProtoUnavailableSamples(t *testing.T) {
	d := protoOf(t, nestedRun(t))
	var notAvail []string
	for _, in := range d.instants {
		if strings.Contains(in.name, "not available") {
			notAvail = append(notAvail, in.name)
			if in.track != gpuUUID(0) || in.args["status"] == nil {
				t.Errorf("instant %+v", in)
			}
		}
	}
	want := []string{"GPU 0 bar1 not available: nvmlDeviceGetBAR1MemoryInfo NVML_ERROR_NOT_SUPPORTED",
		"GPU 0 bar1 not available: nvmlDeviceGetBAR1MemoryInfo NVML_ERROR_UNKNOWN"}
	if !slices.Equal(notAvail, want) {
		t.Errorf("unavailable instants %q, want %q", notAvail, want)
	}
	bar1 := d.counters[d.trackByName(t, "GPU 0 BAR1 used")]
	if len(bar1) != 1 || bar1[0].value != 2<<20 || bar1[0].ts != 9_000_000_000+400_020 {
		t.Errorf("BAR1 used values %v, want only the one successful sample", bar1)
	}
	if fb := d.counters[d.trackByName(t, "GPU 0 framebuffer used")]; len(fb) != 4 || fb[0].value != 0 || fb[3].value != 3<<30 {
		t.Errorf("framebuffer used values %v", fb)
	}
}

// A run without samples still exports a trace that decodes.
func TestProtoWithoutSamples(t *testing.T) {
	d := protoOf(t, runfixture.BuildRunNoFailure(t))
	if len(d.slices) != 1 || len(d.counters) != 0 {
		t.Errorf("%d slices, %d counter tracks", len(d.slices), len(d.counters))
	}
}

// The export streams and stays small: bytes per call, allocation per call
// and heap growth are bounded.
func TestProtoScale(t *testing.T) {
	const extra = 200_000
	path := runfixture.BuildRun(t, extra)
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	cw := &countWriter{}
	start := time.Now()
	tr, err := exportProto(path, cw)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	runtime.ReadMemStats(&ms1)
	if tr.Bytes() != int64(cw.n) {
		t.Errorf("Bytes() = %d, %d written", tr.Bytes(), cw.n)
	}
	per := float64(cw.n) / extra
	t.Logf("pftrace: %d calls, %d bytes (%.1f B/call) in %v, %d bytes allocated", extra, cw.n, per, took, ms1.TotalAlloc-ms0.TotalAlloc)
	if per > 40 {
		t.Errorf("%.1f bytes per call, want at most 40", per)
	}
	if a := float64(ms1.TotalAlloc-ms0.TotalAlloc) / extra; a > 512 {
		t.Errorf("export allocates %.0f bytes per call; it should stream", a)
	}
	if ms1.HeapInuse > ms0.HeapInuse+64<<20 {
		t.Errorf("heap grew by %d bytes during the export", ms1.HeapInuse-ms0.HeapInuse)
	}
}
