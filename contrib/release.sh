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
# Output: OUTDIR (default dist/VERSION) with, for each ARCH (amd64, arm64):
#   chalupa_VERSION_linux_ARCH.tar.gz: "chalupa" (the operator's commands,
#     light: ./cmd/chalupa) and "chalupad" (the whole control plane, from
#     .), mode 0755 — the server's archive: chalupa's server commands
#     forward to the chalupad beside it;
#   chalupa-cli_VERSION_linux_ARCH.tar.gz: "chalupa" alone, for a
#     workstation that only talks to a daemon;
#   chalupa-agent_VERSION_linux_ARCH.tar.gz: "chalupa-agent", the fleet
#     agent alone (./cmd/chalupa-agent);
# and checksums.txt (sha256sum format: the chalupa archives, then the
# chalupa-cli ones, then the chalupa-agent ones, each in arch order) — the
# agent's lines are the sha256 a droplet's agent install pins.
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
	mkdir -p "$stage/$arch"
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch GOFLAGS= go build -trimpath -buildvcs=true \
		-ldflags "-s -w -buildid= -X github.com/chalupa-run/chalupa/internal/buildinfo.Version=$version" \
		-o "$stage/$arch/$name" "$pkg"
	chmod 0755 "$stage/$arch/$name"
	touch -d "@$epoch" "$stage/$arch/$name"
}
# archive NAME ARCH FILE... writes NAME_VERSION_linux_ARCH.tar.gz holding
# the FILEs built for ARCH.
archive() {
	name=$1 arch=$2
	shift 2
	tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner --format=gnu \
		-C "$stage/$arch" -cf - "$@" | gzip -n -9 >"$out/${name}_${version}_linux_${arch}.tar.gz"
}
for arch in $arches; do
	build chalupa ./cmd/chalupa "$arch"
	build chalupad . "$arch"
	build chalupa-agent ./cmd/chalupa-agent "$arch"
done
for arch in $arches; do
	archive chalupa "$arch" chalupa chalupad
	archive chalupa-cli "$arch" chalupa
	archive chalupa-agent "$arch" chalupa-agent
done
(cd "$out" && for name in chalupa chalupa-cli chalupa-agent; do
	for arch in $arches; do sha256sum "${name}_${version}_linux_${arch}.tar.gz"; done
done >checksums.txt)
echo "release $version written to $out:"
cat "$out/checksums.txt"
