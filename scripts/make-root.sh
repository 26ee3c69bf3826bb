#!/usr/bin/env bash
# scripts/make-root.sh [OUT [SUITE]]: make a minimal Debian root with
# python3 in OUT (default build/roots/trixie, suite trixie) with
# debootstrap, once: a root already there (OUT/.complete) is reused.
#
# The e2e tests run Python from this root under chroot and under a
# pivot_root'd mount namespace, as container runtimes run a process whose
# files the host does not have at the same paths.
#
# The archive is the one this machine's apt already uses for its own
# release (apt-get indextargets reads the configured sources), so a machine
# behind a mirror or a proxy fetches from there; no host name is written
# here. The suite's Release file is verified against the installed
# debian-archive-keyring.
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:-build/roots/trixie}
suite=${2:-trixie}
if [[ -f $out/.complete ]]; then
	exit 0
fi
. /etc/os-release
if [[ ${ID:-} != debian || -z ${VERSION_CODENAME:-} ]]; then
	echo "make-root: needs Debian's apt and debootstrap (this is ${PRETTY_NAME:-unknown})" >&2
	exit 1
fi
if ! command -v debootstrap >/dev/null; then
	echo "make-root: debootstrap is missing (scripts/deps.sh test installs it)" >&2
	exit 1
fi
archive=$(apt-get indextargets --format '$(RELEASE) $(REPO_URI)' 'Created-By: Packages' 2>/dev/null |
	awk -v want="$VERSION_CODENAME" '$1 == want { print $2; exit }')
if [[ -z $archive ]]; then
	echo "make-root: this machine's apt sources name no archive for $VERSION_CODENAME; add one" >&2
	exit 1
fi
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
rm -rf "$out"
mkdir -p "$(dirname "$out")"
debootstrap --variant=minbase --include=python3 --keyring="$keyring" \
	"$suite" "$out" "$archive" >"$out.log" 2>&1 || {
	tail -n 20 "$out.log" >&2
	echo "make-root: debootstrap $suite failed (whole log: $out.log)" >&2
	exit 1
}
# The package cache is not needed to run anything in the root.
rm -rf "$out"/var/cache/apt/archives/*.deb
touch "$out/.complete"
echo "make-root: $suite root with $(readlink -f "$out"/usr/bin/python3 | xargs basename) in $out" >&2
