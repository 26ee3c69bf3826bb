#!/usr/bin/env bash
# make gpu-check: validate forensic on a real NVIDIA GPU (docs/gpu-check.md).
#
#   sudo scripts/gpu-check.sh                 on a Linux host with an NVIDIA GPU
#   sudo scripts/gpu-check.sh --simulated     the same checks on the simulated GPU (build/simgpu)
#   scripts/gpu-check.sh --prepare            build bin/forensic and the helpers only (no root, no GPU)
#
# Options: -o FILE (report path), --no-build (use bin/forensic as it is),
# --simulated (or GPU_CHECK_SIM=1). The report goes to -o FILE, else
# $OUT/gpu-check-report.txt when OUT is set, else gpu-check-report.txt.
#
# Environment: GPU_CHECK_LIBCUDA (the libcuda to load and attach to;
# default: the loader's), GPU_CHECK_NVML (the libnvidia-ml to sample),
# GPU_CHECK_LIBCUDART (the CUDA runtime to load), GPU_CHECK_WORK (where
# run.db files and outputs go; default build/gpu-check/run),
# GPU_CHECK_HELPER (a built test/gpu/gpucheck), GPU_CHECK_BUDGET (seconds
# after which remaining checks are skipped; default 480), GPU_CHECK_HOLD_MS
# (how long workloads hold memory at a failure; default 500), CC, NVCC.
# The report is rewritten after every check, so a run killed from outside
# leaves the checks that finished.
#
# Nothing is downloaded. Every step runs under `timeout`; one failed check
# never stops the others. Exit status: 0 when no check failed, 1 when one
# did, 2 on a usage error.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
repo=$PWD
self=$repo/scripts/$(basename "$0")

