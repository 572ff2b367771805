#!/bin/sh
# contrib/release.sh VERSION [OUTDIR] — build a chalupa release
# (docs/operations.md, "Releases").
#
# Reproducible: the same commit gives byte-identical archives and
# checksums wherever it is built (-trimpath, no build id, vcs stamping from
# the commit, archive entries with fixed order, owner and time, gzip without
# a name or time). The version is an immutable tag-like string: never
# "latest" or a branch name. The tree must be clean (a dirty tree would be
# stamped "modified" and could not be rebuilt from its commit).
#
# Output: OUTDIR (default dist/VERSION) with
#   chalupa_VERSION_linux_amd64.tar.gz, chalupa_VERSION_linux_arm64.tar.gz
#   (each holds one file, "chalupa", mode 0755: the whole binary, from .),
#   chalupa-agent_VERSION_linux_amd64.tar.gz,
#   chalupa-agent_VERSION_linux_arm64.tar.gz (each holds one file,
#   "chalupa-agent", mode 0755: the fleet agent alone, from
#   ./cmd/chalupa-agent) and checksums.txt (sha256sum format, the chalupa
#   archives then the chalupa-agent archives, each in arch order) — the
#   sha256 a droplet's agent install pins.
set -eu

usage() { echo "usage: contrib/release.sh VERSION [OUTDIR]   (VERSION like v1.2.3 or v1.2.3-rc.1)" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
version=$1
echo "$version" | grep -Eq '^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?$' || {
	echo "release: VERSION must look like v1.2.3 (an immutable version, never 'latest' or a branch)" >&2
	exit 2
}

cd "$(dirname "$0")/.."
out=${2:-dist/$version}
if [ -n "$(git status --porcelain --untracked-files=no)" ] && [ "${CHALUPA_RELEASE_ALLOW_DIRTY:-}" != 1 ]; then
	echo "release: the work tree has uncommitted changes; commit them first" >&2
	exit 1
fi
epoch=$(git log -1 --format=%ct)
mkdir -p "$out"
out=$(cd "$out" && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

# CHALUPA_RELEASE_ARCHES narrows the build (the reproducibility test builds
# amd64 only); a release builds both.
arches=${CHALUPA_RELEASE_ARCHES:-amd64 arm64}
# build NAME PACKAGE ARCH builds PACKAGE as NAME for linux/ARCH into the
# stage. Every binary is built before any archive is written: an archive in
# an OUTDIR inside the work tree is an untracked file, and a build after it
# would be stamped vcs.modified.
build() {
	name=$1 pkg=$2 arch=$3
	mkdir -p "$stage/$name/$arch"
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch GOFLAGS= go build -trimpath -buildvcs=true \
		-ldflags "-s -w -buildid= -X github.com/chalupa-run/chalupa/internal/buildinfo.Version=$version" \
		-o "$stage/$name/$arch/$name" "$pkg"
	chmod 0755 "$stage/$name/$arch/$name"
	touch -d "@$epoch" "$stage/$name/$arch/$name"
}
# archive NAME ARCH writes NAME_VERSION_linux_ARCH.tar.gz holding the one
# file NAME.
archive() {
	name=$1 arch=$2
	tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner --format=gnu \
		-C "$stage/$name/$arch" -cf - "$name" | gzip -n -9 >"$out/${name}_${version}_linux_${arch}.tar.gz"
}
for arch in $arches; do
	build chalupa . "$arch"
	build chalupa-agent ./cmd/chalupa-agent "$arch"
done
for arch in $arches; do
	archive chalupa "$arch"
	archive chalupa-agent "$arch"
done
(cd "$out" && for name in chalupa chalupa-agent; do
	for arch in $arches; do sha256sum "${name}_${version}_linux_${arch}.tar.gz"; done
done >checksums.txt)
echo "release $version written to $out:"
cat "$out/checksums.txt"
