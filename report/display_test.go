package report

import (
	"slices"
	"testing"
)

// Ranks read in numeric order, consecutive ones contracted, and a long
// list keeps its ends around "…" after the count.
func TestRankRanges(t *testing.T) {
	for _, tt := range []struct {
		ranks []int
		most  int
		want  string
	}{
		{[]int{3}, 0, "rank 3"},
		{[]int{10, 2, 1, 0, 100}, 0, "ranks 0–2, 10, 100"},
		{[]int{4, 5}, 0, "ranks 4, 5"},
		{[]int{0, 1, 2, 4, 6, 8, 10, 12, 13, 14}, 4, "10 ranks: 0–2, 4, …, 10, 12–14"},
		{[]int{0, 1, 2, 4}, 4, "ranks 0–2, 4"},
	} {
		if got := RankRangesAtMost(tt.ranks, tt.most); got != tt.want {
			t.Errorf("RankRangesAtMost(%v, %d) = %q, want %q", tt.ranks, tt.most, got, tt.want)
		}
	}
}

// A process is named by its command line; a cut list says so; without
// arguments, its executable.
func TestCommandLine(t *testing.T) {
	for _, tt := range []struct {
		p    ProcessInfo
		want string
	}{
		{ProcessInfo{Exe: "/usr/bin/python3.11", Args: []string{"python3", "worker.py", "--shard", "1"}}, "python3 worker.py --shard 1"},
		{ProcessInfo{Exe: "/usr/bin/python3.11", Args: []string{"python3", "a.py"}, ArgsCut: true}, "python3 a.py …"},
		{ProcessInfo{Exe: "/opt/app/serve"}, "/opt/app/serve"},
	} {
		if got := tt.p.CommandLine(); got != tt.want {
			t.Errorf("CommandLine(%+v) = %q, want %q", tt.p, got, tt.want)
		}
	}
	if got := ClipMiddle("python3 /very/long/path/train.py --batch 64", 20); got != "python3 /…--batch 64" {
		t.Errorf("ClipMiddle kept %q", got)
	}
}

// Clipping keeps the room it is given and marks the cut; ClipHead keeps
// two thirds of it for the start, ClipMiddle half.
func TestClipKeepsTheStartItPromises(t *testing.T) {
	s := "/srv/jobs/llm/build/bin/serve-llm/simwork init; use 0; alloc 3G; exit 1"
	for _, tt := range []struct {
		name string
		clip func(string, int) string
		want string
	}{
		{"middle", ClipMiddle, "/srv/jobs/llm/buil…0; alloc 3G; exit 1"},
		{"head", ClipHead, "/srv/jobs/llm/build/bin/…oc 3G; exit 1"},
		{"short enough", func(s string, n int) string { return ClipHead(s[:20], n) }, s[:20]},
	} {
		if got := tt.clip(s, 38); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

// Bystanders (no CUDA call, no device, not the workload, followed from
// their start, exit 0) are counted by executable once there are
// MinBystanders of them; any part in the GPU work, a bad exit or a late
// attach keeps a process listed.
func TestSplitBystanders(t *testing.T) {
	zero, one := 0, 1
	ok := &Exit{Code: &zero}
	by := func(pid uint32, exe string) ProcessInfo { return ProcessInfo{PID: pid, Exe: exe, Exit: ok} }
	worker := ProcessInfo{PID: 1, Exe: "/usr/bin/python3", Root: true, Calls: 9, Exit: ok}
	caller := ProcessInfo{PID: 2, Exe: "/usr/bin/python3", Calls: 3, Exit: ok}
	failed := ProcessInfo{PID: 3, Exe: "/bin/sh", Exit: &Exit{Code: &one}}
	late := ProcessInfo{PID: 4, Exe: "/bin/sh", AttachedLate: true, Exit: ok}
	running := ProcessInfo{PID: 5, Exe: "/bin/sleep"}
	shims := []ProcessInfo{by(10, "/usr/bin/bash"), by(11, "/root/.pyenv/libexec/pyenv"), by(12, "/root/.pyenv/libexec/pyenv"),
		by(13, "/usr/bin/readlink"), by(14, "/root/.pyenv/libexec/pyenv")}
	for _, tt := range []struct {
		name       string
		ps         []ProcessInfo
		wantListed []uint32
		want       []ExeCount
	}{
		{"a launcher's shell stays listed", []ProcessInfo{by(10, "/bin/sh"), worker}, []uint32{10, 1}, nil},
		{"a shim's helpers are counted", append([]ProcessInfo{worker, caller, failed, late, running}, shims...),
			[]uint32{1, 2, 3, 4, 5}, []ExeCount{{"pyenv", 3}, {"bash", 1}, {"readlink", 1}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			listed, counted := SplitBystanders(tt.ps)
			var pids []uint32
			for _, p := range listed {
				pids = append(pids, p.PID)
			}
			if !slices.Equal(pids, tt.wantListed) || !slices.Equal(counted, tt.want) {
				t.Errorf("listed %v, counted %v; want %v, %v", pids, counted, tt.wantListed, tt.want)
			}
		})
	}
}
