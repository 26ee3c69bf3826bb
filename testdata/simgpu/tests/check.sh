#!/bin/sh
# Self-test of the simulated GPU: tests/check.sh OUT  (run by `make check`).
set -u

OUT=${1:?usage: check.sh OUT}
SW=$OUT/scenarios/simwork
NVMLQ=$OUT/tests/nvmlq
T=$(mktemp -d /tmp/simgpu-check.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT

export SIMWORK_LIBCUDA="$OUT/libcuda.so.1"
unset SIMGPU_DEVICES SIMGPU_FB_TOTAL SIMGPU_FB_RESERVED SIMGPU_BAR1_TOTAL SIMGPU_BAR1_USED \
      SIMGPU_PEER_BAR1 SIMGPU_PIN_LIMIT SIMGPU_MIG SIMGPU_FAIL SIMGPU_NVML_UNSUPPORTED \
      SIMGPU_NVML_INIT_ERROR SIMWORK_CALLS

PASS=0
FAIL=0
GiB=1073741824
MiB=1048576

ok() { PASS=$((PASS + 1)); }
bad() { FAIL=$((FAIL + 1)); echo "FAIL: $*" >&2; }
eq() { # eq WHAT GOT WANT
    if [ "$2" = "$3" ]; then ok; else bad "$1: got '$2', want '$3'"; fi
}
contains() { # contains WHAT HAYSTACK NEEDLE
    case "$2" in *"$3"*) ok ;; *) bad "$1: '$2' does not contain '$3'" ;; esac
}
fresh() { # fresh NAME: a new state file for the next commands
    SIMGPU_STATE=$T/$1.state
    export SIMGPU_STATE
    rm -f "$SIMGPU_STATE"
}
waitfile() { # waitfile FILE: up to 20 s
    i=0
    while [ ! -e "$1" ] && [ $i -lt 2000 ]; do sleep 0.01; i=$((i + 1)); done
    [ -e "$1" ] || bad "timed out waiting for $1"
}
field() { # field N: the Nth word of stdin
    awk -v n="$1" '{print $n}'
}

echo "== exported symbols"
NAMES="cuInit cuDriverGetVersion cuDeviceGet cuDeviceGetCount cuDeviceGetName
cuDeviceTotalMem_v2 cuDeviceGetAttribute cuDeviceGetUuid cuDeviceGetUuid_v2 cuDeviceGetPCIBusId
cuGetErrorName cuGetErrorString cuGetProcAddress cuGetProcAddress_v2 cuCtxCreate cuCtxCreate_v2
cuCtxCreate_v3 cuCtxCreate_v4 cuCtxDestroy cuCtxDestroy_v2 cuDevicePrimaryCtxRetain
cuDevicePrimaryCtxRelease cuDevicePrimaryCtxRelease_v2 cuCtxSetCurrent cuCtxGetCurrent
cuCtxPushCurrent cuCtxPushCurrent_v2 cuCtxPopCurrent cuCtxPopCurrent_v2 cuCtxGetDevice cuMemAlloc
cuGreenCtxCreate cuCtxFromGreenCtx cuGreenCtxDestroy
cuMemAlloc_v2 cuMemAllocPitch cuMemAllocPitch_v2 cuMemAllocManaged cuMemAllocAsync
cuMemAllocAsync_ptsz cuMemAllocFromPoolAsync cuMemAllocFromPoolAsync_ptsz cuMemCreate
cuMemPoolCreate cuMemPoolDestroy cuArrayCreate cuArrayCreate_v2 cuArray3DCreate cuArray3DCreate_v2
cuArrayDestroy cuMipmappedArrayCreate cuMipmappedArrayDestroy cuMemAllocHost cuMemAllocHost_v2
cuMemHostAlloc cuMemFreeHost cuMemHostRegister cuMemHostRegister_v2 cuMemHostUnregister
cuMemHostGetDevicePointer cuMemHostGetDevicePointer_v2 cuMemAddressReserve cuMemAddressFree cuMemMap
cuMemUnmap cuMemMapArrayAsync cuMemMapArrayAsync_ptsz cuMemSetAccess cuMemRelease
cuMemExportToShareableHandle cuMemImportFromShareableHandle cuMemPoolExportPointer
cuMemPoolImportPointer cuIpcGetMemHandle cuIpcOpenMemHandle cuIpcOpenMemHandle_v2
cuIpcCloseMemHandle cuCtxEnablePeerAccess cuCtxDisablePeerAccess cuImportExternalMemory
cuExternalMemoryGetMappedBuffer cuDestroyExternalMemory cuGraphicsMapResources
cuGraphicsMapResources_ptsz cuGraphicsUnmapResources cuGraphicsUnmapResources_ptsz cuMemFree
cuMemFree_v2 cuMemFreeAsync cuMemFreeAsync_ptsz cuMemGetInfo_v2"
nm -D --defined-only "$OUT/libcuda.so.1" >"$T/nm.txt"
missing=""
for n in $NAMES; do
    grep -q " T $n\$" "$T/nm.txt" || missing="$missing $n"
