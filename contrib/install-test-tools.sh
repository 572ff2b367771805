#!/usr/bin/env bash
# Installs the real components the test suite drives (see docs/architecture.md,
# "Tests"), and the staticcheck linter that
# contrib/test.sh runs, and links them into .tools/bin in the repository
# (git-ignored).
#
# Binaries are built once per tool and version into the user's cache directory
# (${XDG_CACHE_HOME:-~/.cache}/chalupa-tools/<tool>/<version>/) so a fresh clone,
# and CI on the same machine, reuse them instead of rebuilding (litestream takes
# about 3 minutes cold, versitygw several). Everything comes from the Go module
# proxy; nothing is downloaded from anywhere else.
#
# Usage: contrib/install-test-tools.sh            install what is missing
#        contrib/install-test-tools.sh --print     print the bin directory only
set -euo pipefail

# Pinned versions. Litestream's CLI must match the embedded library (go.mod) so
# a restore reads exactly the LTX files the daemon writes.
LITESTREAM_VERSION=v0.5.18
VERSITYGW_VERSION=v1.8.0
# staticcheck is pinned so a new release's checks cannot fail an unchanged tree.
STATICCHECK_VERSION=v0.8.2
# The pulumi CLI the converge tests drive (docs/operations.md, "Converge").
# Keep it equal to github.com/pulumi/pulumi/sdk/v3 in go.mod and to the
# versions in contrib/tools/pulumi/go.mod.
PULUMI_VERSION=v3.274.1

repo=$(cd "$(dirname "$0")/.." && pwd)
bin="$repo/.tools/bin"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/chalupa-tools"

if [[ "${1:-}" == "--print" ]]; then
	echo "$bin"
	exit 0
fi

mkdir -p "$bin"

# Debian's chromium drives the console's browser tests (chromedp talks to
# /usr/bin/chromium over a pipe; no chromedriver). Installed as root when
# missing; without root the tests skip, except under CI=true where a
# missing browser fails the run.
if ! command -v /usr/bin/chromium >/dev/null 2>&1; then
	if [[ $(id -u) -eq 0 ]]; then
		echo "install-test-tools: installing chromium (apt)" >&2
		# apt's progress goes to stderr: this script's standard output is the
		# tool directory's path alone (contrib/test.sh reads it).
		{ apt-get update && apt-get install -y --no-install-recommends chromium; } >&2
	elif [[ "${CI:-}" == "true" ]]; then
		echo "install-test-tools: chromium is missing and this is not root: the browser tests cannot run" >&2
		exit 1
	else
		echo "install-test-tools: chromium is missing (run as root to install it); the browser tests will skip" >&2
	fi
fi

# install NAME VERSION MODULE_PATH [env...]: go install into the cache, keyed by
# tool and version, then link into .tools/bin.
install_tool() {
	local name=$1 version=$2 pkg=$3
	shift 3
	local dest="$cache/$name/$version"
	if [[ ! -x "$dest/$name" ]]; then
		echo "install-test-tools: building $name $version (cached in $dest)" >&2
		mkdir -p "$dest.tmp"
		env "$@" GOBIN="$dest.tmp" go install "$pkg@$version"
		rm -rf "$dest"
		mv "$dest.tmp" "$dest"
	fi
	ln -sf "$dest/$name" "$bin/$name"
}

# install_pulumi: the pulumi CLI cannot be `go install`ed (pkg/v3's go.mod
# has replace directives): it is built from the wrapper module
# contrib/tools/pulumi, with its version stamped (the Automation API refuses
# a CLI that reports none). About 15–20 min and ~1.8 GB of module cache
# cold, ~3 min warm; cached by version like the others. The converge tests
# build the test provider plugin themselves (a cached go build).
install_pulumi() {
	local dest="$cache/pulumi/$PULUMI_VERSION"
	if [[ ! -x "$dest/pulumi" ]]; then
		echo "install-test-tools: building pulumi $PULUMI_VERSION (cached in $dest; 15-20 min cold)" >&2
		mkdir -p "$dest.tmp"
		CGO_ENABLED=0 go build -C "$repo/contrib/tools/pulumi" -trimpath -o "$dest.tmp/pulumi" \
			-ldflags "-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$PULUMI_VERSION" \
			github.com/pulumi/pulumi/pkg/v3/cmd/pulumi
		rm -rf "$dest"
		mv "$dest.tmp" "$dest"
	fi
	ln -sf "$dest/pulumi" "$bin/pulumi"
}

install_tool litestream "$LITESTREAM_VERSION" github.com/benbjohnson/litestream/cmd/litestream CGO_ENABLED=0 &
lpid=$!
install_tool versitygw "$VERSITYGW_VERSION" github.com/versity/versitygw/cmd/versitygw CGO_ENABLED=0 &
vpid=$!
install_tool staticcheck "$STATICCHECK_VERSION" honnef.co/go/tools/cmd/staticcheck &
spid=$!
install_pulumi &
ppid=$!
rc=0
wait "$lpid" || rc=1
wait "$vpid" || rc=1
wait "$spid" || rc=1
wait "$ppid" || rc=1
if [[ $rc -ne 0 ]]; then
	echo "install-test-tools: a tool failed to build" >&2
	exit 1
fi

"$bin/litestream" version >/dev/null
"$bin/staticcheck" -version >/dev/null
if [[ "$("$bin/pulumi" version)" != "$PULUMI_VERSION" ]]; then
	echo "install-test-tools: $bin/pulumi does not report $PULUMI_VERSION" >&2
	exit 1
fi
echo "$bin"
