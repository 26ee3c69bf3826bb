package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retrivium/forensic/internal/e2eenv"
	"github.com/retrivium/forensic/internal/elfnote"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// copyLib puts a private copy of the simulated libcuda in a new directory.
func (w *world) copyLib(name string) string {
	w.t.Helper()
	data, err := os.ReadFile(simCUDA)
	if err != nil {
		w.t.Fatal(err)
	}
	p := filepath.Join(w.dir, name, "libcuda.so.1")
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, data, 0o755); err != nil {
		w.t.Fatal(err)
	}
	return p
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// libraries reads the attached libraries and the stop record of a run.
func libraries(t *testing.T, db string) ([]store.Library, *store.StopInfo) {
	t.Helper()
	r, err := store.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	libs, err := r.Libraries()
	if err != nil {
		t.Fatal(err)
	}
	stop, _ := r.Stop()
	if stop == nil {
		t.Fatal("no stop record")
	}
	return libs, stop
}

// checkAttached asserts that exactly the files want (by inode) were
// attached, each by the process that mapped it and with a hold time, and
// logs how long processes were held.
func checkAttached(t *testing.T, db string, want ...string) {
	t.Helper()
	libs, stop := libraries(t, db)
	inodes := map[uint64]string{}
	for _, p := range want {
		inodes[inode(t, p)] = p
	}
	for _, l := range libs {
		p, ok := inodes[l.Inode]
		if !ok {
			t.Errorf("attached %s (inode %d), which the workload never mapped", l.Path, l.Inode)
			continue
		}
		delete(inodes, l.Inode)
		if l.Error != "" || len(l.Attached) < 20 || l.MappedBy == 0 || l.Held <= 0 || l.BuildID == "" {
			t.Errorf("library %s: %+v; want attached, mapped by a pid, held", p, l)
		}
	}
	for _, p := range inodes {
		t.Errorf("%s was mapped by the workload but not attached", p)
	}
	if stop.Hold.Count < len(want) || stop.Hold.Max <= 0 {
		t.Errorf("hold figures %+v, want at least %d holds", stop.Hold, len(want))
	}
	t.Logf("holds: %d, median %v, max %v", stop.Hold.Count, time.Duration(stop.Hold.Median), time.Duration(stop.Hold.Max))
}

// Recorded without --libcuda, a workload that dlopens libcuda from a
// private directory (and a child of it that loads a third copy) has every
// call recorded, through probes on exactly the files it mapped, even while
// an unrelated process maps the usual simulated libcuda.
func TestAttachWhatTheWorkloadMaps(t *testing.T) {
	for _, tc := range []struct {
		name  string
		child bool
	}{{"dlopen from a private directory", false}, {"child loads a third copy", true}} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			unrelated := w.startWorkload(`init; use 0; alloc 1M; wait-signal`)
			if !waitFor(5*time.Second, func() bool { return mapsFile(unrelated.Process.Pid, simCUDA) }) {
				t.Fatal("the unrelated process did not map the simulated libcuda")
			}
			private := w.copyLib("private")
			w.env = append(w.env, "SIMWORK_LIBCUDA="+private)
			script := `init; use 0; alloc 1M; alloc-host 64K; free-all`
			want := []string{private}
			if tc.child {
				third := w.copyLib("third")
				script += `; fork { load ` + third + `; init; use 0; alloc 2M; free }; wait`
				want = append(want, third)
			}
			res := w.recordAs(foundAtMapping, nil, simwork, script)
			if res.code != 0 {
				t.Fatalf("exit %d: %s", res.code, res.stderr)
			}
			w.checkComplete(res.db)
			checkAttached(t, res.db, want...)
			if !strings.Contains(res.stderr, "forensic: attached "+private) {
				t.Errorf("the attached library is not printed:\n%s", res.stderr)
			}
			_, evs, _ := stored(t, res.db)
			for _, e := range evs {
				if e.PID == uint32(unrelated.Process.Pid) {
					t.Fatalf("a call of the unrelated process was recorded: %+v", e)
				}
			}
		})
	}
}