done
eq "libcuda exports" "${missing:-none}" "none"
# every exported function has its own address (one uprobe per call)
dups=$(awk '$2 == "T" {print $1}' "$T/nm.txt" | sort | uniq -d | wc -l)
eq "distinct addresses" "$dups" "0"
eq "soname" "$(readelf -d "$OUT/libcuda.so.1" | grep -c 'Library soname: \[libcuda.so.1\]')" "1"
eq "nvml soname" "$(readelf -d "$OUT/libnvidia-ml.so.1" | grep -c 'Library soname: \[libnvidia-ml.so.1\]')" "1"
for n in nvmlInit_v2 nvmlInitWithFlags nvmlShutdown nvmlErrorString nvmlSystemGetDriverVersion \
    nvmlSystemGetNVMLVersion nvmlSystemGetCudaDriverVersion nvmlSystemGetCudaDriverVersion_v2 \
    nvmlDeviceGetCount nvmlDeviceGetCount_v2 nvmlDeviceGetHandleByIndex nvmlDeviceGetHandleByIndex_v2 \
    nvmlDeviceGetHandleByUUID nvmlDeviceGetHandleByPciBusId nvmlDeviceGetHandleByPciBusId_v2 \
    nvmlDeviceGetIndex nvmlDeviceGetUUID nvmlDeviceGetName nvmlDeviceGetPciInfo \
    nvmlDeviceGetPciInfo_v2 nvmlDeviceGetPciInfo_v3 nvmlDeviceGetMemoryInfo \
    nvmlDeviceGetMemoryInfo_v2 nvmlDeviceGetBAR1MemoryInfo nvmlDeviceGetComputeRunningProcesses \
    nvmlDeviceGetComputeRunningProcesses_v2 nvmlDeviceGetComputeRunningProcesses_v3 \
    nvmlDeviceGetMigMode nvmlDeviceGetMaxMigDeviceCount nvmlDeviceGetMigDeviceHandleByIndex \
    nvmlDeviceIsMigDeviceHandle nvmlDeviceGetDeviceHandleFromMigDeviceHandle \
    nvmlDeviceGetPersistenceMode nvmlDeviceGetComputeMode nvmlDeviceGetCurrPcieLinkGeneration \
    nvmlDeviceGetCurrPcieLinkWidth nvmlDeviceGetMaxPcieLinkGeneration nvmlDeviceGetMaxPcieLinkWidth \
    nvmlDeviceGetMinorNumber; do
    nm -D --defined-only "$OUT/libnvidia-ml.so.1" | grep -q " T $n\$" || bad "nvml lacks $n"
done
# simstate's helpers stay private to each library
eq "no sim_ exports" "$(nm -D --defined-only "$OUT/libcuda.so.1" "$OUT/libnvidia-ml.so.1" | grep -c ' sim_')" "0"

echo "== in-process checks (simtest)"
fresh simtest
if SIMGPU_DEVICES=2 SIMGPU_PIN_LIMIT=64M "$OUT/tests/simtest" >"$T/simtest.out" 2>&1; then ok; else
    bad "simtest"; cat "$T/simtest.out" >&2; fi
