#!/usr/bin/env bash
# make demo: record the out-of-memory scenario on the simulated GPU and
# print the analysis. Needs root (it loads eBPF programs).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $(id -u) != 0 ]]; then
	echo "make demo: run as root (it loads eBPF programs): sudo make demo" >&2
	exit 1
fi
# The simulated GPU's state lives in a directory only root may use: under
# sudo, forensic record must not run the workload as the user who ran sudo.
unset SUDO_UID SUDO_GID SUDO_USER
sim=build/simgpu
# The recording stays in build/demo (replaced by the next demo) so that the
# commands record suggests at its end work; the simulated GPU's state goes.
out=build/demo
mkdir -p "$out"
work=$(mktemp -d /tmp/forensic-demo.XXXXXX)
trap 'rm -rf "$work"' EXIT
export SIMGPU_STATE=$work/simgpu.state # a fresh simulated GPU: 16 GiB, 512 MiB reserved
echo "== forensic record: a workload loads 8 GiB of weights, then grows a KV cache"
echo "   until it runs out"
# The workload fails on purpose; forensic exits with its status.
bin/forensic record -o "$out/run.db" --force --libcuda $sim/libcuda.so.1 --libnvidia-ml $sim/libnvidia-ml.so.1 \
	-- $sim/scenarios/weights_oom || true
echo
echo "== forensic analyze"
bin/forensic analyze "$out/run.db"
echo
echo "== the recording stays in $out/run.db (the next demo replaces it); see it"
echo "   again with bin/forensic analyze $out/run.db (--json for the contract),"
echo "   or as a page: bin/forensic report -o $out/report.html $out/run.db"
