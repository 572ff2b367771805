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
#        contrib/install-test-tools.sh --rootfs    build (or link) the machine
#                                                  tests' root filesystem only
set -euo pipefail

# Pinned versions. Litestream's CLI must match the embedded library (go.mod) so
# a restore reads exactly the LTX files the daemon writes.
LITESTREAM_VERSION=v0.5.18
VERSITYGW_VERSION=v1.8.0
# mailpit is the SMTP server the email sink's tests send to, with STARTTLS
# and authentication, and read back through its HTTP API (docs/operations.md,
# "Alerts"). A test tool only, never a module dependency.
MAILPIT_VERSION=v1.33.1
# staticcheck is pinned so a new release's checks cannot fail an unchanged tree.
STATICCHECK_VERSION=v0.8.2
# The pulumi CLI the converge tests drive (docs/operations.md, "Converge").
# Keep it equal to github.com/pulumi/pulumi/sdk/v3 in go.mod and to the
# versions in contrib/tools/pulumi/go.mod.
PULUMI_VERSION=v3.274.1
# The root filesystem the machine tests boot with systemd-nspawn
# (digitalocean/dofake/machines; docs/architecture.md, "Tests"): Debian's
# suite and the packages a droplet's image has that the tests rely on —
# systemd as PID 1, OpenSSH's sshd, cloud-init with its NoCloud datasource,
# curl. python3-cffi-backend is listed because debootstrap does not resolve
# python3-cryptography's virtual dependency on it. The tree is cached under
# a hash of suite, mirror and packages, so a change to any of them builds a
# new tree and an unchanged list never rebuilds.
ROOTFS_SUITE=bookworm
ROOTFS_MIRROR=http://deb.debian.org/debian
ROOTFS_PACKAGES=systemd,systemd-sysv,dbus,openssh-server,cloud-init,python3-cffi-backend,curl,ca-certificates,iproute2,procps
# What the machine tests use from the tree (digitalocean/dofake/machines):
# a cached tree lacking one of them is built again (see rootfs_complete).
ROOTFS_FILES="etc/debian_version usr/lib/systemd/systemd usr/sbin/sshd usr/bin/cloud-init usr/bin/curl usr/bin/ip usr/bin/journalctl etc/ssl/certs/ca-certificates.crt"

repo=$(cd "$(dirname "$0")/.." && pwd)
bin="$repo/.tools/bin"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/chalupa-tools"

if [[ "${1:-}" == "--print" ]]; then
	echo "$bin"
	exit 0
fi

mkdir -p "$bin"

# install_rootfs: debootstrap the machine tests' Debian tree into
# $cache/rootfs/<suite>-<hash>/ (322 MB; cold, 1.5 min measured on the
# 2-core machine, 6.7 min on it shared with other builds) and link it as
# .tools/rootfs. The tree is only ever the
# read-only lower layer of each box's overlay; the tests write everything a
# box needs (NoCloud seed, cloud-init settings, the test CA) into the box's
# own upper layer. debootstrap and systemd-nspawn come from Debian's
# debootstrap and systemd-container packages, installed here as root when
# missing. Without root the machine tests skip naming what is missing,
# except under CI=true, where this fails.
# lock_tool NAME: hold the cache's lock for NAME until the calling
# (sub)shell exits, so two runs sharing the cache (two clones, CI and a
# developer) build a tool once: the second waits, then finds it built. Without
# it both wrote the same $dest.tmp and one's mv found it gone.
lock_tool() {
	mkdir -p "$cache"
	exec {lockfd}>"$cache/.$1.lock"
	flock "$lockfd"
}