sim=0
[[ ${GPU_CHECK_SIM:-0} == 1 ]] && sim=1
prepare=0
build=1
report=
while (($#)); do
	case $1 in
	--simulated) sim=1 ;;
	--prepare) prepare=1 ;;
	--no-build) build=0 ;;
	-o)
		[[ $# -ge 2 ]] || { echo "gpu-check: -o needs a file" >&2; exit 2; }
		report=$2
		shift
		;;
	-h | --help)
		sed -n '2,/^set -uo/p' "$self" | sed '$d; s/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "gpu-check: unknown argument $1 (see --help)" >&2
		exit 2
		;;
	esac
	shift
done
if [[ -z $report ]]; then
	report=${OUT:+$OUT/}gpu-check-report.txt
fi
[[ $report == /* ]] || report=$repo/$report

if ((!prepare)) && [[ $(id -u) != 0 ]]; then
	# Where sudo needs no password, become root with the same settings.
	if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		args=()
		((sim)) && args+=(--simulated)
		((build)) || args+=(--no-build)
		exec sudo -n -E "$self" "${args[@]}" -o "$report"
	fi
	echo "gpu-check: run as root (forensic record loads eBPF programs): sudo make gpu-check" >&2
	exit 2
fi

budget=${GPU_CHECK_BUDGET:-480}
t_start=$(date +%s)
tools=$repo/build/gpu-check/tools # what --prepare leaves for a machine without Go or a compiler
work=${GPU_CHECK_WORK:-$repo/build/gpu-check/run}
forensic=${FORENSIC_BIN:-bin/forensic} # make test-race sets FORENSIC_BIN
[[ $forensic == /* ]] || forensic=$repo/$forensic
# The workloads are built and run in root's work directory: under sudo,
# forensic record must not run them as the user who ran sudo.
unset SUDO_UID SUDO_GID SUDO_USER
simdir=$repo/build/simgpu

mkdir -p "$tools" "$(dirname "$report")" || exit 2
if ((!prepare)); then
	# The work directory is emptied first: only one this script made (or
	# the default, build/gpu-check/run).
	if [[ -n ${GPU_CHECK_WORK:-} && -d $work && -n $(ls -A "$work") && ! -e $work/.gpu-check-work ]]; then
		echo "gpu-check: $work exists and was not made by gpu-check; choose another GPU_CHECK_WORK" >&2
		exit 2
	fi
	rm -rf "$work"
	mkdir -p "$work/bin" || exit 2
	: >"$work/.gpu-check-work"
fi
body=${work}/report-body.txt
((prepare)) && body=/dev/null
: >"$body"

log() { printf '%s\n' "$*" >&2; }
# out appends to the report body.
out() { printf '%s\n' "$*" >>"$body"; }
# section starts a part of the report body.
section() {
	log "gpu-check: ${1%%:*} ($(elapsed) s)"
	out ""
	out "=============================================================================="
	out "== $*"
	out "=============================================================================="
}
# show appends a file to the report body under a heading.
show() { # title file
	out "--- $1"
	if [[ -s $2 ]]; then
		cat "$2" >>"$body"
		[[ -z $(tail -c1 "$2") ]] || out ""
	else
		out "(empty)"
	fi
}
# runlog runs a command under a timeout and appends the command, its
# output and its exit status to the report body. It returns the status.
runlog() { # limit cmd...
	local limit=$1
	shift
	local tmp=$work/.runlog.$$ rc
	out "\$ $*"
	timeout -k 5 "$limit" "$@" >"$tmp" 2>&1
	rc=$?
	cat "$tmp" >>"$body"
	((rc == 124 || rc == 137)) && out "(timed out after ${limit}s)"
	out "(exit status $rc)"
	rm -f "$tmp"
	return $rc
}

# Results: one "STATUS id detail" per check.
results=()
result() { # PASS|FAIL|SKIP id detail
	results+=("$(printf '%-4s  %-15s %s' "$1" "$2" "$3")")
	out ""
	out "RESULT: $(printf '%-4s  %-15s %s' "$1" "$2" "$3")"
	log "$(printf '%-4s  %-15s %s' "$1" "$2" "$3")"
}
# join prints its arguments after the first, separated by the first.
join() {
	local sep=$1 s
	shift
	s=$(printf "%s$sep" "$@")
	printf '%s\n' "${s%"$sep"}"
}
elapsed() { echo $(($(date +%s) - t_start)); }
# in_budget says whether there is time left for another check.
in_budget() { (($(elapsed) < budget)); }

# ---------------------------------------------------------------------------
# Build: bin/forensic, the helper, the workloads.
# ---------------------------------------------------------------------------
build_notes=()
export CGO_CFLAGS=${CGO_CFLAGS:--Wno-deprecated-declarations}
have_go=0
command -v go >/dev/null 2>&1 && have_go=1
# Offline: never reach for a module proxy or a toolchain download.
gobuild() { # output package
	GOPROXY=off GOTOOLCHAIN=local GOFLAGS=${GOFLAGS:-} timeout 300 go build -trimpath -o "$1" "$2"
}

if ((build && have_go)); then
	if msg=$(gobuild "$forensic" ./cmd/forensic 2>&1); then
		build_notes+=("bin/forensic: built now with $(go version | cut -d' ' -f3)")
	else
		build_notes+=("bin/forensic: go build failed, using the existing one: $(echo "$msg" | tail -3 | tr '\n' ' ')")
	fi
elif ((build)); then
	build_notes+=("bin/forensic: no Go here; using the existing one (build it with make on a machine with Go)")
else
	build_notes+=("bin/forensic: --no-build; using the existing one")
fi
if [[ -x $forensic ]]; then
	build_notes+=("bin/forensic: modified $(stat -c %y "$forensic" | cut -d. -f1), $(stat -c %s "$forensic") bytes, $("$forensic" version 2>&1)")
else
	build_notes+=("bin/forensic: MISSING (run make on a machine with Go, then copy bin/forensic here)")
fi

helper=${GPU_CHECK_HELPER:-}
if [[ -z $helper ]]; then
	if ((have_go)) && msg=$(gobuild "$tools/gpucheck" ./test/gpu/gpucheck 2>&1); then
		helper=$tools/gpucheck
		build_notes+=("helper: built test/gpu/gpucheck now")
	elif [[ -x $tools/gpucheck ]]; then
		helper=$tools/gpucheck
		build_notes+=("helper: the prepared build/gpu-check/tools/gpucheck")
	else
		build_notes+=("helper: none (no Go, not prepared); JSON is read with python3, the export checks are skipped")
	fi
else
	build_notes+=("helper: $helper (GPU_CHECK_HELPER)")
fi

cc=${CC:-}
if [[ -z $cc ]]; then
	for c in gcc cc clang; do
		command -v "$c" >/dev/null 2>&1 && { cc=$c; break; }
	done
fi
workloads=(drv_oom no_fail host_reg vmm overhead rt_oom)
# Compiled into bindir: the run's own directory, or tools/ for --prepare.
bindir=$work/bin
((prepare)) && bindir=$tools
if [[ -n $cc ]]; then
	bad=()
	for w in "${workloads[@]}"; do
		timeout 60 "$cc" -std=gnu11 -O1 -g -fno-omit-frame-pointer -Wall -o "$bindir/$w" "test/gpu/$w.c" -ldl \
			>"$bindir/$w.cc.log" 2>&1 || bad+=("$w")
	done
	if ((${#bad[@]})); then
		build_notes+=("workloads: $cc failed for ${bad[*]} (see $bindir/*.cc.log); the prepared ones in build/gpu-check/tools stand in where there are some")
	else
		build_notes+=("workloads: compiled with $cc ($("$cc" --version 2>/dev/null | head -1))")
	fi
	for w in "${bad[@]}"; do
		[[ -x $tools/$w && $bindir != "$tools" ]] && cp "$tools/$w" "$bindir/$w"
	done
else
	build_notes+=("workloads: no C compiler; using the prepared ones in build/gpu-check/tools")
	for w in "${workloads[@]}"; do
		[[ -x $tools/$w ]] && cp "$tools/$w" "$bindir/$w"
	done
fi
nvcc=${NVCC:-}
if [[ -z $nvcc ]]; then
	if command -v nvcc >/dev/null 2>&1; then
		nvcc=nvcc
	else
		for n in /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc; do
			[[ -x $n ]] && { nvcc=$n; break; }
		done
	fi
fi
if ((!sim)) && [[ -n $nvcc ]] && ((!prepare)); then
	if timeout 180 "$nvcc" -x cu -DGC_LINKED -o "$bindir/rt_oom_nvcc" test/gpu/rt_oom.c >"$bindir/rt_oom_nvcc.log" 2>&1; then
		build_notes+=("runtime workload: compiled with $nvcc (CUDA runtime linked statically)")
	else
		build_notes+=("runtime workload: $nvcc failed (see $bindir/rt_oom_nvcc.log)")
		rm -f "$bindir/rt_oom_nvcc"
	fi
fi

if ((prepare)); then
	printf '%s\n' "${build_notes[@]}"
	echo "prepared: bin/forensic and build/gpu-check/tools/ (copy both with the tree to a machine without Go or a compiler)"
	exit 0
fi

# ---------------------------------------------------------------------------
# The machine: where libcuda, NVML and the CUDA runtime are.
# ---------------------------------------------------------------------------
rec_flags=()
wl_env=()
libcuda=
if ((sim)); then
	if [[ ! -e $simdir/libcuda.so.1 ]] && command -v make >/dev/null 2>&1; then
		timeout 120 make --no-print-directory simgpu >"$work/simgpu-build.log" 2>&1
	fi
	libcuda=$simdir/libcuda.so.1
	rec_flags=(--libcuda "$libcuda" --libnvidia-ml "$simdir/libnvidia-ml.so.1")
	wl_env=("GPU_CHECK_LIBCUDA=$libcuda" "LD_LIBRARY_PATH=$simdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
	inv_flags=(--libnvidia-ml "$simdir/libnvidia-ml.so.1")
else
	inv_flags=()
	if [[ -n ${GPU_CHECK_LIBCUDA:-} ]]; then
		libcuda=$GPU_CHECK_LIBCUDA
		rec_flags+=(--libcuda "$libcuda")
		wl_env+=("GPU_CHECK_LIBCUDA=$libcuda")
	else
		libcuda=$(ldconfig -p 2>/dev/null | awk '$1 == "libcuda.so.1" && /x86-64/ {print $NF; exit}')
		if [[ -z $libcuda ]]; then
			# Not in the loader cache (a container, a driver unpacked by
			# hand): look where drivers and device plugins put it, and
			# name it to forensic and the workloads, which would not find
			# it either.
			for c in /usr/lib/x86_64-linux-gnu/libcuda.so.1 /usr/lib64/libcuda.so.1 /usr/local/nvidia/lib64/libcuda.so.1 \
				/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.1 /usr/local/cuda/compat/libcuda.so.1; do
				if [[ -e $c ]]; then
					libcuda=$c
					rec_flags+=(--libcuda "$c")
					wl_env+=("GPU_CHECK_LIBCUDA=$c")
					break
				fi
			done
		fi
	fi
	nvml=${GPU_CHECK_NVML:-}
	if [[ -z $nvml && -n $libcuda ]] && [[ $(ldconfig -p 2>/dev/null) != *"libnvidia-ml.so.1 "* ]]; then
		[[ -e $(dirname "$libcuda")/libnvidia-ml.so.1 ]] && nvml=$(dirname "$libcuda")/libnvidia-ml.so.1
	fi
	if [[ -n $nvml ]]; then
		rec_flags+=(--libnvidia-ml "$nvml")
		inv_flags=(--libnvidia-ml "$nvml")
	fi
fi

# find_cudart prints the path of a CUDA runtime library, if the machine
# has one: GPU_CHECK_LIBCUDART, the loader cache, the toolkit, Python's
# nvidia-cuda-runtime wheel, a bounded find.
find_cudart() {
	local c
	if [[ -n ${GPU_CHECK_LIBCUDART:-} ]]; then
		echo "$GPU_CHECK_LIBCUDART"
		return
	fi
	c=$(ldconfig -p 2>/dev/null | awk '$1 ~ /^libcudart\.so/ && /x86-64/ {print $NF; exit}')
	[[ -n $c ]] && { echo "$c"; return; }
	for c in /usr/local/cuda/lib64/libcudart.so* /usr/local/cuda-*/lib64/libcudart.so* \
		/usr/local/cuda*/targets/x86_64-linux/lib/libcudart.so* /usr/lib/x86_64-linux-gnu/libcudart.so*; do
		[[ -e $c ]] && { echo "$c"; return; }
	done
	if command -v python3 >/dev/null 2>&1; then
		c=$(timeout 20 python3 -c 'import nvidia.cuda_runtime as m, glob, os; print(sorted(glob.glob(os.path.join(list(m.__path__)[0], "lib", "libcudart.so*")))[0])' 2>/dev/null)
		[[ -n $c && -e $c ]] && { echo "$c"; return; }
	fi
	c=$(timeout 20 find /usr /opt /root /home -xdev -name 'libcudart.so*' -type f 2>/dev/null | head -1)
	[[ -n $c ]] && echo "$c"
}

# ---------------------------------------------------------------------------
# Reading results.
# ---------------------------------------------------------------------------
# summarize writes the key=value summary of an analyze --json file.
summarize() { # json summary
	if [[ -n $helper ]]; then
		timeout 30 "$helper" summary "$1" >"$2" 2>&1
	elif command -v python3 >/dev/null 2>&1; then
		timeout 30 python3 "$repo/test/gpu/summary.py" "$1" >"$2" 2>&1
	else
		echo "summary-error=no helper and no python3 to read JSON" >"$2"
		return 1
	fi
}
# sumval prints one value of a summary file.
sumval() { sed -n "s/^$2=//p" "$1" 2>/dev/null | head -n1; }
# gval prints one key of the workload's GROUND lines.
gval() { grep '^GROUND' "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n1; }

# record runs one workload under forensic record and analyzes it: files
# $work/NAME.{stdout,stderr,db,json,txt,sum}; sets rec_rc. Extra
# environment for the workload (and the simulator) before "--".
record() { # name limit [VAR=value...] -- cmd...
	local name=$1 limit=$2
	shift 2
	local env=()
	while (($#)) && [[ $1 != -- ]]; do
		env+=("$1")
		shift
	done
	shift
	if ((sim)); then
		env+=("SIMGPU_STATE=$work/$name.simgpu-state")
	fi
	local db=$work/$name.db t0 t1
	out "\$ ${env[*]} bin/forensic record -o $db --force ${rec_flags[*]} -- $*"
	t0=$(date +%s.%N)
	env "${wl_env[@]}" "${env[@]}" timeout -k 10 "$limit" "$forensic" record -o "$db" --force "${rec_flags[@]}" -- "$@" \
		>"$work/$name.stdout" 2>"$work/$name.stderr"
	rec_rc=$?
	t1=$(date +%s.%N)
	out "(exit status $rec_rc, $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}') s)"
	((rec_rc == 124 || rec_rc == 137)) && out "(timed out after ${limit}s)"
	show "stdout (workload and recorder)" "$work/$name.stdout"
	show "stderr" "$work/$name.stderr"
	if [[ -s $db ]]; then
		timeout 60 "$forensic" analyze --json "$db" >"$work/$name.json" 2>"$work/$name.analyze.err"
		timeout 60 "$forensic" analyze --no-color "$db" >"$work/$name.txt" 2>>"$work/$name.analyze.err"
		summarize "$work/$name.json" "$work/$name.sum"
	else
		echo "no run.db" >"$work/$name.analyze.err"
		: >"$work/$name.json"
		: >"$work/$name.txt"
		: >"$work/$name.sum"
	fi
	show "forensic analyze (errors)" "$work/$name.analyze.err"
	show "forensic analyze $db" "$work/$name.txt"
	show "forensic analyze --json $db" "$work/$name.json"
}

# calls_match compares the hooked calls the workload says it made with the
# calls forensic recorded; sets calls_detail; 0 when all agree.
calls_match() { # name
	local g=$work/$1.stdout s=$work/$1.sum kv sym n rec ok=0 parts=()
	for kv in $(grep '^GROUND' "$g" 2>/dev/null | tr ' ' '\n' | grep '^calls\.'); do
		sym=${kv#calls.}
		sym=${sym%%=*}
		n=${kv#*=}
		rec=$(sumval "$s" "call.$sym" | awk '{print $1}')
		rec=${rec:-0}
		if [[ $rec == "$n" ]]; then
			parts+=("$sym $n")
		else
			parts+=("$sym made $n recorded $rec")
			ok=1
		fi
	done
	((${#parts[@]})) || { parts=("the workload reported no calls"); ok=1; }
	calls_detail=$(printf '%s, ' "${parts[@]}")
	calls_detail=${calls_detail%, }
	return $ok
}

# verdict_line is the one-line verdict of a recorded run.
verdict_line() { # name
	local s=$work/$1.sum
	local ff
	ff=$(sumval "$s" ff_symbol)
	if [[ -z $ff || $ff == null ]]; then
		echo "attribution=$(sumval "$s" attribution) capacity=$(sumval "$s" capacity) first_failure=none"
	else
		echo "attribution=$(sumval "$s" attribution) capacity=$(sumval "$s" capacity) first_failure=$ff $(sumval "$s" ff_result_name) ($(sumval "$s" ff_result)) size=$(sumval "$s" ff_size)"
	fi
}

# judge checks a recorded run against the failure the workload provoked
# and the verdict expected; reports the result.
judge() { # id name attribution capacity
	local id=$1 name=$2 want_attr=$3 want_cap=$4
	local s=$work/$name.sum g=$work/$name.stdout why=() v
	v=$(verdict_line "$name")
	if [[ ! -s $work/$name.db ]]; then
		result FAIL "$id" "forensic record exit $rec_rc and no run.db: $(tail -2 "$work/$name.stderr" | tr '\n' ' ')"
		return
	fi
	if [[ ! -s $s ]] || [[ -z $(sumval "$s" attribution) ]]; then
		result FAIL "$id" "no analysis: $(head -2 "$work/$name.analyze.err" "$s" 2>/dev/null | tr '\n' ' ')"
		return
	fi
	case $rec_rc in
	0) ;;
	3) why+=("the workload did not provoke its failure") ;;
	4) why+=("the workload could not set up: $(grep -h '^GROUND setup' "$g" | head -1)") ;;
	*) why+=("forensic record exit $rec_rc") ;;
	esac
	local gff gres
	gff=$(gval "$g" first_failure)
	gres=$(gval "$g" result)
	if [[ -n $gff && $gff != none ]]; then
		[[ $(sumval "$s" ff_symbol) == "$gff" ]] || why+=("first failure $(sumval "$s" ff_symbol), the workload saw $gff fail")
		[[ $(sumval "$s" ff_result) == "$gres" ]] || why+=("result $(sumval "$s" ff_result), the workload saw $gres")
	fi
	[[ $(sumval "$s" attribution) == "$want_attr" ]] || why+=("attribution $(sumval "$s" attribution), expected $want_attr")
	[[ $(sumval "$s" capacity) == "$want_cap" ]] || why+=("capacity $(sumval "$s" capacity), expected $want_cap")
	[[ $(sumval "$s" lost_calls) == 0 ]] || why+=("lost calls $(sumval "$s" lost_calls)")
	calls_match "$name" || why+=("calls: $calls_detail")
	if ((${#why[@]})); then
		result FAIL "$id" "$v; $(join "; " "${why[@]}")"
	else
		result PASS "$id" "$v; calls made = recorded ($calls_detail)"
	fi
}

skip_if_late() { # id
	if ! in_budget; then
		result SKIP "$1" "skipped: the time budget (${budget}s) is spent"
		return 0
	fi
	return 1
}

need_workload() { # id workload
	if [[ ! -x $work/bin/$2 ]]; then
		result FAIL "$1" "the workload $2 could not be built (no C compiler, nothing prepared)"
		return 1
	fi
	if [[ ! -x $forensic ]]; then
		result FAIL "$1" "no bin/forensic"
		return 1
	fi
	return 0
}

# ---------------------------------------------------------------------------
# The checks.
# ---------------------------------------------------------------------------
check_environment() {
	section "environment: the machine, the driver, the inventory"
	runlog 10 uname -a
	runlog 10 id
	if ((sim)); then
		out "mode: simulated GPU ($simdir); nvidia-smi is not consulted"
	else
		[[ -r /proc/driver/nvidia/version ]] && runlog 10 cat /proc/driver/nvidia/version
		runlog 10 sh -c 'lsmod | grep -i nvidia'
		if command -v nvidia-smi >/dev/null 2>&1; then
			runlog 60 nvidia-smi
			runlog 90 nvidia-smi -q
		else
			out "nvidia-smi: not present"
		fi
		out "libcuda (loader cache): ${libcuda:-none found}"
		runlog 10 sh -c 'ldconfig -p | grep -E "libcuda\.so|libnvidia-ml\.so|libcudart\.so"'
	fi
	local inv=$work/inventory.txt irc se=()
	((sim)) && se=("SIMGPU_STATE=$work/inventory.simgpu-state")
	out "\$ bin/forensic inventory ${inv_flags[*]}"
	env "${wl_env[@]}" "${se[@]}" timeout 60 "$forensic" inventory "${inv_flags[@]}" >"$inv" 2>&1
	irc=$?
	cat "$inv" >>"$body"
	out "(exit status $irc)"
	out "\$ bin/forensic inventory --json ${inv_flags[*]}"
	env "${wl_env[@]}" "${se[@]}" timeout 60 "$forensic" inventory --json "${inv_flags[@]}" >>"$body" 2>&1
	out "(exit status $?)"
	local gpus
	gpus=$(grep -c '^GPU [0-9]' "$inv")
	if ((irc == 0 && gpus > 0)); then
		result PASS environment "NVML initialized through forensic inventory: $gpus GPU(s): $(grep -m1 '^GPU [0-9]' "$inv" | tr -s ' ')"
	else
		result FAIL environment "forensic inventory exit $irc, $gpus GPU(s): $(head -2 "$inv" | tr '\n' ' ')"
	fi
}

check_no_failure() {
	local id=no-failure
	section "$id: a run in which no call fails (expect attribution none)"
	skip_if_late $id && return
	need_workload $id no_fail || return
	record no_fail 90 -- "$work/bin/no_fail"
	judge $id no_fail none null
}

check_exports() {
	section "exports: libcuda's exports of the hooked families against the symbol table"
	skip_if_late exports && return
	local lib=$libcuda
	if [[ -z $lib ]]; then
		lib=$(sumval "$work/no_fail.sum" coverage.0 | awk '{print $1}')
	fi
	if [[ -z $lib || ! -e $lib ]]; then
		result FAIL exports "no libcuda found (ldconfig -p has none; set GPU_CHECK_LIBCUDA=PATH)"
		result SKIP coverage "skipped: no libcuda"
		return
	fi
	out "libcuda: $lib -> $(readlink -f "$lib")"
	if command -v nm >/dev/null 2>&1; then
		out "\$ nm -D --defined-only $lib | wc -l"
		out "$(timeout 30 nm -D --defined-only "$lib" 2>&1 | wc -l) defined dynamic symbols (full list at the end of this report)"
	fi
	if [[ -z $helper ]]; then
		result SKIP exports "skipped: no helper (build test/gpu/gpucheck: scripts/gpu-check.sh --prepare on a machine with Go)"
		result SKIP coverage "skipped: no helper"
		return
	fi
	local ex=$work/exports.txt
	out "\$ gpucheck exports $lib"
	timeout 60 "$helper" exports "$lib" >"$ex" 2>&1
	local erc=$?
	cat "$ex" >>"$body"
	out "(exit status $erc)"
	local counts missing=() s hooked
	counts=$(sed -n 's/^count //p' "$ex")
	# (No grep -q in a pipeline: under pipefail its early exit fails sed.)
	hooked=" $(sed -n '/^hooked: /,/^exported but not hooked/p' "$ex" | awk '/^  /{print $1}' | tr '\n' ' ')"
	for s in cuInit cuDevicePrimaryCtxRetain cuCtxSetCurrent cuMemAlloc_v2 cuMemFree_v2 cuMemHostRegister_v2 \
		cuMemCreate cuMemAddressReserve cuMemMap cuMemSetAccess; do
		[[ $hooked == *" $s "* ]] || missing+=("$s")
	done
	if ((erc != 0)); then
		result FAIL exports "could not read $lib: $(head -1 "$ex")"
	elif ((${#missing[@]})); then
		result FAIL exports "$lib: $counts; not hooked: ${missing[*]}"
	else
		result PASS exports "$lib: $counts (hooked: exported and in the table; unhooked: a hooked family's export without a row; absent: a row not exported)"
	fi

	section "coverage: the recorder's coverage in run.db against the ELF reading above"
	if [[ ! -s $work/no_fail.json ]]; then
		result SKIP coverage "skipped: the no-failure run left no analysis to compare with"
		return
	fi
	local cv=$work/coverage.txt
	out "\$ gpucheck coverage $lib no_fail.json"
	timeout 60 "$helper" coverage "$lib" "$work/no_fail.json" >"$cv" 2>&1
	local crc=$?
	cat "$cv" >>"$body"
	out "(exit status $crc)"
	if ((crc == 0)); then
		result PASS coverage "analyze --json coverage[] for $lib matches: $(grep -c '^same' "$cv") lists identical"
	else
		result FAIL coverage "$(grep -m2 -E '^DIFF|gpucheck' "$cv" | tr '\n' ' ')"
	fi
}

check_driver_oom() {
	local id=driver-oom
	section "$id: cuMemAlloc_v2 until it fails (expect allocation / framebuffer-exhausted)"
	skip_if_late $id && return
	need_workload $id drv_oom || return
	record drv_oom 120 -- "$work/bin/drv_oom" 1G
	judge $id drv_oom allocation framebuffer-exhausted
}

check_runtime_oom() {
	local id=runtime-oom
	section "$id: cudaMalloc until it fails, through the CUDA runtime (expect allocation / framebuffer-exhausted)"
	if ((sim)); then
		result SKIP $id "skipped: no libcudart (the simulated GPU has no CUDA runtime)"
		result SKIP runtime-calls "skipped: no libcudart"
		return
	fi
	skip_if_late $id && { result SKIP runtime-calls "skipped: the time budget is spent"; return; }
	local cmd=()
	if [[ -x $work/bin/rt_oom_nvcc ]]; then
		cmd=("$work/bin/rt_oom_nvcc" 1G)
	else
		local rt
		rt=$(find_cudart)
		if [[ -z $rt ]]; then
			result SKIP $id "skipped: no libcudart (no nvcc, none in the loader cache, /usr/local/cuda*, Python's nvidia-cuda-runtime)"
			result SKIP runtime-calls "skipped: no libcudart"
			return
		fi
		need_workload $id rt_oom || { result SKIP runtime-calls "skipped: no runtime workload"; return; }
		cmd=("$work/bin/rt_oom" "$rt" 1G)
	fi
	record rt_oom 120 -- "${cmd[@]}"
	# The runtime's calls reach libcuda through cuGetProcAddress: the
	# workload counts cudaMalloc, not driver calls, so judge without the
	# per-symbol comparison and check the counts below.
	local s=$work/rt_oom.sum g=$work/rt_oom.stdout why=()
	if [[ ! -s $work/rt_oom.db || ! -s $s ]]; then
		result FAIL $id "forensic record exit $rec_rc, no analysis: $(tail -2 "$work/rt_oom.stderr" | tr '\n' ' ')"
		result FAIL runtime-calls "no run.db"
		return
	fi
	((rec_rc == 0)) || why+=("exit $rec_rc $(grep -h -m1 '^GROUND setup' "$g")")
	[[ $(sumval "$s" ff_operation) == allocation ]] || why+=("first failure operation $(sumval "$s" ff_operation)")
	[[ $(sumval "$s" ff_result) == 2 ]] || why+=("first failure result $(sumval "$s" ff_result), expected 2 (out of memory)")
	[[ $(sumval "$s" attribution) == allocation ]] || why+=("attribution $(sumval "$s" attribution), expected allocation")
	[[ $(sumval "$s" capacity) == framebuffer-exhausted ]] || why+=("capacity $(sumval "$s" capacity), expected framebuffer-exhausted")
	[[ $(sumval "$s" lost_calls) == 0 ]] || why+=("lost calls $(sumval "$s" lost_calls)")
	local v
	v="$(verdict_line rt_oom); runtime $(gval "$g" runtime) $(gval "$g" runtime_version), cudaMalloc failed with $(gval "$g" result_name) after $(gval "$g" allocated)"
	if ((${#why[@]})); then
		result FAIL $id "$v; $(join "; " "${why[@]}")"
	else
		result PASS $id "$v"
	fi
	# Every cudaMalloc reaches one driver allocation; count those recorded.
	local made rec=0 n
	made=$(gval "$g" calls.cudaMalloc)
	while IFS="= " read -r _ n _; do
		rec=$((rec + n))
	done < <(grep -E '^call\.(cuMemAlloc(_v2|Pitch(_v2)?|Managed|Async(_ptsz)?|FromPoolAsync(_ptsz)?)?|cuMemCreate)=' "$s")
	local calls
	calls=$(grep '^call\.' "$s" | sed 's/^call\.//; s/=/ /' | awk '{printf "%s %s/%s, ", $1, $2, $3}')
	if [[ -n $made ]] && ((rec >= made)); then
		result PASS runtime-calls "cudaMalloc calls $made, driver allocations recorded $rec (calls/failed: ${calls%, })"
	else
		result FAIL runtime-calls "cudaMalloc calls ${made:-?}, driver allocations recorded $rec: calls through the runtime were not all captured (calls/failed: ${calls%, })"
	fi
}

check_framework_oom() {
	local id=framework-oom
	section "$id: PyTorch or CuPy until out of memory (optional; expect allocation / framebuffer-exhausted)"
	if ((sim)); then
		result SKIP $id "skipped: the simulated GPU has no CUDA runtime"
		return
	fi
	skip_if_late $id && return
	if ! command -v python3 >/dev/null 2>&1; then
		result SKIP $id "skipped: no python3"
		return
	fi
	local which
	which=$(timeout 60 python3 -c '
import importlib.util as u
print("torch" if u.find_spec("torch") else "cupy" if u.find_spec("cupy") else "")' 2>/dev/null)
	if [[ -z $which ]]; then
		result SKIP $id "skipped: neither torch nor cupy is importable by python3"
		return
	fi
	record framework 240 -- python3 "$repo/test/gpu/framework_oom.py" "$which"
	if ((rec_rc == 4)); then
		result SKIP $id "skipped: $which is installed but cannot use the GPU ($(grep -m1 '^GROUND' "$work/framework.stdout"))"
		return
	fi
	local s=$work/framework.sum why=()
	[[ -s $s ]] || { result FAIL $id "forensic record exit $rec_rc, no analysis"; return; }
	((rec_rc == 0)) || why+=("exit $rec_rc")
	[[ $(sumval "$s" attribution) == allocation ]] || why+=("attribution $(sumval "$s" attribution), expected allocation")
	[[ $(sumval "$s" capacity) == framebuffer-exhausted ]] || why+=("capacity $(sumval "$s" capacity), expected framebuffer-exhausted")
	[[ $(sumval "$s" lost_calls) == 0 ]] || why+=("lost calls $(sumval "$s" lost_calls)")
	local v
	v="$(verdict_line framework); $which; calls: $(grep '^call\.cuMem' "$s" | sed 's/^call\.//; s/=/ /' | awk '{printf "%s %s/%s, ", $1, $2, $3}')"
	if ((${#why[@]})); then
		result FAIL $id "$v; $(join "; " "${why[@]}")"
	else
		result PASS $id "${v%, }"
	fi
}

check_host_register() {
	local id=host-register
	section "$id: cuMemHostRegister_v2 of more than can be pinned (expect allocation / not-applicable: no page-locked host memory)"
	skip_if_late $id && return
	need_workload $id host_reg || return
	if ((sim)); then
		record host_reg 60 SIMGPU_PIN_LIMIT=256M -- "$work/bin/host_reg" 1G
	else
		record host_reg 120 -- "$work/bin/host_reg"
	fi
	judge $id host_reg allocation not-applicable
}

check_vmm() {
	local id=vmm-map
	section "$id: cuMemCreate, cuMemAddressReserve, cuMemMap, cuMemSetAccess; then cuMemMap of twice the handle (expect mapping / not-applicable)"
	if ! skip_if_late $id && need_workload $id vmm; then
		record vmm_map 90 -- "$work/bin/vmm" map-oversize
		judge $id vmm_map mapping not-applicable
	fi
	id=vmm-create
	section "$id: the same sequence, then cuMemCreate larger than the device (expect allocation / framebuffer-exhausted)"
	if ! skip_if_late $id && need_workload $id vmm; then
		record vmm_create 90 -- "$work/bin/vmm" create-oom
		judge $id vmm_create allocation framebuffer-exhausted
	fi
}

check_overhead() {
	local id=overhead
	section "$id: cuMemAlloc_v2 + cuMemFree_v2 pairs, plain and under forensic record"
	skip_if_late $id && return
	need_workload $id overhead || return
	local n=20000 size=2M rounds=3 se=()
	((sim)) && se=("SIMGPU_STATE=$work/overhead-plain.simgpu-state")
	out "\$ overhead $n $size $rounds   (plain)"
	env "${wl_env[@]}" "${se[@]}" timeout -k 5 120 \
		"$work/bin/overhead" $n $size $rounds >"$work/overhead-plain.stdout" 2>&1
	local prc=$?
	cat "$work/overhead-plain.stdout" >>"$body"
	out "(exit status $prc)"
	record overhead 180 -- "$work/bin/overhead" $n $size $rounds
	local plain recd s=$work/overhead.sum why=()
	plain=$(gval "$work/overhead-plain.stdout" median_ns_per_pair)
	recd=$(gval "$work/overhead.stdout" median_ns_per_pair)
	((prc == 0)) || why+=("the plain run exited $prc")
	((rec_rc == 0)) || why+=("the recorded run exited $rec_rc")
	if [[ -s $s ]]; then
		[[ $(sumval "$s" lost_calls) == 0 ]] || why+=("lost calls $(sumval "$s" lost_calls)")
		calls_match overhead || why+=("calls: $calls_detail")
	else
		why+=("no analysis of the recorded run: $(tail -1 "$work/overhead.stderr")")
	fi
	local d="no timing"
	if [[ -n $plain && -n $recd ]]; then
		d=$(awk -v p="$plain" -v r="$recd" 'BEGIN {
			pct = 0
			if (p > 0) pct = 100 * (r - p) / p
			printf "plain %d ns/pair, recorded %d ns/pair: %+d ns/pair (%+d ns per hooked call, %+.0f%%)", p, r, r - p, (r - p) / 2, pct
		}')
	else
		why+=("no timing (plain ${plain:-?} ns/pair, recorded ${recd:-?} ns/pair)")
	fi
	d="$d; $n pairs of $size x $rounds rounds (median round)"
	if ((${#why[@]})); then
		result FAIL $id "$d; $(join "; " "${why[@]}")"
	else
		result PASS $id "$d; $calls_detail recorded, none lost"
	fi
}

# write_report writes the whole report from what has run so far. It runs
# after every check, so a run killed by an outer timeout still leaves a
# report of the checks that finished.
write_report() { # state (complete, or what is still running)
	npass=0 nfail=0 nskip=0
	for r in "${results[@]}"; do
		case $r in
		PASS*) npass=$((npass + 1)) ;;
		FAIL*) nfail=$((nfail + 1)) ;;
		SKIP*) nskip=$((nskip + 1)) ;;
		esac
	done
	overall=PASS
	((nfail)) && overall=FAIL
	[[ $1 == complete ]] || overall="INCOMPLETE ($1)"
	{
		echo "forensic gpu-check report"
		echo "========================="
		echo "mode:     $mode"
		echo "date:     $(date -u +%FT%TZ)"
		echo "host:     $(uname -n) $(uname -r)"
		echo "repo:     $repo ($(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo 'no git'))"
		echo "libcuda:  ${libcuda:-found by forensic}"
		echo "work:     $work (run.db files, analyses, workload outputs)"
		echo "duration: $(elapsed) s"
		for b in "${build_notes[@]}"; do
			echo "build:    $b"
		done
		echo ""
		echo "SUMMARY"
		printf '  %s\n' "${results[@]}"
		echo ""
		echo "RESULT: $overall ($npass passed, $nfail failed, $nskip skipped)"
		echo ""
		echo "Each check's commands, outputs, analyses (text and JSON) follow."
		cat "$body"
	} >"$report.tmp" && mv -f "$report.tmp" "$report"
}

# ---------------------------------------------------------------------------
# Run.
# ---------------------------------------------------------------------------
mode=real
((sim)) && mode="simulated ($simdir)"
log "gpu-check: mode $mode; report $report; work $work"
checks=(check_environment check_no_failure check_exports check_driver_oom check_runtime_oom
	check_framework_oom check_host_register check_vmm check_overhead)
for i in "${!checks[@]}"; do
	write_report "stopped during ${checks[i]#check_}"
	"${checks[i]}"
done

if [[ -n $libcuda && -e $libcuda ]] && command -v nm >/dev/null 2>&1; then
	section "appendix: nm -D --defined-only $libcuda"
	timeout 30 nm -D --defined-only "$libcuda" >>"$body" 2>&1
fi
write_report complete

echo ""
printf '%s\n' "${results[@]}"
echo "RESULT: $overall ($npass passed, $nfail failed, $nskip skipped) in $(elapsed) s; report: $report"
((nfail == 0))
