#!/usr/bin/env bash
# scripts/fetch-nvidia-libs.sh [OUT [SUITE]]: fetch NVIDIA's real user-space
# driver libraries (libcuda1 and libnvidia-ml1 from Debian's non-free
# component) of Debian release SUITE into OUT, without installing them and
# without touching the system's apt configuration: a private sources list,
# package lists and cache live under build/apt/SUITE.
#
#   scripts/fetch-nvidia-libs.sh build/nvidia             this release's (bookworm: driver 535)
#   scripts/fetch-nvidia-libs.sh build/nvidia550 trixie   trixie's (driver 550)
#
# The archive is the one this machine's apt already uses for its own
# release (apt-get indextargets reads the configured sources), so a machine
# behind a mirror or a proxy fetches from there; no host name is written
# here. Another suite is fetched from that same archive.
#
# The suite's Release file must verify: apt checks it against the
# debian-archive-keyring installed here, and where that keyring lacks the
# suite's keys (an old bookworm keyring and trixie), against the newest
# debian-archive-keyring of this machine's own release, downloaded and
# verified by this machine's apt and unpacked under build/apt (never
# installed). Signature checking is never turned off.
#
# The libraries complete the test world: their export lists are the
# reference for the symbol table, the real libcuda is a binary to attach
# uprobes to, and on a machine without a GPU their cuInit/nvmlInit failures
# are evidence to record. OUT/VERSION holds the packages' version.
set -euo pipefail

out=${1:-build/nvidia}
if [[ -f $out/libcuda.so.1 && -f $out/libnvidia-ml.so.1 && -f $out/VERSION ]]; then
	exit 0
fi
. /etc/os-release
suite=${2:-${VERSION_CODENAME:-}}
if [[ ${ID:-} != debian || -z ${VERSION_CODENAME:-} ]]; then
	echo "fetch-nvidia-libs: needs Debian's apt (this is ${PRETTY_NAME:-unknown}); put libcuda.so.1 and libnvidia-ml.so.1 of $suite's libcuda1 in $out yourself" >&2
	exit 1
fi
# The configured URI of the Debian archive that carries this release's
# main suite (not -security or -updates), e.g. http://mirror.example/debian/.
archive=$(apt-get indextargets --format '$(RELEASE) $(REPO_URI)' 'Created-By: Packages' 2>/dev/null |
	awk -v want="$VERSION_CODENAME" '$1 == want { print $2; exit }')
if [[ -z $archive ]]; then
	echo "fetch-nvidia-libs: this machine's apt sources name no archive for $VERSION_CODENAME; add one (or put libcuda.so.1 and libnvidia-ml.so.1 of $suite's libcuda1 in $out yourself)" >&2
	exit 1
fi
apt_dir=$(dirname "$out")/apt/$suite
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/parts" "$out/pkgs"
apt_dir=$(cd "$apt_dir" && pwd)
opts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$apt_dir/parts"
	-o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
	-o "APT::Sandbox::User=root" -o "Debug::NoLocking=1")

# sources writes the private sources list, trusting the keyring $1.
sources() {
	cat >"$apt_dir/parts/nonfree.sources" <<SRC
Types: deb
URIs: $archive
Suites: $suite
Components: contrib non-free
Signed-By: $1
SRC
}

# update reads the suite's package lists; it fails when the Release file
# does not verify against the keyring of the sources list.
update() {
	apt-get "${opts[@]}" -qq update >"$apt_dir/update.log" 2>&1 &&
		! grep -q 'NO_PUBKEY\|is not signed\|GPG error' "$apt_dir/update.log"
}

sources /usr/share/keyrings/debian-archive-keyring.gpg
if ! update; then
	if ! grep -q 'NO_PUBKEY\|is not signed\|GPG error' "$apt_dir/update.log"; then
		cat "$apt_dir/update.log" >&2
		exit 1
	fi
	# This machine's keyring does not know the suite's keys: take the
	# newest keyring package of this release, which this machine's own apt
	# (its sources, its keys) downloads and verifies.
	echo "fetch-nvidia-libs: $suite's Release does not verify with the installed keyring; trying $VERSION_CODENAME's newest debian-archive-keyring" >&2
	keys=$apt_dir/keyring
	rm -rf "$keys" && mkdir -p "$keys/deb"
	(cd "$keys/deb" && apt-get -o APT::Sandbox::User=root -qq download debian-archive-keyring)
	dpkg -x "$keys"/deb/*.deb "$keys/root"
	sources "$keys/root/usr/share/keyrings/debian-archive-keyring.gpg"
	if ! update; then
		cat "$apt_dir/update.log" >&2
		echo "fetch-nvidia-libs: $suite's Release does not verify with $VERSION_CODENAME's keyring either; put libcuda.so.1 and libnvidia-ml.so.1 of $suite's libcuda1 in $out yourself" >&2
		exit 1
	fi
fi
rm -f "$out"/pkgs/*.deb
(cd "$out/pkgs" && apt-get "${opts[@]}" -qq download libcuda1 libnvidia-ml1)
for deb in "$out"/pkgs/*.deb; do
	dpkg -x "$deb" "$out/root"
done
for lib in libcuda.so.1 libnvidia-ml.so.1; do
	src=$(find "$out/root" -name "$lib" | head -n 1)
	if [[ -z $src ]]; then
		echo "fetch-nvidia-libs: $lib not found in the packages" >&2
		exit 1
	fi
	cp -L "$src" "$out/$lib"
done
dpkg-deb -f "$out"/pkgs/libcuda1_*.deb Version >"$out/VERSION"
echo "fetch-nvidia-libs: $(ls "$out"/pkgs) -> $out" >&2