fresh simtest-fail
if SIMGPU_FAIL="cuMemAlloc_v2:3:2,cuMemFree_v2:1:999,cuMemFree_v2:3:700" \
    "$OUT/tests/simtest" fail >"$T/simtest-fail.out" 2>&1; then ok; else
    bad "simtest fail injection"; cat "$T/simtest-fail.out" >&2; fi

echo "== NVML basics"
fresh nvml
eq "count" "$("$NVMLQ" count)" "1"
eq "versions" "$("$NVMLQ" ver)" "535.999.01 12.535.999.01 12020 12020"
eq "name" "$("$NVMLQ" name 0)" "NVIDIA Simulated H100 16GB"
eq "mem v2" "$("$NVMLQ" mem 0)" "$((16 * GiB)) $((512 * MiB)) $((16 * GiB - 512 * MiB)) 0"
eq "mem v1" "$("$NVMLQ" mem1 0)" "$((16 * GiB)) $((16 * GiB - 512 * MiB)) $((512 * MiB))"
eq "bar1" "$("$NVMLQ" bar1 0)" "$((256 * MiB)) $((252 * MiB)) $((4 * MiB))"
eq "pci" "$("$NVMLQ" pci 0)" "00000000:41:00.0 0000:41:00.0 65 233110de"
eq "misc" "$("$NVMLQ" misc 0)" "1 0 4 16 5 16 0"
eq "mig off" "$("$NVMLQ" mig 0)" "0 0 0"
eq "v2 version mismatch" "$("$NVMLQ" mem2bad 0)" "rc 25"
eq "unsupported" "$(SIMGPU_NVML_UNSUPPORTED=nvmlDeviceGetPciInfo_v3,nvmlDeviceGetBAR1MemoryInfo "$NVMLQ" bar1 0)" "rc 3"
eq "unsupported exact" "$(SIMGPU_NVML_UNSUPPORTED=nvmlDeviceGetBAR1 "$NVMLQ" bar1 0 | wc -w)" "3"
eq "init error" "$(SIMGPU_NVML_INIT_ERROR=9 "$NVMLQ" count)" "rc 9"
eq "bypci" "$("$NVMLQ" bypci 00000000:41:00.0)" "0"
eq "bypci nf" "$("$NVMLQ" bypci 0000:42:00.0)" "rc 6"

echo "== OOM at the right point (weights_oom)"
fresh weights
"$OUT/scenarios/weights_oom" >"$T/w.out" 2>"$T/w.err"
eq "weights_oom status" "$?" "1"
eq "weights_oom message" "$(cat "$T/w.err")" \
    "weights_oom: cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY after 7 KV blocks"
contains "weights_oom uuid" "$(cat "$T/w.out")" "$("$NVMLQ" uuid 0)"
eq "weights_oom freed" "$("$NVMLQ" mem 0 | field 4)" "0"

echo "== free returns memory"
fresh free
out=$("$SW" 'init; use 0; meminfo; alloc 1G; meminfo; free; meminfo' 2>&1)
eq "meminfo" "$(echo "$out" | field 3 | tr '\n' ' ')" \
    "$((16 * GiB - 512 * MiB)) $((15 * GiB - 512 * MiB)) $((16 * GiB - 512 * MiB)) "

echo "== two processes share the state"
fresh share
"$SW" 'init; use 0; alloc 3G; alloc-v1 1M; touch '"$T/A.ready"'; wait-file '"$T/A.go" &
apid=$!
waitfile "$T/A.ready"
eq "B sees A's memory" "$("$NVMLQ" mem 0 | field 4)" "$((3 * GiB + MiB))"
eq "A in process list" "$("$NVMLQ" procs 0)" "$apid $((3 * GiB + MiB)) -1 -1"
eq "A in v1 process list" "$("$NVMLQ" procs1 0)" "$apid $((3 * GiB + MiB))"
out=$("$SW" 'init; use 0; meminfo' | field 3)
eq "cuMemGetInfo in B" "$out" "$((16 * GiB - 512 * MiB - 3 * GiB - MiB))"
touch "$T/A.go"
wait $apid
eq "A exited cleanly" "$?" "0"
eq "A's memory returned at exit" "$("$NVMLQ" mem 0 | field 4)" "0"
eq "process list empty" "$("$NVMLQ" procs 0)" ""

