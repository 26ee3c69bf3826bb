package parquetexport

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/store"
)

const (
	monoStart = int64(5_000_000_000_000)
	wallStart = int64(1_764_000_000_000_000_000)
)

func u64(v uint64) *uint64 { return &v }
func ip(v int) *int        { return &v }

// fixture writes a small run.db through the store's writer: two processes
// (one naming rank 3), one GPU, a successful and a failed allocation, a
// free, and one NVML round of which the BAR1 query failed.
func fixture(t *testing.T, dir, host, id string, stop bool) string {
	t.Helper()
	return writeFixture(t, dir, host, id, stop, true)
}

// writeFixture writes the fixture; without identity it is a run.db as
// forensic wrote it before runs described themselves.
func writeFixture(t *testing.T, dir, host, id string, stop, identity bool) string {
	t.Helper()
	path := filepath.Join(dir, id+".db")
	names := make([]string, len(cuda.Symbols))
	for i, s := range cuda.Symbols {
		names[i] = s.Name
	}
	errNS := int64(2_000_300)
	run := store.RunInfo{ID: id, Clock: store.ClockName, ClockStart: monoStart, WallStart: time.Unix(0, wallStart+999),
		Hostname: host, Mode: "spawn", Command: []string{"python3", "train.py"},
		Identity: &store.Identity{Hostname: host, MachineID: "m-" + host, BootID: "b-" + host, Kernel: "6.18.0",
			Job:   &store.Job{Source: "spawn", Rank: ip(3), WorldSize: ip(4), JobID: "job-1"},
			Clock: &store.ClockReading{MonotonicNS: monoStart, RealtimeNS: wallStart, ErrorNS: &errNS}}}
	if !identity {
		run.Identity = nil
	}
	w, err := store.Create(path, store.CreateOptions{}, run, names)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	sym := func(name string) uint16 { _, id, _ := cuda.Lookup(name); return uint16(id) }
	code := 0
	b := &store.Batch{Stacks: map[int32][]store.Frame{}}
	uuid := "GPU-aaaa"
	b.Inventory = &store.Inventory{GPUs: []store.GPUInventory{{Index: 0, UUID: store.Obs[string]{Value: &uuid}}}}
	b.Processes = []store.Process{
		{PID: 100, Start: monoStart, Root: true, Comm: "python3", Args: []string{"python3", "train.py"},
			Env: map[string]string{"RANK": "3", "WORLD_SIZE": "4"},
			// Matched as the only GPU: the process revealed no UUID.
			Devices: []store.DeviceMap{{Ordinal: 0, GPU: 0, Method: "single-gpu"}},
			Exit:    &store.Exit{Time: monoStart + 9e9, Code: &code}},
		{PID: 101, PPID: 100, Start: monoStart + 1e6, Comm: "worker"},
	}
	b.Events = []store.Event{
		{Symbol: sym("cuMemAlloc_v2"), PID: 100, TID: 100, Start: monoStart + 1000, End: monoStart + 2000,
			Fields: cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr, Size: 1 << 30, Ptr: 0x7f0000000000}, Ctx: 1, Dev: 0, Stack: -1},
		{Symbol: sym("cuMemAlloc_v2"), PID: 100, TID: 101, Start: monoStart + 3000, End: monoStart + 5000, Result: 2,
			Fields: cuda.Fields{Has: cuda.FieldSize, Size: 96 << 30}, Ctx: 1, Dev: 0, Stack: 7},
		{Symbol: sym("cuMemFree_v2"), PID: 101, TID: 101, Start: monoStart + 6000, End: monoStart + 7000,
			Fields: cuda.Fields{Has: cuda.FieldTarget, Target: 0x7f0000000000}, Dev: -1, Stack: -1},
	}
	ok := store.Status{Name: "NVML_SUCCESS"}
	gpu := store.GPURef{Index: 0, UUID: "GPU-aaaa", PCIBusID: "00000000:41:00.0"}
	b.Samples = []store.Sample{
		{Seq: 1, Round: 1, GPU: gpu, Kind: store.KindFramebuffer, Scope: store.ScopeDevice, API: "nvmlDeviceGetMemoryInfo_v2",
			Status: ok, Start: monoStart + 4000, End: monoStart + 4500, Total: u64(80 << 30), Reserved: u64(1 << 30),
			Used: u64(79 << 30), Free: u64(0), Triggers: []store.Trigger{{PID: 100, TID: 101}}},
		{Seq: 2, Round: 1, GPU: gpu, Kind: store.KindBAR1, Scope: store.ScopeAperture, API: "nvmlDeviceGetBAR1MemoryInfo",
			Status: store.Status{Code: 3, Name: "NVML_ERROR_NOT_SUPPORTED"}, Start: monoStart + 4600, End: monoStart + 4700},
		{Seq: 3, Round: 1, GPU: gpu, Kind: store.KindProcesses, Scope: store.ScopeProcess, API: "nvmlDeviceGetComputeRunningProcesses_v3",
			Status: ok, Start: monoStart + 4800, End: monoStart + 4900,
			Processes: []store.ProcUsage{{PID: 100, Used: u64(40 << 30)}, {PID: 101, Used: nil}}},
	}
	if err := w.Commit(b); err != nil {
		t.Fatal(err)
	}
	if stop {
		if err := w.Stop(store.StopInfo{Time: monoStart + 1e10, Reason: "workload-exited",
			Stats: store.Stats{Calls: 3, Events: 3}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func readRows[T any](t *testing.T, path string) []T {
	t.Helper()
	rows, err := parquet.ReadFile[T](path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return rows
}

func partFile(dir, table, host, run string) string {
	return filepath.Join(dir, table, "host="+host, "run="+run, PartFile)
}

func TestWriteTables(t *testing.T) {
	in := t.TempDir()
	out := t.TempDir()
	db := fixture(t, in, "node-a", "run-1", true)
	if err := Write(context.Background(), out, []string{db}, Options{}); err != nil {
		t.Fatal(err)
	}
	calls := readRows[callRow](t, partFile(out, TableCalls, "node-a", "run-1"))
	if len(calls) != 3 {
		t.Fatalf("%d call rows, want 3", len(calls))
	}
	c := calls[1]
	if c.Symbol != "cuMemAlloc_v2" || c.Operation != "allocation" || !c.Primary || c.ResultName != "CUDA_ERROR_OUT_OF_MEMORY" ||
		c.EndNS != wallStart+5000 || c.StartNS != wallStart+3000 || c.EndRunClockNS != monoStart+5000 ||
		c.Rank == nil || *c.Rank != 3 || c.GPU == nil || *c.GPU != 0 || *c.GPUUUID != "GPU-aaaa" ||
		*c.Size != 96<<30 || c.Ptr != nil || *c.StackID != 7 || c.TID != 101 {
		t.Errorf("failed call row %+v", c)
	}
	if c0 := calls[0]; c0.Size == nil || c0.Ptr == nil || *c0.Ptr != 0x7f0000000000 || c0.StackID != nil {
		t.Errorf("first call: size and pointer set, no stack: %+v", c0)
	}
	if c2 := calls[2]; c2.Rank != nil && *c2.Rank != 3 || c2.GPU != nil || c2.CUDADevice != nil || c2.Size != nil || *c2.Target != 0x7f0000000000 {
		t.Errorf("free in pid 101 (no device, rank from the run): %+v", c2)
	}
	fails := readRows[callRow](t, partFile(out, TableFailures, "node-a", "run-1"))
	if len(fails) != 1 || fails[0].Result != 2 || fails[0].EndNS != wallStart+5000 {
		t.Errorf("failures %+v", fails)
	}
	checkSamples(t, readRows[sampleRow](t, partFile(out, TableSamples, "node-a", "run-1")))
	procs := readRows[processRow](t, partFile(out, TableProcesses, "node-a", "run-1"))
	if len(procs) != 2 || *procs[0].Rank != 3 || *procs[0].WorldSize != 4 || *procs[0].ExitCode != 0 ||
		*procs[0].ExitNS != wallStart+9e9 || procs[1].Rank != nil || procs[1].ExitNS != nil {
		t.Errorf("processes %+v", procs)
	}
	runs := readRows[runRow](t, partFile(out, TableRuns, "node-a", "run-1"))
	if len(runs) != 1 {
		t.Fatalf("%d run rows", len(runs))
	}
	r := runs[0]
	if r.Calls != 3 || r.Failures != 1 || r.Samples != 9 || r.Processes != 2 || r.Ended != "clean" || *r.EndNS != wallStart+1e10 ||
		*r.ClockErrorNS != 2_000_300 || r.BootID != "b-node-a" || *r.Rank != 3 || *r.WorldSize != 4 || r.JobID != "job-1" ||
		r.StartNS != wallStart {
		t.Errorf("run row %+v", r)
	}
}

// One row per value: framebuffer's four fields, BAR1's failed query as
// three null rows with its status, one row per process.
func checkSamples(t *testing.T, rows []sampleRow) {
	t.Helper()
	type key struct {
		seq   int64
		field string
	}
	got := map[key]*int64{}
	for _, r := range rows {
		got[key{r.Seq, r.Field}] = r.Value
		if r.Seq == 2 && (r.Status != "NVML_ERROR_NOT_SUPPORTED" || r.View != "bar1" || r.Value != nil) {
			t.Errorf("failed BAR1 row %+v", r)
		}
		if r.Seq == 1 && (!r.Triggered || r.View != "framebuffer" || r.EndNS != wallStart+4500) {
			t.Errorf("framebuffer row %+v", r)
		}
	}
	want := []key{{1, "total"}, {1, "reserved"}, {1, "used"}, {1, "free"}, {2, "total"}, {2, "used"}, {2, "free"}, {3, "process_used"}}
	for _, k := range want {
		if _, ok := got[k]; !ok {
			t.Errorf("no row %v", k)
		}
	}
	if len(rows) != 9 {
		t.Errorf("%d sample rows, want 9 (4 + 3 + 2)", len(rows))
	}
	if v := got[key{1, "free"}]; v == nil || *v != 0 {
		t.Errorf("a free of 0 bytes is 0, not null: %v", v)
	}
}

func TestWriteRefusals(t *testing.T) {
	in := t.TempDir()
	a := fixture(t, in, "node-a", "run-1", true)
	b := fixture(t, in, "node-b", "run-2", false)
	tests := []struct {
		name    string
		prepare func(out string)
		runs    []string
		opt     Options
		wantErr error
	}{
		{"fresh directory, two hosts", func(string) {}, []string{a, b}, Options{}, nil},
		{"run exported before", func(out string) { Write(context.Background(), out, []string{a}, Options{}) },
			[]string{b, a}, Options{}, ErrExported},
		{"run exported before, overwrite", func(out string) { Write(context.Background(), out, []string{a}, Options{}) },
			[]string{b, a}, Options{Overwrite: true}, nil},
		{"the same run twice", func(string) {}, []string{a, a}, Options{}, ErrDuplicate},
		{"not a run", func(string) {}, []string{a, filepath.Join(in, "missing.db")}, Options{}, store.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := t.TempDir()
			tt.prepare(out)
			before := listFiles(t, out)
			err := Write(context.Background(), out, tt.runs, tt.opt)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr != nil && !reflect.DeepEqual(listFiles(t, out), before) {
				t.Errorf("a refused export changed the directory")
			}
			if tt.wantErr == nil {
				for _, tb := range Tables() {
					for _, p := range []string{partFile(out, tb, "node-a", "run-1"), partFile(out, tb, "node-b", "run-2")} {
						if _, err := os.Stat(p); err != nil {
							t.Errorf("missing %s", p)
						}
					}
				}
			}
		})
	}
}

func listFiles(t *testing.T, dir string) []string {
	var out []string
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// A run whose recorder was killed (no stop record) ends at the last thing
// it recorded: here its workload's exit, 9 s in, long after its last call.
func TestWriteAbruptRun(t *testing.T) {
	in, out := t.TempDir(), t.TempDir()
	db := fixture(t, in, "node-b", "run-2", false)
	if err := Write(context.Background(), out, []string{db}, Options{}); err != nil {
		t.Fatal(err)
	}
	r := readRows[runRow](t, partFile(out, TableRuns, "node-b", "run-2"))[0]
	if r.Ended != "abrupt" || r.StopReason != nil || r.EndNS == nil || *r.EndNS != wallStart+9e9 || r.LostCalls != nil {
		t.Errorf("abrupt run row %+v", r)
	}
}

// A cancelled export leaves no file of the run.
func TestWriteCancelled(t *testing.T) {
	in, out := t.TempDir(), t.TempDir()
	db := fixture(t, in, "node-a", "run-1", true)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Write(ctx, out, []string{db}, Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if files := listFiles(t, out); len(files) != 0 {
		t.Errorf("files left: %v", files)
	}
}

func TestHiveEscape(t *testing.T) {
	tests := []struct{ in, want string }{
		{"node-7.cluster.local", "node-7.cluster.local"},
		{"1764000000-4242", "1764000000-4242"},
		{"a/b=c:d", "a%2Fb%3Dc%3Ad"},
		{"50%", "50%25"},
		{"", "__HIVE_DEFAULT_PARTITION__"},
	}
	for _, tt := range tests {
		if got := hiveEscape(tt.in); got != tt.want {
			t.Errorf("%q: %q, want %q", tt.in, got, tt.want)
		}
	}
}

// A file written before runs described themselves converts with its
// clock_start_ns and wall_start, has no bound, and its rank comes from its
// processes' environments.
func TestWriteOldRun(t *testing.T) {
	in, out := t.TempDir(), t.TempDir()
	db := writeFixture(t, in, "node-c", "run-3", true, false)
	if err := Write(context.Background(), out, []string{db}, Options{}); err != nil {
		t.Fatal(err)
	}
	r := readRows[runRow](t, partFile(out, TableRuns, "node-c", "run-3"))[0]
	if r.ClockErrorNS != nil || r.ClockErrorWhy == "" || r.BootID != "" || r.Rank != nil || r.ClockRealtimeNS != wallStart+999 {
		t.Errorf("old run row %+v", r)
	}
	calls := readRows[callRow](t, partFile(out, TableCalls, "node-c", "run-3"))
	if calls[0].EndNS != wallStart+999+2000 || calls[0].Rank == nil || *calls[0].Rank != 3 || calls[2].Rank != nil {
		t.Errorf("old run calls: end %d, ranks %v %v", calls[0].EndNS-wallStart, calls[0].Rank, calls[2].Rank)
	}
}

// A call's gpu_uuid is its GPU's UUID as NVML gives it (what the samples
// carry), whatever revealed the match; null, never "", when unknown.
func TestCallGPUUUID(t *testing.T) {
	x := &runExport{uuids: map[int]string{0: "GPU-aaaa"}}
	for _, tc := range []struct {
		name string
		d    store.DeviceMap
		want string
	}{
		{"matched without a UUID", store.DeviceMap{GPU: 0, Method: "single-gpu"}, "GPU-aaaa"},
		{"a MIG instance's UUID", store.DeviceMap{GPU: 0, UUID: "MIG-bbbb", Method: "uuid"}, "GPU-aaaa"},
		{"not in the inventory, UUID revealed", store.DeviceMap{GPU: 1, UUID: "GPU-cccc", Method: "uuid"}, "GPU-cccc"},
		{"not in the inventory, a MIG UUID", store.DeviceMap{GPU: 1, UUID: "MIG-bbbb", Method: "uuid"}, ""},
		{"not in the inventory, none revealed", store.DeviceMap{GPU: 1, Method: "order-pci-bus-id"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := x.uuidOf(tc.d); got != tc.want {
				t.Errorf("uuidOf(%+v) = %q, want %q", tc.d, got, tc.want)
			}
		})
	}
	row := callRow{}
	v := callVals{}
	x.procs = newProcIndex([]store.Process{{PID: 1, Devices: []store.DeviceMap{{Ordinal: 0, GPU: 1, Method: "order-pci-bus-id"}}}}, store.RunInfo{})
	x.fillCall(&row, &v, &store.Event{PID: 1, Dev: 0, Stack: -1}, map[string]symbolFacts{})
	if row.GPU == nil || *row.GPU != 1 || row.GPUUUID != nil {
		t.Errorf("gpu %v, gpu_uuid %v: want GPU 1 and a null UUID", row.GPU, row.GPUUUID)
	}
}
