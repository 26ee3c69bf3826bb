#!/usr/bin/env bash
# make bench: run every benchmark and write the figures to BENCHMARKS.md.
#
#   sudo make bench                  full settings (about 10 minutes)
#   sudo BENCH_QUICK=1 make bench    every duration shortened: a smoke run
#
# Needs root (the benchmarks load eBPF programs), Go, and bpftrace (installed
# by scripts/deps.sh when missing). The harness is Go programs under bench/
# (one per measurement, each printing a markdown section),
# `go test -bench BenchmarkCommit ./store` and
# `go test -bench BenchmarkLargeRun ./bench/largerun`; this script runs them in order
# and assembles BENCHMARKS.md. Intermediate files go to build/bench/; the
# large ones are deleted at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $(id -u) != 0 ]]; then
	echo "make bench: run as root (it loads eBPF programs): sudo make bench" >&2
	exit 1
fi
export CGO_CFLAGS=${CGO_CFLAGS:--Wno-deprecated-declarations}
GO=${GO:-go}
quick=${BENCH_QUICK:-0}
work=build/bench
bin=$work/bin
out=BENCHMARKS.md
mkdir -p "$work" "$bin"

scripts/deps.sh bench # bpftrace
# The workloads use root's files: under sudo they must not run as the user.
unset SUDO_UID SUDO_GID SUDO_USER

echo "== building the harness and the forensic binary it measures"
# Its own forensic, built from the same tree at the same moment as the
# harness (whose in-process profile must match it), so that nothing that
# rebuilds bin/forensic during the run changes what is measured.
$GO build -trimpath -o "$bin/forensic" ./cmd/forensic
export BENCH_FORENSIC=$bin/forensic
for p in overhead probecost storm genrun analyzer faildelay flight; do
	$GO build -o "$bin/$p" "./bench/$p"
done
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git status --porcelain --untracked-files=no -- ':!BENCHMARKS.md' 2>/dev/null | awk '{print $2}' | tr '\n' ' ')

load() { cut -d' ' -f1-3 /proc/loadavg; }
busy() { # processes using at least 5% of a CPU over one second (top's second frame)
	top -b -c -n 2 -d 1 -w 250 2>/dev/null | awk '/^top -/ {n++} n == 2 && $1 ~ /^[0-9]+$/ && $9 + 0 >= 5 {
		cmd = ""; for (i = 12; i <= NF; i++) cmd = cmd " " $i
		printf "%5.1f%% CPU  pid %s %s\n", $9, $1, substr(cmd, 1, 140)
	}' | grep -v -e ' top -b' | head -6 || true
}
load_start=$(load)
busy_start=$(busy)
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
t0=$(date +%s)
echo "== machine load at start: $load_start"
if [[ -n $busy_start ]]; then
	echo "   busy processes:"; echo "$busy_start" | sed 's/^/     /'
fi

export BENCH_SUMMARY=$work/summary.md
: >"$BENCH_SUMMARY"
sections=()
failed=()

# fail SECTION TITLE OUT LOG STATUS: a benchmark that did not finish gets a
# section saying so (with the end of its output) instead of figures.
fail() {
	local sec=$1 title=$2 out=$3 log=$4 status=$5
	failed+=("$sec")
	echo "!! $title failed (status $status); see $log" >&2
	{
		echo "## $sec. $title: FAILED"
		echo
		echo "The benchmark exited with status $status before it finished; the end of its output:"
		echo
		echo '```'
		grep -m1 -A12 -E '^(panic|fatal error|.*: (exit status|error))' "$log" 2>/dev/null || tail -n 15 "$log"
		echo '```'
		echo
	} >"$out"
	echo "| $sec | $title | did not finish (status $status) | **failed** |" >>"$BENCH_SUMMARY"
}