echo "== dead-process reclaim"
fresh dead
"$SW" 'init; use 0; alloc 2G; crash segv' 2>/dev/null
st=$?
eq "crash status" "$st" "139"
eq "reclaimed after segv" "$("$NVMLQ" mem 0 | field 4)" "0"
"$SW" 'init; use 0; alloc 1G; ipc-export '"$T/d.ipc"'; touch '"$T/K.ready"'; wait-signal' &
kpid=$!
waitfile "$T/K.ready"
eq "held before kill" "$("$NVMLQ" mem 0 | field 4)" "$GiB"
kill -KILL $kpid
wait $kpid 2>/dev/null
eq "reclaimed after kill -9" "$("$NVMLQ" mem 0 | field 4)" "0"
eq "no rows left" "$("$NVMLQ" procs 0)" ""
out=$("$SW" 'init; use 0; ipc-open '"$T/d.ipc" 2>&1)
eq "IPC open of a dead exporter" "$out" "simwork: cuIpcOpenMemHandle_v2 -> 400 CUDA_ERROR_INVALID_HANDLE"

echo "== SIMGPU_FAIL"
fresh fail
out=$(SIMGPU_FAIL=cuMemAlloc_v2:2:2 "$SW" 'init; use 0; alloc 1M; alloc 1M; alloc 1M; meminfo' 2>&1)
eq "injected OOM" "$(echo "$out" | grep simwork:)" "simwork: cuMemAlloc_v2 -> 2 CUDA_ERROR_OUT_OF_MEMORY"
eq "injected call changed nothing" "$(echo "$out" | grep meminfo | field 3)" "$((16 * GiB - 512 * MiB - 2 * MiB))"
out=$(SIMGPU_FAIL=cuMemAlloc_v2:1:700 "$SW" 'init; use 0; alloc 1M; alloc-host 1M; free-all; meminfo; uuid 0' 2>&1)
eq "sticky" "$out" "simwork: cuMemAlloc_v2 -> 700 CUDA_ERROR_ILLEGAL_ADDRESS
simwork: cuMemAllocHost_v2 -> 700 CUDA_ERROR_ILLEGAL_ADDRESS
simwork: cuMemGetInfo_v2 -> 700 CUDA_ERROR_ILLEGAL_ADDRESS
simwork: cuDeviceGetUuid_v2 -> 700 CUDA_ERROR_ILLEGAL_ADDRESS"
out=$(SIMGPU_FAIL=cuInit:1:100 "$SW" 'init; init; use 0' 2>&1)
eq "fail cuInit once" "$out" "simwork: cuInit -> 100 CUDA_ERROR_NO_DEVICE"
out=$("$SW" 'alloc 1M; init; alloc 1M' 2>&1)
eq "before init / without context" "$out" "simwork: cuMemAlloc_v2 -> 3 CUDA_ERROR_NOT_INITIALIZED
simwork: cuMemAlloc_v2 -> 201 CUDA_ERROR_INVALID_CONTEXT"

