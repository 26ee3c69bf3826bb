package recorder

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/retrivium/forensic/jobenv"
	"github.com/retrivium/forensic/store"
)

func i64(v int64) *int64 { return &v }
func iptr(v int) *int    { return &v }

// The narrowest (monotonic, realtime, monotonic) bracket is kept, paired
// at its midpoint, with half its width as the uncertainty.
func TestPairClocksKeepsNarrowestBracket(t *testing.T) {
	tests := []struct {
		name     string
		reads    []int64 // mono, real, mono, mono, real, mono, ...
		wantMono int64
		wantReal int64
		wantUnc  int64
	}{
		{"second is narrowest", []int64{100, 5000, 180, 200, 6000, 210, 300, 7000, 360}, 205, 6000, 5},
		{"odd width rounds the uncertainty up", []int64{100, 5000, 103}, 101, 5000, 2},
		{"first of equal widths", []int64{100, 5000, 110, 200, 6000, 210}, 105, 5000, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			i := 0
			clock := func(id int32) int64 {
				want := int32(unix.CLOCK_MONOTONIC)
				if i%3 == 1 {
					want = unix.CLOCK_REALTIME
				}
				if id != want {
					t.Fatalf("read %d: clock %d, want %d", i, id, want)
				}
				v := tt.reads[i]
				i++
				return v
			}
			mono, real, unc := pairClocks(clock, len(tt.reads)/3)
			if mono != tt.wantMono || real != tt.wantReal || unc != tt.wantUnc {
				t.Errorf("got (%d, %d, ±%d), want (%d, %d, ±%d)", mono, real, unc, tt.wantMono, tt.wantReal, tt.wantUnc)
			}
		})
	}
}

func TestAdjtimexUnits(t *testing.T) {
	tests := []struct {
		name       string
		state      int
		tx         unix.Timex
		wantState  string
		wantFlags  []string
		wantUnsync bool
		wantOffset int64
	}{
		{"unsynchronized, as a machine without a daemon", unix.TIME_ERROR,
			unix.Timex{Maxerror: 16000000, Esterror: 16000000, Status: unix.STA_UNSYNC},
			"TIME_ERROR", []string{"STA_UNSYNC"}, true, 0},
		{"synchronized, microsecond offset", unix.TIME_OK,
			unix.Timex{Maxerror: 1500, Esterror: 20, Status: unix.STA_PLL, Offset: -7},
			"TIME_OK", []string{"STA_PLL"}, false, -7000},
		{"nanosecond offset under STA_NANO", unix.TIME_OK,
			unix.Timex{Maxerror: 1500, Status: unix.STA_PLL | unix.STA_NANO, Offset: -7},
			"TIME_OK", []string{"STA_PLL", "STA_NANO"}, false, -7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := adjtimexOf(tt.state, &tt.tx)
			if a.State != tt.wantState || !reflect.DeepEqual(a.StatusFlags, tt.wantFlags) || a.Unsync != tt.wantUnsync {
				t.Errorf("got %+v", a)
			}
			if a.MaxErrorNS != tt.tx.Maxerror*1000 || a.EstErrorNS != tt.tx.Esterror*1000 {
				t.Errorf("maxerror %d ns, esterror %d ns: want the kernel's microseconds times 1000", a.MaxErrorNS, a.EstErrorNS)
			}
			if a.OffsetNS != tt.wantOffset {
				t.Errorf("offset %d ns, want %d", a.OffsetNS, tt.wantOffset)
			}
		})
	}
}

func reading(mono, real, unc, maxerr int64, unsync bool) *store.ClockReading {
	state := "TIME_OK"
	if unsync {
		state = "TIME_ERROR"
	}
	return &store.ClockReading{MonotonicNS: mono, RealtimeNS: real, PairUncertaintyNS: unc,
		Adjtimex: &store.Adjtimex{State: state, Unsync: unsync, MaxErrorNS: maxerr}}
}