// mapsFile reports whether a process maps the file at path.
func mapsFile(pid int, path string) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "maps"))
	return err == nil && bytes.Contains(b, []byte(path))
}

// A scenario binary that links libcuda through its rpath, recorded
// without --libcuda: every call, the verdict, and the file it loaded.
func TestAttachThroughRpath(t *testing.T) {
	w := newWorld(t)
	res := w.recordAs(foundAtMapping, nil, filepath.Join(simDir, "scenarios", "weights_oom"))
	if res.code != 1 {
		t.Fatalf("exit %d, want the workload's 1: %s", res.code, res.stderr)
	}
	w.checkComplete(res.db)
	checkAttached(t, res.db, simCUDA)
	rep, _ := analyzeJSON(t, res.db)
	if rep.Attribution != report.AttrAllocation || deref(rep.Capacity) != string(report.CapFBExhausted) {
		t.Errorf("verdict %s / %s, want allocation / framebuffer-exhausted", rep.Attribution, deref(rep.Capacity))
	}
}

// A workload that never calls the driver gets one warning saying that no
// hooked call was seen and what it can mean.
func TestNoCallSeenWarns(t *testing.T) {
	w := newWorld(t)
	res := w.recordAs(foundAtMapping, nil, "/bin/true")
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	n := strings.Count(res.stderr, "no libcuda call was seen from the workload")
	if n != 1 || !strings.Contains(res.stderr, "did not attach to") || !strings.Contains(res.stderr, "before calling the driver") {
		t.Errorf("want one warning line about no call seen, got:\n%s", res.stderr)
	}
	w2 := newWorld(t)
	res = w2.recordAs(foundAtMapping, nil, simwork, "init; use 0; alloc 1M; free")
	// With calls, the summary counts them, and the line where the warning
	// would be says which libcuda was attached.
	total := 0
	for _, n := range w2.callsMade() {
		total += n
	}
	summary := fmt.Sprintf("forensic: recorded %d calls, ", total)
	if !regexp.MustCompile(`forensic: attached \S+libcuda\.so\.1 .*mapped by pid \d+`).MatchString(res.stderr) ||
		!strings.Contains(res.stderr, summary) {
		t.Errorf("want the attached libcuda and %q, got:\n%s", summary, res.stderr)
	}
}

// --all started while a process is already allocating and freeing in a
// loop: every run says the same thing, the process was attached late and
// the first failure cannot be established (the set of processes that had
// libcuda mapped is known before any event is read). Judged with --pid:
// --all records the whole host.
func TestAllAttachedLateEveryTime(t *testing.T) {
	w := newWorld(t)
	busy := w.startWorkload(`init; use 0; repeat 1000000 { alloc 1M; free; sleep 1 }`)
	if !waitFor(5*time.Second, func() bool { return mapsFile(busy.Process.Pid, simCUDA) }) {
		t.Fatal("the busy process did not map the simulated libcuda")
	}
	var verdicts []string
	for i := 0; i < 10; i++ {
		db := filepath.Join(w.dir, "all.db")
		cmd := binCommand(bin{w: w}, "record", "-o", db, "--force", "--all", "--duration", "400ms", "--libnvidia-ml", simNVML)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("run %d: %v\n%s", i, err, out)
		}
		// Judged for the busy process's job: --all also records whatever
		// else on the host uses libcuda meanwhile (other tests' workloads),
		// and their failures are theirs.
		r := runBin(t, bin{}, "analyze", "--json", "--pid", strconv.Itoa(busy.Process.Pid), db)
		var rep report.Report
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("run %d: analyze --pid: exit %d, %v: %s", i, r.code, err, r.stderr)
		}
		late, calls := false, uint64(0)
		for _, p := range rep.Processes {
			if p.PID == uint32(busy.Process.Pid) {
				late, calls = p.AttachedLate, p.Calls
			}
		}
		verdicts = append(verdicts, string(rep.Attribution))
		if rep.Attribution != report.AttrMissingEvidence || !late || calls == 0 {
			t.Errorf("run %d: attribution %s, busy process attached_late %v with %d calls; want missing-evidence, late, calls",
				i, rep.Attribution, late, calls)
		}
	}
	sort.Strings(verdicts)
	t.Logf("verdicts: %v", verdicts)
}

