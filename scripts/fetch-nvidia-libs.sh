#!/usr/bin/env bash
# Fetch NVIDIA's real user-space driver libraries (driver 535: libcuda1 and
# libnvidia-ml1 from Debian's non-free component) into build/nvidia, without
# installing them and without touching the system's apt configuration: a
# private sources list, package lists and cache live under build/apt.
#
# The archive is the one this machine's apt already uses for its release
# (apt-get indextargets reads the configured sources), so a machine behind a
# mirror or a proxy fetches from there; no host name is written here.
#
# They complete the test world: their export list is the reference for the
# symbol table, the real libcuda is a binary to attach uprobes to, and on a
# machine without a GPU their cuInit/nvmlInit failures are evidence to record.
set -euo pipefail

out=${1:-build/nvidia}
if [[ -f $out/libcuda.so.1 && -f $out/libnvidia-ml.so.1 ]]; then
	exit 0
fi
. /etc/os-release
if [[ ${ID:-} != debian || -z ${VERSION_CODENAME:-} ]]; then
	echo "fetch-nvidia-libs: needs Debian's apt (this is ${PRETTY_NAME:-unknown}); put libcuda.so.1 and libnvidia-ml.so.1 of driver 535 in $out yourself" >&2
	exit 1
fi
# The configured URI of the Debian archive that carries this release's
# main suite (not -security or -updates), e.g. http://mirror.example/debian/.
archive=$(apt-get indextargets --format '$(RELEASE) $(REPO_URI)' 'Created-By: Packages' 2>/dev/null |
	awk -v want="$VERSION_CODENAME" '$1 == want { print $2; exit }')
if [[ -z $archive ]]; then
	echo "fetch-nvidia-libs: this machine's apt sources name no archive for $VERSION_CODENAME; add one (or put libcuda.so.1 and libnvidia-ml.so.1 of driver 535 in $out yourself)" >&2
	exit 1
fi
apt_dir=$(dirname "$out")/apt
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$out/pkgs"
apt_dir=$(cd "$apt_dir" && pwd)
cat >"$apt_dir/nonfree.sources" <<SRC
Types: deb
URIs: $archive
Suites: $VERSION_CODENAME
Components: contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
opts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$apt_dir/parts"
	-o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
	-o "APT::Sandbox::User=root" -o "Debug::NoLocking=1")
mkdir -p "$apt_dir/parts"
cp "$apt_dir/nonfree.sources" "$apt_dir/parts/"
apt-get "${opts[@]}" -qq update
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
echo "fetch-nvidia-libs: $(ls "$out"/pkgs) -> $out" >&2