# section SECTION TITLE OUT CMD...: run a harness program whose stdout is
# the section's markdown; its stderr (progress) is shown and kept.
section() {
	local sec=$1 title=$2 out=$3
	shift 3
	local log=${out%.md}.log status=0
	"$@" >"$out" 2> >(tee "$log" >&2) || status=$?
	wait
	if ((status != 0)); then
		fail "$sec" "$title" "$out" "$log" "$status"
	fi
	sections+=("$out")
}

echo "== 1. per-call overhead (bench/overhead, bench/probecost)"
section 1 "Per-call overhead" "$work/1-overhead.md" "$bin/overhead"
if [[ ! " ${failed[*]} " =~ " 1 " ]]; then
	status=0
	"$bin/probecost" >>"$work/1-overhead.md" 2> >(tee "$work/1-probecost.log" >&2) || status=$?
	wait
	((status == 0)) || fail 1 "Per-call overhead (probecost)" "$work/1-probecost.md" "$work/1-probecost.log" "$status"
	((status == 0)) || sections+=("$work/1-probecost.md")
fi
# The experiments on the probes: measured once, kept as written.
sections+=(bench/experiments.md)

echo "== 2, 3. call storms: sustained rate, recorder CPU and memory, bytes per event (bench/storm)"
section 2 "Sustained call rate, recorder resources" "$work/2-storm.md" "$bin/storm"

echo "== 3. writer benchmark (go test -bench BenchmarkCommit ./store)"
benchtime=2000000x
[[ $quick == 1 ]] && benchtime=200000x
status=0
$GO test -run '^$' -bench '^BenchmarkCommit$' -benchtime "$benchtime" -count 1 ./store >"$work/commit.txt" 2>&1 || status=$?
cat "$work/commit.txt"
if ((status != 0)); then
	fail 3 "Writer benchmark (go test -bench BenchmarkCommit ./store)" "$work/3-commit.md" "$work/commit.txt" "$status"
else
	{
		echo "### Writer: \`go test -bench BenchmarkCommit ./store\`"
		echo
		echo "\`store/writer_bench_test.go\`: one \`Writer.Commit\` per simulated 100 ms flush holding that flush's call events"
		echo "(the 6-symbol mix, fields decoded by the symbol table) and one NVML round (3 samples), into a fresh run.db;"
		echo "\`-benchtime $benchtime\` events. batch=1000 is 10,000 calls/s, batch=25000 is 250,000 calls/s."
		echo "ns/event includes bbolt's fsyncs; bytes/event is the final file's size over the events; written B/event is"
		echo "what the writer handed to write(2) per event (/proc/self/io wchar)."
		echo
		echo "| benchmark | ns/event | events/s | bytes/event (file) | written B/event | B/op | allocs/op |"
		echo "|---|---:|---:|---:|---:|---:|---:|"
		awk '/^BenchmarkCommit/ {
			name=$1; sub(/^BenchmarkCommit\//, "", name); sub(/-[0-9]+$/, "", name)
			for (i = 3; i < NF; i += 2) v[$(i+1)] = $i
			printf "| %s | %s | %.0f | %s | %s | %s | %s |\n", name, v["ns/event"], v["events/s"], v["bytes/event"], v["written-B/event"], v["B/op"], v["allocs/op"]
		}' "$work/commit.txt"
		echo
		echo "The writer writes 3.5 to 6 times the event payload (about 24 B/event, section 3 above): every commit rewrites"
		echo "the last leaf of the events bucket, and bbolt never splits a node of four keys or fewer, so that leaf holds"
		echo "two to four earlier chunks (each a whole 100 ms flush) that are copied again with the new one."
		echo
		echo '```'
		grep -E '^(goos|goarch|cpu|Benchmark)' "$work/commit.txt"
		echo '```'
		echo
	} >"$work/3-commit.md"
fi
sections+=("$work/3-commit.md")