echo "== BAR1: IPC open, MAP_FAILED"
fresh bar1
"$OUT/scenarios/ipc_map" >"$T/ipc.out" 2>"$T/ipc.err"
eq "ipc_map status" "$?" "1"
eq "ipc_map message" "$(cat "$T/ipc.err")" "ipc_map: cuIpcOpenMemHandle_v2 failed: CUDA_ERROR_MAP_FAILED"
eq "ipc_map cleaned up" "$("$NVMLQ" bar1 0 | field 3) $("$NVMLQ" mem 0 | field 4)" "$((4 * MiB)) 0"
IPC_MAP_SIZE=128M "$OUT/scenarios/ipc_map" >"$T/ipc2.out" 2>&1
eq "ipc_map 128M status" "$?" "0"
"$SW" 'init; use 0; alloc 64M; ipc-export '"$T/x.ipc"'; wait-file '"$T/X.go"'; free' &
xpid=$!
"$SW" 'init; use 0; ipc-open '"$T/x.ipc"'; touch '"$T/Y.ready"'; wait-file '"$T/Y.go"'; free' &
ypid=$!
waitfile "$T/Y.ready"
eq "BAR1 used while open" "$("$NVMLQ" bar1 0)" "$((256 * MiB)) $((188 * MiB)) $((68 * MiB))"
eq "FB unchanged by open" "$("$NVMLQ" mem 0 | field 4)" "$((64 * MiB))"
eq "both processes listed" "$("$NVMLQ" procs 0 | sort -n | awk '{print $2}' | tr '\n' ' ')" \
    "$(if [ $xpid -lt $ypid ]; then echo "$((64 * MiB)) 0 "; else echo "0 $((64 * MiB)) "; fi)"
touch "$T/Y.go"
wait $ypid
eq "BAR1 returned on close" "$("$NVMLQ" bar1 0 | field 3)" "$((4 * MiB))"
touch "$T/X.go"
wait $xpid
fresh bar1-pool
"$SW" 'init; use 0; pool-create; alloc-pool 100M; pool-export '"$T/p.exp"'; wait-file '"$T/P.go"'; free-all' &
ppid=$!
out=$("$SW" 'init; use 0; pool-import '"$T/p.exp"'; pool-import '"$T/p.exp"'; pool-import '"$T/p.exp"'; free; free; free' 2>&1)
eq "pool import MAP_FAILED on the third" "$out" "simwork: cuMemPoolImportPointer -> 205 CUDA_ERROR_MAP_FAILED"
touch "$T/P.go"
wait $ppid
eq "pool BAR1 returned" "$("$NVMLQ" bar1 0 | field 3)" "$((4 * MiB))"

echo "== two devices: UUIDs, PCI, peer access, vmm BAR1"
fresh two
export SIMGPU_DEVICES=2
out=$("$SW" 'init; uuid 0; uuid 1; uuid-v1 1; pci 0; pci 1')
u0=$(echo "$out" | sed -n 1p | field 3)
u1=$(echo "$out" | sed -n 2p | field 3)
eq "cuda uuid 0 = nvml uuid 0" "$u0" "$("$NVMLQ" uuid 0)"
eq "cuda uuid 1 = nvml uuid 1" "$u1" "$("$NVMLQ" uuid 1)"
[ "$u0" != "$u1" ] && ok || bad "UUIDs not distinct"
echo "$u0" | grep -Eq '^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' && ok || bad "uuid format $u0"
eq "pci ids" "$(echo "$out" | sed -n 4,5p | field 3 | tr '\n' ' ')" "0000:41:00.0 0000:43:00.0 "
eq "nvml pci 1" "$("$NVMLQ" pci 1 | field 1)" "00000000:43:00.0"
eq "byuuid" "$("$NVMLQ" byuuid "$u1")" "1"
eq "count 2" "$("$NVMLQ" count)" "2"
"$SW" 'init; use 0; peer 1; vmm 64M 1; touch '"$T/P2.ready"'; wait-file '"$T/P2.go"'; free; free; meminfo' >"$T/peer.out" 2>&1 &
p2=$!
waitfile "$T/P2.ready"
eq "peer BAR1 on device 1" "$("$NVMLQ" bar1 1 | field 3)" "$((36 * MiB))"
eq "vmm BAR1 on device 0" "$("$NVMLQ" bar1 0 | field 3)" "$((68 * MiB))"
touch "$T/P2.go"
wait $p2
eq "peer/vmm released" "$("$NVMLQ" bar1 0 | field 3) $("$NVMLQ" bar1 1 | field 3)" "$((4 * MiB)) $((4 * MiB))"
"$SW" 'init; use 0; vmm 32M 0 1; touch '"$T/G.ready"'; wait-file '"$T/G.go"'; free' >"$T/grant.out" 2>&1 &
gp=$!
waitfile "$T/G.ready"
eq "vmm [owner 0, peer 1] in one call: only the peer charged" "$("$NVMLQ" bar1 0 | field 3)" "$((36 * MiB))"
touch "$T/G.go"
wait $gp
eq "vmm grants released" "$("$NVMLQ" bar1 0 | field 3)" "$((4 * MiB))"
out=$(SIMGPU_STATE=$T/nearfull.state SIMGPU_BAR1_TOTAL=64M SIMGPU_BAR1_USED=40M "$SW" 'init; use 0; vmm 32M 0 1' 2>&1)
contains "vmm [0, 1] with BAR1 nearly full" "$out" "simwork: cuMemSetAccess -> 205 CUDA_ERROR_MAP_FAILED"
out=$("$SW" 'init; use 0; peer 1; peer 1; peer 0' 2>&1)
eq "peer errors" "$out" "simwork: cuCtxEnablePeerAccess -> 704 CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
simwork: cuCtxEnablePeerAccess -> 101 CUDA_ERROR_INVALID_DEVICE"