// The demo's stack (weights_oom, recorded as `make demo` does): every
// build id in the stored stacks resolves to a file, stored with the run
// when the stack was, whether or not the short-lived process was still
// there to be looked at; the libc frame's file among them. Each file
// named has that build id.
func TestStackBuildIDsResolved(t *testing.T) {
	w := newWorld(t)
	res := w.record(nil, filepath.Join(simDir, "scenarios", "weights_oom"))
	if res.code != 1 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	r, err := store.Open(res.db)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ids := map[string]bool{}
	stacks := map[int32]bool{}
	r.Events(func(e *store.Event) error {
		if e.Stack >= 0 {
			stacks[e.Stack] = true
		}
		return nil
	})
	for id := range stacks {
		frames, err := r.Stack(id)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range frames {
			if f.BuildID != "" {
				ids[f.BuildID] = true
			}
		}
	}
	files, err := r.Files()
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]store.File{}
	for _, f := range files {
		byID[f.BuildID] = f
	}
	libc := false
	for id := range ids {
		f, ok := byID[id]
		if !ok {
			t.Errorf("build id %s of a stored stack is not resolved (files: %+v)", id, files)
			continue
		}
		open := f.Path
		if f.Open != "" {
			open = f.Open
		}
		if got := elfnote.BuildID(open); got != id {
			t.Errorf("%s resolved to %s, whose build id is %q", id, open, got)
		}
		libc = libc || strings.HasPrefix(filepath.Base(f.Path), "libc.so")
	}
	if len(stacks) == 0 || len(ids) < 2 || !libc {
		t.Errorf("%d stacks, build ids %v, libc among them: %v; want the failure's stack down to libc", len(stacks), ids, libc)
	}
}

// --pid without --libcuda: the target, already running with libcuda
// mapped (attached late), loads a private copy, and a child it forks loads
// a third: both copies are attached as they are mapped and every call
// through them is recorded.
func TestRecordPIDAttachesWhatItMaps(t *testing.T) {
	w := newWorld(t)
	private, third := w.copyLib("private"), w.copyLib("third")
	target := w.startWorkload(`init; use 0; alloc 1M; wait-signal; load ` + private + `; init; use 0; alloc 2M;
		fork { load ` + third + `; init; use 0; alloc 3M }; wait; free-all`)
	if !waitFor(5*time.Second, func() bool { return mapsFile(target.Process.Pid, simCUDA) }) {
		t.Fatal("the target did not map the simulated libcuda")
	}
	rec, db, stderr := w.startRecorder("--pid", strconv.Itoa(target.Process.Pid))
	target.Process.Signal(syscall.SIGUSR1)
	waitExit(t, target, 20*time.Second)
	waitExit(t, rec, 20*time.Second)
	libs, stop := libraries(t, db)
	if stop.Reason != "target-exited" {
		t.Fatalf("stop %+v; recorder said:\n%s", stop, stderr)
	}
	byInode := map[uint64]store.Library{}
	for _, l := range libs {
		byInode[l.Inode] = l
	}
	for _, p := range []string{simCUDA, private, third} {
		if l, ok := byInode[inode(t, p)]; !ok || l.Error != "" {
			t.Errorf("%s not attached: %+v", p, libs)
		}
	}
	if l := byInode[inode(t, private)]; l.Held <= 0 || l.MappedBy != uint32(target.Process.Pid) {
		t.Errorf("private copy %+v: want held, mapped by the target", l)
	}
	if l := byInode[inode(t, simCUDA)]; l.Held != 0 {
		t.Errorf("the file already mapped at the start was held: %+v", l)
	}
	_, evs, _ := stored(t, db)
	var sizes []uint64
	for _, e := range evs {
		if e.Name == "cuMemAlloc_v2" {
			sizes = append(sizes, e.Size)
		}
	}
	sort.Slice(sizes, func(i, j int) bool { return sizes[i] < sizes[j] })
	if len(sizes) != 2 || sizes[0] != 2<<20 || sizes[1] != 3<<20 {
		t.Errorf("allocations recorded %v, want 2 MiB (private copy) and 3 MiB (the child's third copy)", sizes)
	}
	rep, _ := analyzeJSON(t, db)
	for _, p := range rep.Processes {
		if p.PID == uint32(target.Process.Pid) && !p.AttachedLate {
			t.Error("the target is not marked as attached late")
		}
	}
}