echo "== 4. analyzer on large runs, export sizes (bench/genrun, bench/analyzer)"
# The main run (10M calls) and one ten times as long (100M calls, 3.9 GB):
# how analyze's time and memory grow. Both are deleted at the end.
calls=10000000 samples=100000
[[ $quick == 1 ]] && calls=1000000 samples=10000
big_calls=$((calls * 10)) big_samples=$((samples * 10))
status=0
gen() { # gen OUT CALLS SAMPLES: writes the run and prints how it was made
	local t0 ms
	t0=$(date +%s%N)
	"$bin/genrun" -o "$1" -calls "$2" -samples "$3" 2> >(tee -a "$work/4-genrun.log" >&2) || return
	wait
	ms=$((($(date +%s%N) - t0) / 1000000))
	echo " (\`genrun -calls $2 -samples $3\`, written in $((ms / 1000)).$(((ms % 1000) / 100)) s)"
}
: >"$work/4-genrun.log"
gen_small=$(gen "$work/big.db" $calls $samples) && gen_large=$(gen "$work/huge.db" $big_calls $big_samples) || status=$?
if ((status != 0)); then
	fail 4 "Analyzer (genrun)" "$work/4-analyzer.md" "$work/4-genrun.log" "$status"
	sections+=("$work/4-analyzer.md")
else
	section 4 "Analyzer" "$work/4-analyzer.md" "$bin/analyzer" -db "$work/big.db" -scale "$work/huge.db" \
		-cpuprofile "$work/analyze.pprof" -gen "$gen_small" -scale-gen "$gen_large"
fi
rm -f "$work/big.db" "$work/huge.db" "$work"/{big,huge}-trace.{json,pftrace} "$work"/{big,huge}-report.html

# largerun_section OUT CALLS: the markdown of `go test -bench LargeRun`'s
# output OUT, and its targets' rows in the summary (at 10M calls only).
largerun_section() {
	local out=$1 calls=$2
	echo "## 4b. Analyze and diff of ${calls}-call runs"
	echo
	echo "\`go test -bench BenchmarkLargeRun ./bench/largerun\` (\`bench/largerun/largerun_test.go\`): two runs written by"
	echo "\`bench/internal/runsynth\` (the workload of \`bench/genrun\`, $calls calls and $((calls / 100)) NVML samples each,"
	echo "seed 1): a failing one, and a good one without its failed allocations, so the two make the same calls until the"
	echo "first failure, 90% of the way in. Each operation runs in a child process of the benchmark, as the command"
	echo "would (its \`--json\` output discarded): \`analyze\` of the failing run (headroom and budget are part of every"
	echo "analysis), \`diff\` of the good run and the failing one. Wall is ns/op; CPU and peak RSS (maxrss: heap, stacks"
	echo "and the pages of run.db that bbolt maps) come from the child's getrusage; heap is its Go heap at the end"
	echo "(runtime.MemStats.HeapSys, which does not shrink). A wall time well above the CPU time means other work"
	echo "shared the CPUs (the load in the machine table); diff analyzes the runs side by side, so on 2 idle CPUs its"
	echo "wall time is about half its CPU time."
	echo
	echo "| operation | wall | user + sys CPU | peak RSS (maxrss) | Go heap (HeapSys) | allocated |"
	echo "|---|---:|---:|---:|---:|---:|"
	awk '/^BenchmarkLargeRun\// {
		name=$1; sub(/^BenchmarkLargeRun\//, "", name); sub(/-[0-9]+$/, "", name)
		for (i = 3; i < NF; i += 2) v[$(i+1)] = $i
		printf "| %s | %.2f s | %.2f s | %.1f MiB | %.1f MiB | %.0f MiB |\n", name, v["ns/op"] / 1e9, v["cpu-s/op"], v["maxrss-MiB"], v["heapsys-MiB"], v["alloc-MiB/op"]
	}' "$out"
	echo
	echo '```'
	grep -E '^(goos|goarch|cpu|Benchmark|    largerun_test)' "$out"
	echo '```'
	echo
	((calls == 10000000)) || return 0
	awk '/^BenchmarkLargeRun\// {
		for (i = 3; i < NF; i += 2) v[$(i+1)] = $i
		s = v["ns/op"] / 1e9
		if ($1 ~ /analyze/) {
			printf "| 4b | 10M-call `analyze` under 6 s (headroom and budget) | %.2f s | %s |\n", s, s < 6 ? "met" : "**missed**"
			printf "| 4b | 10M-call `analyze` under 160 MiB peak (maxrss) | %.1f MiB | %s |\n", v["maxrss-MiB"], v["maxrss-MiB"] < 160 ? "met" : "**missed**"
		} else if ($1 ~ /diff/) {
			printf "| 4b | `diff` of two 10M-call runs under 15 s | %.2f s (peak %.1f MiB) | %s |\n", s, v["maxrss-MiB"], s < 15 ? "met" : "**missed**"
		}
	}' "$out" >>"$BENCH_SUMMARY"
}