echo "== four threads on two devices + SIMWORK_CALLS"
fresh threads
CALLS=$T/calls.txt
SIMWORK_CALLS=$CALLS "$SW" 'init; threads 4 { use %d; stress 1000; alloc 1G }; touch '"$T/T.ready"'; wait-file '"$T/T.go" &
tpid=$!
waitfile "$T/T.ready"
eq "device 0 used" "$("$NVMLQ" mem 0 | field 4)" "$((2 * GiB))"
eq "device 1 used" "$("$NVMLQ" mem 1 | field 4)" "$((2 * GiB))"
touch "$T/T.go"
wait $tpid
eq "threads exit" "$?" "0"
eq "alloc lines" "$(grep " cuMemAlloc_v2 " "$CALLS" | awk -v p=$tpid '$1 == p {print $4, $5}' | sort | tr '\n' ' ')" \
    "1001 0 1001 0 1001 1 1001 1 "
eq "free lines" "$(grep -c " cuMemFree_v2 1000 " "$CALLS")" "4"
eq "distinct tids" "$(grep " cuMemAlloc_v2 " "$CALLS" | awk '{print $2}' | sort -u | wc -l)" "4"
eq "cuInit line" "$(grep " cuInit " "$CALLS")" "$tpid $tpid cuInit 1 -1"
eq "use counted before context" "$(grep " cuCtxSetCurrent " "$CALLS" | awk '{s += $4; d = d $5} END {print s, d}')" "4 -1-1-1-1"
eq "helpers not counted" "$(grep -cE ' (cuCtxGetDevice|cuGetErrorName|cuDeviceGetCount|cuMemGetInfo_v2) ' "$CALLS")" "0"
unset SIMGPU_DEVICES

echo "== fork, wait, calls file from several processes"
fresh fork
CALLS=$T/calls2.txt
out=$(SIMWORK_CALLS=$CALLS "$SW" 'init; use 0; alloc 1M; fork { init; use 0; alloc 2M; alloc 2M; exit 3 }; fork { init; use 0; crash abort }; wait; free' 2>/dev/null)
eq "wait output" "$(echo "$out" | awk '{print $1, $3, $4}' | tr '\n' ' ')" "child status 3 child status 134 "
eq "processes in calls file" "$(awk '{print $1}' "$CALLS" | sort -u | wc -l)" "3"
eq "child alloc count" "$(grep -c " cuMemAlloc_v2 2 0" "$CALLS")" "1"
eq "parent alloc count" "$(grep -c " cuMemAlloc_v2 1 0" "$CALLS")" "1"
eq "children memory reclaimed" "$("$NVMLQ" mem 0 | field 4)" "0"