// Calls through unversioned, _v2 and _ptsz names are each recorded under
// their own name, with sizes read at the right width.
func TestVersionedNames(t *testing.T) {
	w := newWorld(t)
	res := w.record(nil, simwork, `init; use 0;
		alloc-v1 1M; alloc 2M; alloc-async 3M; alloc-async-ptsz 4M; alloc-pitch-v1 1000 4 4; alloc-pitch 1000 4 4;
		alloc-host-v1 64K; alloc-host 64K; host-register-v1 64K; host-register 64K; array-v1 16 16; array 16 16;
		pool-create; alloc-pool 1M; alloc-pool-ptsz 1M; gfx; gfx-ptsz; map-array; map-array-ptsz;
		ctx-v1 0; ctx-pop; ctx-v3 0; ctx-pop; uuid-v1 0; uuid 0; pci 0; free-all`)
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	w.checkComplete(res.db)
	_, evs, _ := stored(t, res.db)
	sizes := map[string]uint64{}
	for _, e := range evs {
		if e.Result == 0 && e.Has&1 != 0 {
			sizes[e.Name] = e.Size
		}
	}
	for sym, want := range map[string]uint64{"cuMemAlloc": 1 << 20, "cuMemAlloc_v2": 2 << 20,
		"cuMemAllocAsync": 3 << 20, "cuMemAllocAsync_ptsz": 4 << 20, "cuMemAllocPitch": 1024 * 4,
		"cuMemAllocPitch_v2": 1024 * 4, "cuMemAllocHost": 64 << 10, "cuArrayCreate": 16 * 16 * 4, "cuArrayCreate_v2": 16 * 16 * 4} {
		if sizes[sym] != want {
			t.Errorf("%s size %d, want %d", sym, sizes[sym], want)
		}
	}
}

// --pid on a process already running: its later calls and those of the
// child it starts are recorded; its earlier ones cannot be, and the
// analysis says so.
func TestRecordPID(t *testing.T) {
	w := newWorld(t)
	target := w.startWorkload(`init; use 0; alloc 1M; wait-signal; alloc 2M; fork { init; use 0; alloc 3M }; wait; free-all`)
	waitFor(5*time.Second, func() bool { return exists(w.state) })
	time.Sleep(200 * time.Millisecond) // let it make its first calls
	rec, db, stderr := w.startRecorder("--libcuda", simCUDA, "--pid", strconv.Itoa(target.Process.Pid))
	target.Process.Signal(syscall.SIGUSR1)
	waitExit(t, target, 20*time.Second)
	waitExit(t, rec, 20*time.Second)
	_, evs, stop := stored(t, db)
	if stop == nil || stop.Reason != "target-exited" {
		t.Fatalf("stop = %+v; recorder said:\n%s", stop, stderr)
	}
	var sizes []uint64
	pids := map[uint32]bool{}
	for _, e := range evs {
		pids[e.PID] = true
		if e.Name == "cuMemAlloc_v2" {
			sizes = append(sizes, e.Size)
		}
	}
	if len(sizes) != 2 || sizes[0] != 2<<20 || sizes[1] != 3<<20 {
		t.Errorf("allocations recorded %v, want the 2 MiB after attaching and the child's 3 MiB (not the 1 MiB before)", sizes)
	}
	if len(pids) != 2 || !pids[uint32(target.Process.Pid)] {
		t.Errorf("events from pids %v, want the target and its child", pids)
	}
	rep, _ := analyzeJSON(t, db)
	late := false
	for _, p := range rep.Processes {
		if p.PID == uint32(target.Process.Pid) {
			late = p.AttachedLate
		}
	}
	if !late {
		t.Error("the target is not marked as attached late")
	}
	if rep.Attribution != report.AttrMissingEvidence {
		t.Errorf("attribution %s: calls before attaching are unknown, want missing-evidence", rep.Attribution)
	}
}