echo "== 4b. analyze and diff of 10M-call runs (go test -bench LargeRun ./bench/largerun)"
# The figures the analysis and diff are held to: analyze of a 10M-call
# run under 6 s and 160 MiB, diff of two under 15 s. Each operation runs
# in a child process of the benchmark (its own maxrss); the run.db files
# live in the benchmark's temporary directory and are removed with it.
status=0
LARGERUN_CALLS=$calls TMPDIR=$work $GO test -run '^$' -bench '^BenchmarkLargeRun$' -benchtime 1x -count 1 -timeout 60m \
	./bench/largerun >"$work/largerun.txt" 2>&1 || status=$?
cat "$work/largerun.txt"
if ((status != 0)); then
	fail 4b "Analyze and diff of large runs (go test -bench LargeRun ./bench/largerun)" "$work/4b-largerun.md" "$work/largerun.txt" "$status"
else
	largerun_section "$work/largerun.txt" "$calls" >"$work/4b-largerun.md"
fi
sections+=("$work/4b-largerun.md")

echo "== 5. failure-to-sample delay (bench/faildelay)"
section 5 "Failure-to-sample delay" "$work/5-faildelay.md" "$bin/faildelay"

echo "== 6. flight mode: recorder CPU idle and under load, disk per hour, memory (bench/flight)"
section 6 "Flight mode" "$work/6-flight.md" "$bin/flight"

load_end=$(load)
busy_end=$(busy)
elapsed=$(($(date +%s) - t0))
finished=$(date -u +%Y-%m-%dT%H:%M:%SZ)

cpu_model=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
mem_total=$(awk '/^MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)
os_name=$(. /etc/os-release && echo "$PRETTY_NAME")
vm=$(systemd-detect-virt --vm 2>/dev/null || true)
container=$(systemd-detect-virt --container 2>/dev/null || true)
clocksource=$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null || echo unknown)
# What makes a call into the kernel and back (every BPF helper) cost more.
vulns=/sys/devices/system/cpu/vulnerabilities
mitigations=$(for v in spec_rstack_overflow retbleed spectre_v2; do
	[[ -r $vulns/$v ]] && printf '%s: %s; ' "$v" "$(cat "$vulns/$v")"
done)
usercopy=$( (zcat /proc/config.gz 2>/dev/null || cat "/boot/config-$(uname -r)" 2>/dev/null) | grep -m1 '^CONFIG_HARDENED_USERCOPY=' || true)
mode="full settings"
[[ $quick == 1 ]] && mode="BENCH_QUICK=1 (every duration shortened: a smoke run, not the reference figures)"

