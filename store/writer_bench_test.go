package store

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/retrivium/forensic/cuda"
)

// mixEvents returns n call events the way the recorder stores them for the
// simulated workload's `mix` loop: cuMemAlloc_v2 (64 KiB..4 MiB),
// cuMemAllocAsync, cuMemFreeAsync, cuMemAllocHost_v2, cuMemFreeHost,
// cuMemFree_v2, on four threads of one process, with fields decoded by the
// symbol table from the registers and out-parameters the probes capture.
func mixEvents(tb testing.TB, n int, t0 int64) []Event {
	tb.Helper()
	names := []string{"cuMemAlloc_v2", "cuMemAllocAsync", "cuMemFreeAsync", "cuMemAllocHost_v2", "cuMemFreeHost", "cuMemFree_v2"}
	syms := make([]*cuda.Symbol, len(names))
	ids := make([]uint16, len(names))
	for i, name := range names {
		s, id, ok := cuda.Lookup(name)
		if !ok {
			tb.Fatalf("%s is not in the symbol table", name)
		}
		syms[i], ids[i] = s, uint16(id)
	}
	const pid = 4242
	out := make([]Event, 0, n)
	t := t0
	var dev, async, host uint64 = 0x1000000000000, 0x1000800000000, 0x7f3a00000000
	for i := 0; len(out) < n; i++ {
		k := i % len(names)
		it := uint64(i / len(names))
		tid := uint32(pid + (it % 4))
		var raw cuda.Raw
		raw.InOK = true
		switch k {
		case 0: // cuMemAlloc_v2(&p, size)
			raw.Args = [6]uint64{0x7ffd5a3c1e08, uint64(64<<10) << (it % 7)}
			binary.LittleEndian.PutUint64(raw.OutA[:], dev+it*(4<<20))
		case 1: // cuMemAllocAsync(&p, 1 MiB, stream 0)
			raw.Args = [6]uint64{0x7ffd5a3c1e10, 1 << 20, 0}
			binary.LittleEndian.PutUint64(raw.OutA[:], async+it*(1<<20))
		case 2: // cuMemFreeAsync(p, stream 0)
			raw.Args = [6]uint64{async + it*(1<<20), 0}
		case 3: // cuMemAllocHost_v2(&h, 64 KiB)
			raw.Args = [6]uint64{0x7ffd5a3c1e18, 64 << 10}
			binary.LittleEndian.PutUint64(raw.OutA[:], host+(it%64)*(64<<10))
		case 4: // cuMemFreeHost(h)
			raw.Args = [6]uint64{host + (it%64)*(64<<10)}
		case 5: // cuMemFree_v2(p)
			raw.Args = [6]uint64{dev + it*(4<<20)}
		}
		raw.OutAOK = true
		start := t + 1800
		end := start + 1100 + int64(i%5)*300
		t = end
		out = append(out, Event{Symbol: ids[k], PID: pid, TID: tid, Start: start, End: end,
			Fields: syms[k].Decode(&raw), Ctx: 1, Dev: 0, Stack: -1})
	}
	return out
}

// writtenBytes reads this process's wchar (bytes passed to write calls)
// from /proc/self/io; false where there is no such file.
func writtenBytes() (int64, bool) {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, false
	}
	var v int64
	for _, l := range strings.Split(string(data), "\n") {
		if _, err := fmt.Sscanf(l, "wchar: %d", &v); err == nil {
			return v, true
		}
	}
	return 0, false
}

func benchSymbols() []string {
	names := make([]string, len(cuda.Symbols))
	for i, s := range cuda.Symbols {
		names[i] = s.Name
	}
	return names
}

// roundSamples is one NVML round of one GPU as the sampler stores it.
func roundSamples(round uint64, t int64) []Sample {
	total, reserved, used, free := uint64(16<<30), uint64(512<<20), uint64(3<<30), uint64(16<<30-512<<20-3<<30)
	b1t, b1u, b1f := uint64(256<<20), uint64(4<<20), uint64(252<<20)
	pu := uint64(3 << 30)
	gpu := GPURef{Index: 0, UUID: "GPU-b0ae225f-1d3a-d2cc-f557-bca7789e4f53", PCIBusID: "00000000:41:00.0"}
	return []Sample{
		{Round: round, GPU: gpu, Kind: KindFramebuffer, Scope: ScopeDevice, API: "nvmlDeviceGetMemoryInfo_v2",
			Struct: "nvmlMemory_v2_t", Start: t, End: t + 40000, Total: &total, Reserved: &reserved, Used: &used, Free: &free},
		{Round: round, GPU: gpu, Kind: KindBAR1, Scope: ScopeAperture, API: "nvmlDeviceGetBAR1MemoryInfo",
			Struct: "nvmlBAR1Memory_t", Start: t + 40000, End: t + 60000, Total: &b1t, Used: &b1u, Free: &b1f},
		{Round: round, GPU: gpu, Kind: KindProcesses, Scope: ScopeProcess, API: "nvmlDeviceGetComputeRunningProcesses_v3",
			Struct: "nvmlProcessInfo_v2_t", Start: t + 60000, End: t + 90000, Processes: []ProcUsage{{PID: 4242, Used: &pu}}},
	}
}

// BenchmarkCommit measures the writer the way the recorder drives it: one
// Commit per 100 ms flush holding that flush's call events and one NVML
// round (three samples). One op is one event. batch=1000 is 10,000 calls/s,
// batch=25000 250,000 calls/s (the simulated workload's storm rate). It
// reports ns/event (= ns/op), events/s, the bytes per event of the
// resulting file and the bytes per event handed to write(2) (wchar);
// run it with a fixed count (-benchtime 2000000x) so the file is large
// enough for the size figure to mean something.
func BenchmarkCommit(b *testing.B) {
	for _, per := range []int{1000, 25000} {
		b.Run(fmt.Sprintf("batch=%d", per), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "run.db")
			w, err := Create(path, CreateOptions{}, testRun(), benchSymbols())
			if err != nil {
				b.Fatal(err)
			}
			pool := mixEvents(b, 6*per, 1_000_000)
			span := pool[len(pool)-1].End - pool[0].Start + 2000
			batch := &Batch{Stacks: map[int32][]Frame{}}
			var round uint64
			wchar0, wcharOK := writtenBytes()
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; {
				b.StopTimer()
				k := min(per, b.N-done)
				shift := int64(done/len(pool)) * span
				batch.Reset()
				for i := 0; i < k; i++ {
					e := pool[(done+i)%len(pool)]
					e.Start += shift
					e.End += shift
					batch.Events = append(batch.Events, e)
				}
				round++
				batch.Samples = append(batch.Samples, roundSamples(round, batch.Events[0].Start)...)
				b.StartTimer()
				if err := w.Commit(batch); err != nil {
					b.Fatal(err)
				}
				done += k
			}
			b.StopTimer()
			if err := w.Stop(StopInfo{Reason: "workload-exited"}); err != nil {
				b.Fatal(err)
			}
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
			st, err := os.Stat(path)
			if err != nil {
				b.Fatal(err)
			}
			sec := b.Elapsed().Seconds()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/event")
			b.ReportMetric(float64(b.N)/sec, "events/s")
			b.ReportMetric(float64(st.Size())/float64(b.N), "bytes/event")
			if wchar1, ok := writtenBytes(); ok && wcharOK {
				// What the writer handed to write(2), per event: with the
				// file's bytes/event, the write amplification.
				b.ReportMetric(float64(wchar1-wchar0)/float64(b.N), "written-B/event")
			}
		})
	}
}