func TestClockErrorBounds(t *testing.T) {
	const s = int64(1e9)
	tests := []struct {
		name      string
		start     *store.ClockReading
		stop      *store.ClockReading
		wantStart *int64
		wantRun   *int64
	}{
		{"synchronized, no step: larger maxerror plus larger pairing uncertainty",
			reading(10*s, 1000*s, 300, 2_000_000, false), reading(70*s, 1060*s, 500, 5_000_000, false),
			i64(2_000_300), i64(5_000_500)},
		{"a step of the wall clock during the run is added in full",
			reading(10*s, 1000*s, 300, 2_000_000, false), reading(70*s, 1060*s-40_000, 300, 2_000_000, false),
			i64(2_000_300), i64(2_040_300)},
		{"unsynchronized at the start: no bound",
			reading(10*s, 1000*s, 300, 16_000_000_000, true), reading(70*s, 1060*s, 300, 2_000_000, false),
			nil, nil},
		{"unsynchronized at the stop: no bound for the run",
			reading(10*s, 1000*s, 300, 2_000_000, false), reading(70*s, 1060*s, 300, 2_000_000, true),
			i64(2_000_300), nil},
		{"adjtimex failed", &store.ClockReading{AdjtimexError: "EPERM"}, reading(70*s, 1060*s, 300, 2_000_000, false),
			nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := readingError(tt.start)
			if !reflect.DeepEqual(got, tt.wantStart) || (got == nil) != (why != "") {
				t.Errorf("start bound %v (%q), want %v", deref(got), why, deref(tt.wantStart))
			}
			run, why := runClockError(tt.start, tt.stop)
			if !reflect.DeepEqual(run, tt.wantRun) || (run == nil) != (why != "") {
				t.Errorf("run bound %v (%q), want %v", deref(run), why, deref(tt.wantRun))
			}
		})
	}
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestParseChrony(t *testing.T) {
	tests := []struct {
		name      string
		out       string
		err       error
		wantRef   string
		wantOff   *int64
		wantDisp  *int64
		wantSync  *bool
		wantError bool
	}{
		{"synchronized",
			"A9FEA97B,169.254.169.123,4,1589196003.425232053,0.000001445,-0.000002089,0.000016181,-15.637,-0.001,0.014,0.000326498,0.000125389,1029.6,Normal\n",
			nil, "169.254.169.123", i64(1445), i64(125389), boolPtr(true), false},
		{"not synchronised",
			"00000000,,0,0.000000000,0.000000000,0.000000000,0.000000000,0.000,0.000,0.000,1.000000000,1.000000000,0.0,Not synchronised\n",
			nil, "", i64(0), i64(1_000_000_000), boolPtr(false), false},
		{"daemon not running", "", errors.New("exit status 1"), "", nil, nil, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := parseChrony(tt.out, tt.err)
			if d.Reference != tt.wantRef || !reflect.DeepEqual(d.OffsetNS, tt.wantOff) ||
				!reflect.DeepEqual(d.RootDispersionNS, tt.wantDisp) || !reflect.DeepEqual(d.Synchronized, tt.wantSync) ||
				(d.Error != "") != tt.wantError {
				t.Errorf("got %+v", d)
			}
		})
	}
}

func boolPtr(b bool) *bool { return &b }

func TestParsePMC(t *testing.T) {
	out := `sending: GET TIME_STATUS_NP
	90e2ba.fffe.0b5e4d-0 seq 0 RESPONSE MANAGEMENT TIME_STATUS_NP
		master_offset              -23
		ingress_time               1510335577862573838
		cumulativeScaledRateOffset +0.000000000
		gmPresent                  true
		gmIdentity                 001d7b.fffe.8f8bc4
`
	tests := []struct {
		name      string
		out       string
		wantOff   *int64
		wantSync  *bool
		wantError bool
	}{
		{"response", out, i64(-23), boolPtr(true), false},
		{"no ptp4l", "sending: GET TIME_STATUS_NP\n", nil, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := parsePMC(tt.out, nil)
			if !reflect.DeepEqual(d.OffsetNS, tt.wantOff) || !reflect.DeepEqual(d.Synchronized, tt.wantSync) || (d.Error != "") != tt.wantError {
				t.Errorf("got %+v", d)
			}
		})
	}
}

func TestPodUIDFromCgroup(t *testing.T) {
	tests := []struct{ cgroup, want string }{
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0f6d3165_57b3_475b_507a_1eb3ece4b22a.slice/cri-containerd-abc.scope",
			"0f6d3165-57b3-475b-507a-1eb3ece4b22a"},
		{"/kubepods/besteffort/pod0f6d3165-57b3-475b-507a-1eb3ece4b22a/0123456789ab", "0f6d3165-57b3-475b-507a-1eb3ece4b22a"},
		{"/system.slice/pod0f6d3165-57b3-475b-507a-1eb3ece4b22a.scope", ""}, // not a kubelet path
		{"/user.slice/user-0.slice/session-1.scope", ""},
		{"", ""},
	}
	for _, tt := range tests {
		if got := podUIDFromCgroup(tt.cgroup); got != tt.want {
			t.Errorf("%q: pod %q, want %q", tt.cgroup, got, tt.want)
		}
	}
}