{
	echo "# Benchmarks"
	echo
	echo "Written by \`make bench\` (scripts/bench.sh) on $finished, $mode, in ${elapsed} s,"
	echo "from commit $commit${dirty:+ with uncommitted changes to: $dirty}."
	echo "Reproduce with \`sudo make bench\` (root: the benchmarks load eBPF programs); every tool used is public:"
	echo "the Go programs under \`bench/\`, \`go test -bench\`, Debian's bpftrace, /proc, and the simulated GPU that"
	echo "\`make\` builds (\`testdata/simgpu\`; no GPU is needed or used). The probes are attached to a private copy"
	echo "of the simulated libcuda (\`build/bench/lib/libcuda.so.1\`), so nothing else on the machine hits them."
	echo
	echo "## Machine"
	echo
	echo "| | |"
	echo "|---|---|"
	echo "| CPUs (\`nproc\`) | $(nproc) |"
	echo "| CPU model | $cpu_model |"
	echo "| memory | $mem_total |"
	echo "| kernel | $(uname -r) ($(uname -m)) |"
	echo "| OS | $os_name |"
	echo "| virtualization (systemd-detect-virt) | VM: ${vm:-none}; container: ${container:-none} |"
	echo "| clock source | $clocksource |"
	echo "| CPU mitigations (/sys/devices/system/cpu/vulnerabilities) | ${mitigations:-unknown} |"
	echo "| hardened usercopy (kernel config) | ${usercopy:-unknown} |"
	echo "| Go | $($GO version | awk '{print $3}') |"
	echo "| bpftrace | $(bpftrace --version 2>/dev/null | awk '{print $2}') |"
	echo "| load average (1, 5, 15 min) at start / end | $load_start / $load_end |"
	echo
	if [[ -n $busy_start$busy_end ]]; then
		echo "Other processes were using CPU while the benchmarks ran (figures may be perturbed; rerun \`make bench\` on a quiet machine):"
		echo
		echo '```'
		[[ -n $busy_start ]] && echo "at start:" && echo "$busy_start"
		[[ -n $busy_end ]] && echo "at end:" && echo "$busy_end"
		echo '```'
		echo
	else
		echo "No other process was using CPU at the start or the end of the run."
		echo
	fi
	echo "## Targets"
	echo
	echo "| § | target | measured | |"
	echo "|---|---|---|---|"
	cat "$BENCH_SUMMARY"
	echo
	echo "Where a target is missed, its section says by how much and why."
	echo
	echo "## Method"
	echo
	echo "- Workloads are \`simwork\` scripts (testdata/simgpu) against the simulated libcuda; the steps the benchmarks"
	echo "  use are \`mix N\` (6 hooked calls per iteration), \`paced RATE SECONDS [SIZE]\` (alloc/free pairs at a set rate)"
	echo "  and \`clock\` (prints CLOCK_MONOTONIC, so a workload times its own loop, excluding process start and probe attach)."
	echo "- forensic is the script's own build (\`build/bench/bin/forensic\`, built with the harness from the same tree)."
	echo "  \`forensic record\` runs with \`--libcuda build/bench/lib/libcuda.so.1 --libnvidia-ml build/simgpu/libnvidia-ml.so.1\`"
	echo "  and otherwise default flags unless a section says otherwise. Losses come from the run's stop record"
	echo "  (\`store.Open(run.db).Stop().Stats\`: Calls, Events, LostCalls)."
	echo "- Recorder CPU is utime+stime of the forensic process's own threads from /proc/PID/stat, read after it exited"
	echo "  and before it was reaped (waitid WNOWAIT), never rusage of a waited child (that would include the workload)."
	echo "  Recorder memory is VmHWM / VmRSS from /proc/PID/status. Analyzer runs have no children: their peak is"
	echo "  wait4's maxrss."
	echo
	for s in "${sections[@]}"; do
		cat "$s"
	done
} >"$out"
echo "== wrote $out (${elapsed} s; load at start $load_start, at end $load_end)"
if ((${#failed[@]} > 0)); then
	echo "make bench: section(s) ${failed[*]} did not finish; BENCHMARKS.md says so" >&2
	exit 1
fi