# clear_build_tree DIR: remove a half-built root filesystem left by a killed
# build. debootstrap mounts proc (and sysfs) inside the tree and unmounts
# them on its way out, which a SIGKILL (a CI job's timeout, an OOM kill)
# skips: a plain rm -rf then walked the host's /proc through that mount,
# failed on every file ("Operation not permitted") and no later run could
# rebuild. Mounts below DIR are detached first, deepest first, and rm never
# crosses into a file system it could not detach.
clear_build_tree() {
	local dir=$1 real m
	[[ -e "$dir" ]] || return 0
	real=$(realpath -- "$dir") # mountinfo names mounts by their resolved path
	while read -r m; do
		umount -l "$m"
	done < <(awk -v d="$real/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
	rm -rf --one-file-system "$dir"
}

# rootfs_complete DIR: whether the tree at DIR has every file of
# ROOTFS_FILES; names the first one missing on stderr otherwise (a cached
# tree lacking one is built again; a fresh build lacking one fails). A tree
# only reaches its cached place whole (built in .tmp, then renamed), but a
# cached tree can lose files afterwards (a hand edit, a disk error, a box
# booted on it without the overlay): its etc/debian_version alone passed it,
# and every box booted from it failed later with no word of the tree (no
# sshd: the key delivery's wait timed out).
rootfs_complete() {
	local f
	[[ -d "$1" ]] || return 1
	for f in $ROOTFS_FILES; do
		if [[ ! -e "$1/$f" ]]; then
			echo "install-test-tools: the root filesystem $1 lacks $f" >&2
			return 1
		fi
	done
}

install_rootfs() {
	local key dest
	key=$(printf '%s\n' "$ROOTFS_SUITE" "$ROOTFS_MIRROR" "$ROOTFS_PACKAGES" | sha256sum | cut -c1-16)
	dest="$cache/rootfs/$ROOTFS_SUITE-$key"
	lock_tool rootfs
	if ! rootfs_complete "$dest"; then
		if [[ $(id -u) -ne 0 ]]; then
			if [[ "${CI:-}" == "true" ]]; then
				echo "install-test-tools: the machine tests' root filesystem needs root to build (debootstrap)" >&2
				return 1
			fi
			echo "install-test-tools: not root: the machine tests' root filesystem is not built; they will skip" >&2
			return 0
		fi
		if ! command -v debootstrap >/dev/null 2>&1 || ! command -v systemd-nspawn >/dev/null 2>&1; then
			echo "install-test-tools: installing debootstrap and systemd-container (apt)" >&2
			{ apt-get update && apt-get install -y --no-install-recommends debootstrap systemd-container; } >&2
		fi
		echo "install-test-tools: building the $ROOTFS_SUITE root filesystem (cached in $dest; a few minutes cold)" >&2
		clear_build_tree "$dest.tmp"
		mkdir -p "$dest.tmp"
		# debootstrap's progress goes to stderr: standard output is the tool
		# directory's path alone (contrib/test.sh reads it).
		if ! debootstrap --variant=minbase --include="$ROOTFS_PACKAGES" \
			"$ROOTFS_SUITE" "$dest.tmp" "$ROOTFS_MIRROR" >&2; then
			echo "install-test-tools: debootstrap failed (log: $dest.tmp/debootstrap/debootstrap.log)" >&2
			return 1
		fi
		chroot "$dest.tmp" apt-get clean >&2
		if ! rootfs_complete "$dest.tmp"; then
			return 1
		fi
		clear_build_tree "$dest"
		mv "$dest.tmp" "$dest"
	fi
	ln -sfn "$dest" "$repo/.tools/rootfs"
}

if [[ "${1:-}" == "--rootfs" ]]; then
	install_rootfs
	exit 0
fi

# apt_install WHAT NOT_ROOT_CI NOT_ROOT PACKAGE...: install Debian's
# PACKAGEs for the missing WHAT when root (apt's progress goes to stderr:
# this script's standard output is the tool directory's path alone, which
# contrib/test.sh reads). Without root it says NOT_ROOT_CI and fails under
# CI=true (a missing tool must not turn a CI run green), else says NOT_ROOT
# (the tests that need it skip) and returns 1.
apt_install() {
	local what=$1 ci_msg=$2 msg=$3
	shift 3
	if [[ $(id -u) -eq 0 ]]; then
		echo "install-test-tools: installing $what (apt: $*)" >&2
		{ apt-get update && apt-get install -y --no-install-recommends "$@"; } >&2
	elif [[ "${CI:-}" == "true" ]]; then
		echo "install-test-tools: $what is missing and this is not root: $ci_msg" >&2
		exit 1
	else
		echo "install-test-tools: $what is missing (run as root to install it); $msg" >&2
		return 1
	fi
}

# Debian's chromium drives the console's browser tests (chromedp talks to
# /usr/bin/chromium over a pipe; no chromedriver).
if ! command -v /usr/bin/chromium >/dev/null 2>&1; then
	apt_install chromium "the browser tests cannot run" "the browser tests will skip" chromium || true
fi

# Debian's prometheus package brings promtool, which checks and unit-tests
# contrib/prometheus/chalupa-alerts.yml (`promtool check rules`, `promtool
# test rules`; docs/operations.md, "Alerts"). Only promtool is wanted:
# where systemd runs, the package's own Prometheus service, started by the
# install, is stopped and disabled again.
if ! command -v /usr/bin/promtool >/dev/null 2>&1; then
	if apt_install promtool "the Prometheus rules cannot be tested" "the Prometheus rules tests will skip" prometheus &&
		[[ -d /run/systemd/system ]] && systemctl is-enabled --quiet prometheus.service 2>/dev/null; then
		echo "install-test-tools: stopping and disabling the prometheus service the package started (only promtool is used)" >&2
		systemctl disable --now prometheus.service >&2 || true
	fi
fi

# Debian's shellcheck checks every shell script of the repository in
# contrib/test.sh's lint step, and the scripts chalupa renders into
# cloud-init user data or runs over SSH in pulumiexec/sshdeliver's
# TestShellScripts (settings: .shellcheckrc).
if ! command -v /usr/bin/shellcheck >/dev/null 2>&1; then
	apt_install shellcheck "the shell scripts cannot be checked" "the shell script checks will skip" shellcheck || true
fi

# Node.js and npm run the npm tools (install_npm_tools below): from the
# machine, or Debian's nodejs and npm packages, here and not beside the
# parallel builds below (two apt-get runs contend for dpkg's lock).
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
	apt_install "node and npm" "the OpenAPI and MCP interface checks cannot run" "the OpenAPI and MCP interface checks will skip" nodejs npm || true
fi

# install NAME VERSION MODULE_PATH [env...]: go install into the cache, keyed by
# tool and version, then link into .tools/bin.
install_tool() {
	local name=$1 version=$2 pkg=$3 t0
	shift 3
	local dest="$cache/$name/$version"
	lock_tool "$name"
	if [[ ! -x "$dest/$name" ]]; then
		echo "install-test-tools: building $name $version (cached in $dest)" >&2
		t0=$(date +%s)
		rm -rf "$dest.tmp"
		mkdir -p "$dest.tmp"
		env "$@" GOBIN="$dest.tmp" go install "$pkg@$version"
		rm -rf "$dest"
		mv "$dest.tmp" "$dest"
		echo "install-test-tools: built $name $version in $(($(date +%s) - t0))s" >&2
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
	local dest="$cache/pulumi/$PULUMI_VERSION" t0
	lock_tool pulumi
	if [[ ! -x "$dest/pulumi" ]]; then
		echo "install-test-tools: building pulumi $PULUMI_VERSION (cached in $dest; 15-20 min cold)" >&2
		t0=$(date +%s)
		rm -rf "$dest.tmp"
		mkdir -p "$dest.tmp"
		CGO_ENABLED=0 go build -C "$repo/contrib/tools/pulumi" -trimpath -o "$dest.tmp/pulumi" \
			-ldflags "-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$PULUMI_VERSION" \
			github.com/pulumi/pulumi/pkg/v3/cmd/pulumi
		rm -rf "$dest"
		mv "$dest.tmp" "$dest"
		echo "install-test-tools: built pulumi $PULUMI_VERSION in $(($(date +%s) - t0))s" >&2
	fi
	ln -sf "$dest/pulumi" "$bin/pulumi"
}

# install_npm_tools: the interface checkers from the npm registry — Redocly's
# OpenAPI linter (redocly), one independent client generator
# (openapi-typescript) with the TypeScript compiler that compiles its output
# (tsc), and the MCP inspector's CLI (mcp-inspector); docs/operations.md,
# "OpenAPI" and "MCP server". Every version, transitive ones included, is
# pinned by contrib/tools/npm/package-lock.json; `npm ci` installs exactly
# that into the cache under a hash of the lock file (about 20 s and 170 MB
# cold), so a changed pin installs anew and an unchanged one never does.
# Install scripts are not run: the inspector's only one fetches its web
# clients, which its --cli mode does not use.
NPM_TOOLS="redocly openapi-typescript tsc mcp-inspector"
install_npm_tools() {
	local src="$repo/contrib/tools/npm" key dest t
	if ! command -v npm >/dev/null 2>&1; then
		return 0 # said above, with the installs from Debian
	fi
	key=$(cat "$src/package.json" "$src/package-lock.json" | sha256sum | cut -c1-16)
	dest="$cache/npm/$key"
	lock_tool npm
	if [[ ! -x "$dest/node_modules/.bin/redocly" ]]; then
		echo "install-test-tools: installing the npm tools ($NPM_TOOLS; cached in $dest)" >&2
		rm -rf "$dest.tmp"
		mkdir -p "$dest.tmp"
		cp "$src/package.json" "$src/package-lock.json" "$dest.tmp/"
		(cd "$dest.tmp" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error) >&2
		rm -rf "$dest"
		mv "$dest.tmp" "$dest"
	fi
	for t in $NPM_TOOLS; do
		ln -sf "$dest/node_modules/.bin/$t" "$bin/$t"
	done
}

install_tool litestream "$LITESTREAM_VERSION" github.com/benbjohnson/litestream/cmd/litestream CGO_ENABLED=0 &
lpid=$!
install_tool versitygw "$VERSITYGW_VERSION" github.com/versity/versitygw/cmd/versitygw CGO_ENABLED=0 &
vpid=$!
install_tool mailpit "$MAILPIT_VERSION" github.com/axllent/mailpit CGO_ENABLED=0 &
mpid=$!
install_tool staticcheck "$STATICCHECK_VERSION" honnef.co/go/tools/cmd/staticcheck &
spid=$!
install_pulumi &
ppid=$!
install_rootfs &
rpid=$!
install_npm_tools &
npid=$!
rc=0
wait "$lpid" || rc=1
wait "$vpid" || rc=1
wait "$mpid" || rc=1
wait "$spid" || rc=1
wait "$ppid" || rc=1
wait "$rpid" || rc=1
wait "$npid" || rc=1
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