func TestJobOf(t *testing.T) {
	dir := t.TempDir()
	nsFile := filepath.Join(dir, "namespace")
	os.WriteFile(nsFile, []byte("training\n"), 0o644)
	pod := "/kubepods/burstable/pod0f6d3165-57b3-475b-507a-1eb3ece4b22a/c1"
	tests := []struct {
		name   string
		env    map[string]string
		cgroup string
		want   *store.Job
	}{
		{"nothing names a job", map[string]string{"CUDA_VISIBLE_DEVICES": "0"}, "/user.slice", nil},
		{"torchrun", map[string]string{"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "TORCHELASTIC_RUN_ID": "j1", "CUDA_VISIBLE_DEVICES": "1"}, "",
			&store.Job{Source: "s", Env: map[string]string{"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "TORCHELASTIC_RUN_ID": "j1"},
				Rank: iptr(3), RankFrom: "RANK", WorldSize: iptr(8), WorldSizeFrom: "WORLD_SIZE", LocalRank: iptr(1), JobID: "j1"}},
		{"slurm without torch variables", map[string]string{"SLURM_PROCID": "5", "SLURM_NTASKS": "16", "SLURM_JOB_ID": "4242"}, "",
			&store.Job{Source: "s", Env: map[string]string{"SLURM_PROCID": "5", "SLURM_NTASKS": "16", "SLURM_JOB_ID": "4242"},
				Rank: iptr(5), RankFrom: "SLURM_PROCID", WorldSize: iptr(16), WorldSizeFrom: "SLURM_NTASKS", JobID: "4242"}},
		{"a malformed RANK falls through to the next variable", map[string]string{"RANK": "x", "OMPI_COMM_WORLD_RANK": "2"}, "",
			&store.Job{Source: "s", Env: map[string]string{"RANK": "x", "OMPI_COMM_WORLD_RANK": "2"}, Rank: iptr(2), RankFrom: "OMPI_COMM_WORLD_RANK"}},
		{"pod from the cgroup, namespace from the service account", map[string]string{}, pod,
			&store.Job{Source: "s", PodUID: "0f6d3165-57b3-475b-507a-1eb3ece4b22a", PodNamespace: "training"}},
		{"pod name and namespace from the environment", map[string]string{"POD_NAME": "w-0", "POD_NAMESPACE": "ml", "JOB_COMPLETION_INDEX": "0"}, pod,
			&store.Job{Source: "s", Env: map[string]string{"POD_NAME": "w-0", "POD_NAMESPACE": "ml", "JOB_COMPLETION_INDEX": "0"},
				Rank: iptr(0), RankFrom: "JOB_COMPLETION_INDEX", PodUID: "0f6d3165-57b3-475b-507a-1eb3ece4b22a", PodName: "w-0", PodNamespace: "ml"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := jobOf("s", tt.env, tt.cgroup, nsFile)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestJobOfProcesses(t *testing.T) {
	proc := func(env map[string]string) store.Process { return store.Process{Env: env} }
	tests := []struct {
		name      string
		procs     []store.Process
		wantNil   bool
		wantRank  *int
		wantRanks []int
		wantWorld *int
	}{
		{"no job variables", []store.Process{proc(nil), proc(map[string]string{"CUDA_VISIBLE_DEVICES": "0"})}, true, nil, nil, nil},
		{"one node, four ranks", []store.Process{
			proc(map[string]string{"RANK": "6", "WORLD_SIZE": "8"}), proc(map[string]string{"RANK": "4", "WORLD_SIZE": "8"}),
			proc(map[string]string{"RANK": "5", "WORLD_SIZE": "8"}), proc(map[string]string{"RANK": "7", "WORLD_SIZE": "8"}),
			proc(nil)}, false, nil, []int{4, 5, 6, 7}, iptr(8)},
		{"one rank in several processes (a launcher and its worker)", []store.Process{
			proc(map[string]string{"RANK": "2", "WORLD_SIZE": "4"}), proc(map[string]string{"RANK": "2", "WORLD_SIZE": "4"})},
			false, iptr(2), []int{2}, iptr(4)},
		{"disagreeing world sizes are not reported", []store.Process{
			proc(map[string]string{"RANK": "0", "WORLD_SIZE": "4"}), proc(map[string]string{"RANK": "1", "WORLD_SIZE": "2"})},
			false, nil, []int{0, 1}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := jobOfProcesses(tt.procs)
			if (j == nil) != tt.wantNil {
				t.Fatalf("job %+v, want nil: %v", j, tt.wantNil)
			}
			if j == nil {
				return
			}
			if !reflect.DeepEqual(j.Rank, tt.wantRank) || !reflect.DeepEqual(j.Ranks, tt.wantRanks) || !reflect.DeepEqual(j.WorldSize, tt.wantWorld) {
				t.Errorf("got rank %v ranks %v world %v", j.Rank, j.Ranks, j.WorldSize)
			}
		})
	}
}

// readIdentity reads the machine and boot from their files and pairs the
// clocks; absent time daemons leave no record.
func TestReadIdentity(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.MkdirAll(filepath.Join(root, "proc/sys/kernel/random"), 0o755)
	os.WriteFile(filepath.Join(root, "etc/machine-id"), []byte("3d1219c7c4c5404aaa1f6d2a48adfda4\n"), 0o644)
	os.WriteFile(filepath.Join(root, "proc/sys/kernel/random/boot_id"), []byte("b040292d-0229-4b8d-8ceb-a2b8ec73b7d5\n"), 0o644)
	var n int64
	src := identitySources{root: root,
		hostname: func() (string, error) { return "node-7", nil },
		kernel:   func() string { return "6.18.0" },
		clock: func(id int32) int64 {
			n += 10
			if id == unix.CLOCK_REALTIME {
				return 1_700_000_000_000_000_000 + n
			}
			return n
		},
		adjtimex: func(tx *unix.Timex) (int, error) {
			tx.Maxerror, tx.Status = 2000, unix.STA_PLL
			return unix.TIME_OK, nil
		},
		tool: func(ctx context.Context, name string, args ...string) (string, error) {
			if name == "chronyc" {
				return "A9FEA97B,ntp.local,3,1.0,0.000000100,0,0,0,0,0,0.000200000,0.000100000,64,Normal", nil
			}
			return "", errToolAbsent
		},
	}
	id := readIdentity(context.Background(), src, nil)
	if id.Hostname != "node-7" || id.MachineID != "3d1219c7c4c5404aaa1f6d2a48adfda4" ||
		id.BootID != "b040292d-0229-4b8d-8ceb-a2b8ec73b7d5" || id.Kernel != "6.18.0" {
		t.Errorf("identity %+v", id)
	}
	c := id.Clock
	if c.PairUncertaintyNS != 10 || c.RealtimeNS-c.MonotonicNS != 1_700_000_000_000_000_000 {
		t.Errorf("clock pair %+v: want realtime paired with the bracket midpoint, ±10", c)
	}
	if c.ErrorNS == nil || *c.ErrorNS != 2_000_010 {
		t.Errorf("bound %v (%s), want maxerror 2 ms + 10 ns", deref(c.ErrorNS), c.ErrorWhy)
	}
	if c.Chrony == nil || c.Chrony.Reference != "ntp.local" || c.PTP != nil {
		t.Errorf("chrony %+v, ptp %+v: want chrony parsed, no PTP record for an absent pmc", c.Chrony, c.PTP)
	}
}

// Every job variable fleet reads is stored with each process.
func TestAllowlistKeepsJobVariables(t *testing.T) {
	for _, v := range jobenv.Variables() {
		if !slices.Contains(EnvAllowlist, v) {
			t.Errorf("%s is not in EnvAllowlist: a process's rank would be lost", v)
		}
	}
	env := FilterEnv([]string{"RANK=3", "WORLD_SIZE=8", "HF_TOKEN=secret", "SLURM_JOB_ID=9"})
	if !reflect.DeepEqual(env, map[string]string{"RANK": "3", "WORLD_SIZE": "8", "SLURM_JOB_ID": "9"}) {
		t.Errorf("filtered %v", env)
	}
}

// A process in a pod's cgroup names the pod: its namespace and name from
// its environment, else from the pod's own files as the kubelet writes
// them; a process in no pod names none.
func TestPodOf(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "var/run/secrets/kubernetes.io/serviceaccount"), 0o755)
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, "var/run/secrets/kubernetes.io/serviceaccount/namespace"), []byte("training\n"), 0o644)
	os.WriteFile(filepath.Join(root, "etc/hostname"), []byte("llama-7b-worker-0\n"), 0o644)
	const cg = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0f1e2d3c_4b5a_6978_8a9b_0c1d2e3f4a5b.slice/cri-containerd-abc.scope"
	const uid = "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
	tests := []struct {
		name   string
		root   string
		cgroup string
		env    map[string]string
		want   *store.Pod
	}{
		{"files", root, cg, nil, &store.Pod{UID: uid, Namespace: "training", Name: "llama-7b-worker-0"}},
		{"environment first", root, cg, map[string]string{"POD_NAME": "p", "POD_NAMESPACE": "ns"}, &store.Pod{UID: uid, Namespace: "ns", Name: "p"}},
		{"files unreadable", filepath.Join(root, "gone"), cg, nil, &store.Pod{UID: uid}},
		{"not in a pod", root, "/user.slice/user-0.slice/session-1.scope", nil, nil},
	}
	for _, tt := range tests {
		if got := podOf(tt.root, tt.cgroup, tt.env); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: podOf = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