echo "== simwork steps: the whole language"
fresh steps
out=$("$SW" 'init; use 0; ctx 0; ctx-v1 0; ctx-v3 0; ctx-pop; ctx-push; ctx-destroy; ctx-destroy; ctx-destroy;
  primary-release 0; use 0;
  alloc-v1 1M; alloc-pitch 1000 10 4; alloc-pitch-v1 1000 10 4; alloc-managed 1M; alloc-async 1M;
  alloc-async-ptsz 1M; pool-create; alloc-pool 1M; alloc-pool-ptsz 1M; array 10 10; array-v1 10 10;
  array3d 4 4 4; array3d-v1 4 4 4; mipmap 64 64 3; vmm 2M; export-fd; import-fd;
  alloc-host 1M; alloc-host-v1 1M; host-alloc 1M 1; host-register 64K; host-devptr; host-devptr-v1;
  host-register-v1 64K; ext-import 4M; ext-map 1M; gfx; gfx-ptsz; map-array; map-array-ptsz;
  repeat 3 { alloc 1M; free }; until-fail { alloc 4G }; free-all; meminfo; print done "a b"; sleep 1' 2>&1)
eq "language" "$out" "simwork: cuMemAlloc_v2 -> 2 CUDA_ERROR_OUT_OF_MEMORY
meminfo 0 $((16 * GiB - 512 * MiB)) $((16 * GiB))
done a b"
out=$("$SW" 'init; use 0; ctx-v4 0; print "x;y"' 2>&1)
eq "quoted token" "$out" "x;y"
out=$("$SW" 'init; bogus 1' 2>&1)
eq "syntax error" "$out" "simwork: syntax error: unknown step 'bogus'"
"$SW" 'repeat 2 { print' >/dev/null 2>&1
eq "missing brace status" "$?" "2"
out=$(SIMWORK_LIBCUDA=$OUT/libnvidia-ml.so.1 "$SW" 'init; print after' 2>&1)
eq "missing symbol" "$out" "simwork: cuInit: symbol not found in $OUT/libnvidia-ml.so.1
after"

echo "== MIG"
fresh mig
export SIMGPU_MIG=2
eq "mig mode" "$("$NVMLQ" mig 0)" "1 1 2"
"$SW" 'init; use 1; alloc 1G; uuid 1; touch '"$T/M.ready"'; wait-file '"$T/M.go" >"$T/mig.out" &
mpid=$!
waitfile "$T/M.ready"
mu=$("$NVMLQ" miguuid 0 1)
eq "mig uuid handle" "$(echo "$mu" | cut -d' ' -f2-)" "1 1 2"
eq "cuda uuid = MIG uuid" "$(field 3 <"$T/mig.out" | sed 's/^GPU-//')" "$(echo "$mu" | field 1 | sed 's/^MIG-//')"
eq "instance memory" "$("$NVMLQ" migmem 0 1)" "$((8 * GiB)) $((256 * MiB)) $((7 * GiB - 256 * MiB)) $GiB"
eq "gpu memory" "$("$NVMLQ" mem 0 | field 4)" "$GiB"
eq "mig process row" "$("$NVMLQ" migprocs 0 1)" "$mpid $GiB 2 0"
eq "instance 0 empty" "$("$NVMLQ" migprocs 0 0)" ""
touch "$T/M.go"
wait $mpid
out=$("$SW" 'init; use 0; until-fail { alloc 1G }' 2>&1)
eq "instance OOM" "$out" "simwork: cuMemAlloc_v2 -> 2 CUDA_ERROR_OUT_OF_MEMORY"
unset SIMGPU_MIG

echo "== stress and mix"
fresh stress
out=$("$SW" 'init; use 0; stress 20000; mix 2000; meminfo' 2>&1)
eq "stress/mix clean" "$out" "meminfo 0 $((16 * GiB - 512 * MiB)) $((16 * GiB))"
out=$("$SW" 'init; stress 10' 2>&1)
eq "stress summary" "$out" "simwork: stress: 10 of 10 calls failed (first: cuMemAlloc_v2 -> 201 CUDA_ERROR_INVALID_CONTEXT)"

echo
echo "simgpu check: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