// NVIDIA's real libcuda on a machine without a GPU: cuInit fails with
// CUDA_ERROR_NO_DEVICE and later calls with CUDA_ERROR_NOT_INITIALIZED.
// Every call is recorded with the real library's result code; NVIDIA's
// real NVML cannot start, which is recorded as evidence too.
func TestRealNVIDIALibraries(t *testing.T) {
	realCUDA := filepath.Join(nvidiaDir, "libcuda.so.1")
	realNVML := filepath.Join(nvidiaDir, "libnvidia-ml.so.1")
	e2eenv.Need(t, exists(realCUDA) && exists(realNVML), "NVIDIA's libraries are not in build/nvidia (run make nvidia-libs)")
	w := newWorld(t)
	db := filepath.Join(w.dir, "run.db")
	cmd := binCommand(bin{}, "record", "-o", db, "--libcuda", realCUDA, "--libnvidia-ml", realNVML, "--",
		simwork, `init; use 0; alloc 1M; alloc-host 1M; host-register 1M; vmm 2M; free-all`)
	cmd.Env = w.environ("SIMWORK_LIBCUDA=" + realCUDA)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("record: %v\n%s", err, out)
	}
	w.checkComplete(db)
	_, evs, _ := stored(t, db)
	results := map[string]int32{}
	for _, e := range evs {
		if e.Depth == 0 {
			results[e.Name] = e.Result
		}
	}
	if results["cuInit"] != 100 {
		t.Errorf("cuInit result %d, want 100 (CUDA_ERROR_NO_DEVICE)", results["cuInit"])
	}
	if results["cuMemAlloc_v2"] != 3 {
		t.Errorf("cuMemAlloc_v2 result %d, want 3 (CUDA_ERROR_NOT_INITIALIZED)", results["cuMemAlloc_v2"])
	}
	rep, _ := analyzeJSON(t, db)
	if rep.Attribution != report.AttrNotMemory || deref(rep.Capacity) != string(report.CapNotApplicable) {
		t.Errorf("verdict %s / %s, want not-memory / not-applicable", rep.Attribution, deref(rep.Capacity))
	}
	if rep.Cause == nil || rep.Cause.Symbol != "cuInit" || rep.Cause.ResultName != "CUDA_ERROR_NO_DEVICE" {
		t.Errorf("cause %+v, want the failed cuInit", rep.Cause)
	}
	if !strings.Contains(rep.Verdict, "cuInit") {
		t.Errorf("verdict does not name cuInit: %s", rep.Verdict)
	}
	nvml := false
	for _, m := range rep.Missing {
		if strings.Contains(m.What, "NVML did not initialize") && strings.Contains(m.What, "NVML_ERROR_") {
			nvml = true
		}
	}
	if !nvml {
		t.Errorf("the failed NVML initialization is not listed as missing: %+v", rep.Missing)
	}
	if len(rep.Coverage) != 1 || len(rep.Coverage[0].Hooked) < 60 || rep.Coverage[0].BuildID == "" {
		t.Errorf("coverage of the real libcuda: %+v", rep.Coverage)
	}
	r, err := store.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	inv, _ := r.Inventory()
	if inv == nil || inv.Init.Code == 0 || inv.Init.Name == "" {
		t.Errorf("inventory does not record the failed nvmlInit: %+v", inv)
	}
}
