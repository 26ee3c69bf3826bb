#!/usr/bin/env bash
# scripts/deps.sh SET...: install the Debian packages that SET needs and
# this machine lacks (root), or say which are missing (not root).
#
#   scripts/deps.sh build    make, make demo: a C compiler and its headers
#   scripts/deps.sh test     make test: build, plus what the tests use
#   scripts/deps.sh bench    make bench: build, plus bpftrace
#
# The list below is the only place a dependency is named. One line each:
# what to look for (a command on PATH, or an absolute path), the Debian
# package that provides it, and the sets that need it. Add a line for a
# new need; "build" lines are part of every set.
#
# Go is not a Debian package here (Debian's is older than go.mod's): a
# missing or older Go is reported with where to get it.
set -euo pipefail
cd "$(dirname "$0")/.."

deps='
# look for                                       package                 sets
gcc                                              gcc                     build
make                                             make                    build
/usr/include/stdio.h                             libc6-dev               build
/usr/lib/debug/.build-id                         libc6-dbg               build  # symbols of the C library, to name its frames in stacks (libc.so.6 is stripped)
/usr/share/keyrings/debian-archive-keyring.gpg   debian-archive-keyring  test   # make nvidia-libs checks Debian'"'"'s archive
chromium                                         chromium                test   # the HTML report test renders in headless Chromium
/usr/bin/python3                                 python3                 test   # Debian'"'"'s python3 (3.11) for tests that use it
/usr/bin/python3.11-dbg                          python3.11-dbg          test   # detached debug symbols of that python3.11 (its _ctypes module is stripped), for the test that names the ctypes frames of a stack
promtool                                         prometheus              test   # promtool checks the metrics and the alert rules; the e2e alert test runs its server
debootstrap                                      debootstrap             test   # make roots: the Debian trixie root the container tests run Python 3.13 in
bpftrace                                         bpftrace                bench  # the per-call cost is compared with bpftrace
'

if (($# == 0)); then
	echo "usage: scripts/deps.sh build|test|bench..." >&2
	exit 2
fi
want=" build $* "

# present reports whether a need is met.
present() {
	if [[ $1 == /* ]]; then
		[[ -e $1 ]]
	else
		command -v "$1" >/dev/null 2>&1
	fi
}

missing=()
while read -r look pkg sets; do
	[[ -z $look || $look == \#* ]] && continue
	sets=${sets%%#*}
	for s in $sets; do
		if [[ $want == *" $s "* ]] && ! present "$look"; then
			missing+=("$pkg")
			break
		fi
	done
done <<<"$deps"

# Go: the version go.mod asks for, or newer.
need_go=$(sed -n 's/^go \([0-9.]*\).*/\1/p' go.mod)
have_go=$(go env GOVERSION 2>/dev/null | sed 's/^go//') || have_go=
if [[ -z $have_go ]] || [[ $(printf '%s\n%s\n' "$need_go" "$have_go" | sort -V | head -n1) != "$need_go" ]]; then
	echo "deps: Go $need_go or newer is needed (found: ${have_go:-none}); get it from https://go.dev/dl and put its bin on PATH" >&2
	exit 1
fi

((${#missing[@]})) || exit 0
if [[ $(id -u) != 0 ]]; then
	echo "deps: missing Debian packages: ${missing[*]}; install them (apt-get install ${missing[*]}) or run as root" >&2
	exit 1
fi
echo "deps: installing ${missing[*]} (apt-get)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >/dev/null
