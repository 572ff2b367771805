#!/bin/sh
# contrib/release.sh VERSION [OUTDIR] — build a chalupa release
# (docs/operations.md, "Releases").
#
# Reproducible: the same commit gives byte-identical archives and
# checksums wherever it is built (-trimpath, no build id, vcs stamping from
# the commit, archive entries with fixed order, owner and time, gzip without
# a name or time). The version is an immutable tag-like string: never
# "latest" or a branch name. The tree must be clean as Go's VCS stamp sees
# it: `git status --porcelain`, untracked files included and git-ignored
# ones not (a tree it lists would be stamped vcs.modified=true and could
# not be rebuilt from its commit); release.sh refuses naming the files.
#
# Each phase prints a line on stderr when it starts and its time when it
# ends (a cold build of chalupad takes minutes); stdout is the summary.
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
if [ $# -lt 1 ] || [ $# -gt 2 ]; then usage; fi
version=$1
echo "$version" | grep -Eq '^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?$' || {
	echo "release: VERSION must look like v1.2.3 (an immutable version, never 'latest' or a branch)" >&2
	exit 2
}

cd "$(dirname "$0")/.."
out=${2:-dist/$version}
# The same listing Go's VCS stamp reads (untracked files count, ignored
# ones do not). CHALUPA_RELEASE_ALLOW_DIRTY=1 is for the tests that build
# a release from a work tree under edit; its binaries say modified.
dirty=$(git status --porcelain)
if [ -n "$dirty" ] && [ "${CHALUPA_RELEASE_ALLOW_DIRTY:-}" != 1 ]; then
	echo "release: the work tree is not clean, and Go would stamp the binaries vcs.modified=true:" >&2
	echo "$dirty" | head -n 20 >&2
	[ "$(echo "$dirty" | wc -l)" -le 20 ] || echo "  … and more (git status --porcelain)" >&2
	echo "release: commit, remove or git-ignore these files first" >&2
	exit 1
fi
# phase_start NAME and phase_end NAME print NAME's start and its time in
# seconds on stderr.
phase_start() {
	echo "release: $1 …" >&2
	phase_t0=$(date +%s)
}
phase_end() {
	echo "release: $1: done in $(($(date +%s) - phase_t0))s" >&2
}
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
	phase_start "building $name linux/$arch ($pkg)"
	mkdir -p "$stage/$arch"
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch GOFLAGS='' go build -trimpath -buildvcs=true \
		-ldflags "-s -w -buildid= -X github.com/chalupa-run/chalupa/internal/buildinfo.Version=$version" \
		-o "$stage/$arch/$name" "$pkg"
	chmod 0755 "$stage/$arch/$name"
	touch -d "@$epoch" "$stage/$arch/$name"
	phase_end "building $name linux/$arch ($pkg)"
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
phase_start "writing the archives and checksums.txt"
for arch in $arches; do
	archive chalupa "$arch" chalupa chalupad
	archive chalupa-cli "$arch" chalupa
	archive chalupa-agent "$arch" chalupa-agent
done
(cd "$out" && for name in chalupa chalupa-cli chalupa-agent; do
	for arch in $arches; do sha256sum "${name}_${version}_linux_${arch}.tar.gz"; done
done >checksums.txt)
phase_end "writing the archives and checksums.txt"
echo "release $version written to $out:"
cat "$out/checksums.txt"
