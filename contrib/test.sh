#!/usr/bin/env bash
# Runs chalupa's tests: the README's test commands; .ci/run calls the full run.
#
# Usage: contrib/test.sh                  the full run: every test of every package
#        contrib/test.sh --fast           the fast lane, for the edit-test loop
#        contrib/test.sh [--fast] --plan  print the lane's go test commands, run nothing
#
# Both lanes
# 1. install the real components the tests drive (litestream CLI, versitygw,
#    the pulumi CLI, the machine tests' Debian root filesystem) and
#    staticcheck through contrib/install-test-tools.sh, cached per tool and
#    version in the user's cache directory;
# 2. check formatting, go vet and staticcheck.
#
# The fast lane then runs every package but the end-to-end ones (e2e/…) once,
# under the race detector and -short: under -short the harness helpers that
# build the binary or run pulumi, Chromium or `litestream restore` skip their
# tests (internal/proctest.FullRunOnly), so what is left is every unit and
# in-process test.
#
# The full run never passes -short. It runs every package under the race
# detector except the end-to-end lane, which runs without it: those tests
# drive a separately built binary, so -race there would only slow the test
# process. Packages come from `go list ./...`, so a new package (cli/, a new
# e2e/ package) is in both lanes without an edit here;
# internal/archtest.TestLanesRunEveryPackage checks that against --plan.
#
# Both lanes pass -vet=off to go test: lint has just run the whole of go vet
# over every package, and go test's own vet (a subset of its analyzers,
# cached under another key) would only vet again every package an edit
# touched.
#
# The fast lane's budget is 4 minutes wall on a 2-vCPU machine with warm
# tool and build caches. How it was measured, and how to measure it again:
# per test binary, the CPU and wall time through
#   go test -race -short -count=1 -exec WRAPPER -json PACKAGES
# where WRAPPER runs `/usr/bin/time -a -o LOG -f '%U %S %e %C' "$@"`, and
# per test the -json Elapsed. CPU time is the figure to compare on a shared
# machine: the lane is CPU-bound, so its wall on an idle machine is about
# the total CPU (tests plus linking) over the two CPUs. See
# docs/architecture.md, "Tests", for the figures.
#
# Under CI=true a missing tool fails the run instead of skipping its tests.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v go >/dev/null || { echo "test.sh: go is not installed" >&2; exit 1; }

lane=full plan=0
for arg in "$@"; do
	case $arg in
	--fast) lane=fast ;;
	--plan) plan=1 ;;
	*)
		echo "usage: contrib/test.sh [--fast] [--plan]" >&2
		exit 2
		;;
	esac
done
module=$(go list -m)

# phase NAME COMMAND...: runs COMMAND (a function or a program of this
# script), printing "test.sh: NAME …" on stderr when it starts and its time
# when it ends, so a slow step (a cold tool build, lint on a loaded machine)
# is never silence (docs/architecture.md, "Tests"). COMMAND runs as the
# condition of an if, where set -e does not apply: each step below returns
# its own failure.
phase() {
	local name=$1 t0 rc=0
	shift
	echo "test.sh: $name …" >&2
	t0=$(date +%s)
	"$@" || rc=$?
	if ((rc == 0)); then
		echo "test.sh: $name: done in $(($(date +%s) - t0))s" >&2
	else
		echo "test.sh: $name: FAILED after $(($(date +%s) - t0))s" >&2
	fi
	return "$rc"
}

# install_tools installs the test tools (contrib/install-test-tools.sh
# prints their directory on stdout, its progress on stderr) and puts them
# first on PATH.
install_tools() {
	bin=$(contrib/install-test-tools.sh) || return 1
	export PATH="$bin:$PATH"
}

# check_gofmt fails naming every file gofmt would change.
check_gofmt() {
	local gofiles unformatted
	mapfile -t gofiles < <(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.tools/*')
	unformatted=$(gofmt -l "${gofiles[@]}") || return 1
	if [[ -n "$unformatted" ]]; then
		echo "test.sh: gofmt would change:" >&2
		echo "$unformatted" >&2
		return 1
	fi
}

# check_staticcheck runs the linked staticcheck, never one from elsewhere on
# PATH: its version is pinned.
check_staticcheck() {
	if [[ ! -x "$bin/staticcheck" ]]; then
		echo "test.sh: $bin/staticcheck is missing (contrib/install-test-tools.sh builds it)" >&2
		return 1
	fi
	"$bin/staticcheck" ./...
}

# check_shell runs shellcheck (Debian's, installed by
# contrib/install-test-tools.sh; settings and the optional checks it enables
# in .shellcheckrc) on every shell script of the repository: each tracked
# file named *.sh or starting with a #! line naming sh or bash (contrib/,
# .ci/run). The scripts chalupa renders into cloud-init or runs over SSH
# are checked by pulumiexec/sshdeliver's TestShellScripts. When the tool
# is missing it says so and passes, except under CI=true.
check_shell() {
	local scripts
	if [[ ! -x /usr/bin/shellcheck ]]; then
		if [[ "${CI:-}" == "true" ]]; then
			echo "test.sh: /usr/bin/shellcheck is missing (CI=true: run contrib/install-test-tools.sh as root)" >&2
			return 1
		fi
		echo "test.sh: /usr/bin/shellcheck is missing (run contrib/install-test-tools.sh as root); shell scripts not checked" >&2
		return 0
	fi
	# shellcheck disable=SC2016 # awk's $0, not the shell's
	mapfile -t scripts < <(git ls-files -z | xargs -0 awk 'FNR == 1 { if (FILENAME ~ /\.sh$/ || $0 ~ /^#!.*[\/ ](ba)?sh( |$)/) print FILENAME; nextfile }')
	if ((${#scripts[@]} == 0)); then
		echo "test.sh: no shell scripts found (git ls-files)" >&2
		return 1
	fi
	/usr/bin/shellcheck "${scripts[@]}"
}

# lint installs the test tools and checks formatting, vet, staticcheck and
# the shell scripts, each a phase.
lint() {
	phase "installing the test tools (contrib/install-test-tools.sh)" install_tools || exit 1
	phase "gofmt" check_gofmt || exit 1
	phase "go vet" go vet ./... || exit 1
	phase "staticcheck" check_staticcheck || exit 1
	phase "shellcheck" check_shell || exit 1
}

# gotest runs go test with its output also kept in a file; when it fails,
# the failures' own lines (--- FAIL, each t.Error's first line, panics) are
# printed again at the very end, where a log viewer that shows only the tail
# of a run still finds them: a failing end-to-end test prints up to 32 KiB of
# each daemon's log after its message.
out=$(mktemp)
trap 'rm -f "$out"' EXIT
gotest() {
	if go test "$@" 2>&1 | tee "$out"; then
		return 0
	fi
	echo
	echo "test.sh: go test $* failed; its failures (the full output is above):"
	grep -E '^[[:space:]]*--- FAIL|^    [[:space:]]*[A-Za-z0-9_]+\.go:[0-9]+: |^(FAIL|panic:)|^[[:space:]]+Test[A-Za-z0-9_/]+ \(' "$out" | cut -c1-400 || true
	return 1
}

# Every package goes to exactly one list of the full run: race, or norace
# (the end-to-end lane); the fast lane is every package outside e2e/.
race=() norace=() fast=()
for p in $(go list ./...); do
	if [[ $p == "$module"/e2e || $p == "$module"/e2e/* ]]; then
		norace+=("$p")
		continue
	fi
	fast+=("$p")
	race+=("$p")
done

# The fast lane compiles the SQLite driver (modernc.org/…: C translated to
# Go, unsafe pointer arithmetic throughout) without -race's checkptr
# instrumentation, which checks every unsafe.Pointer conversion at run time
# and, in that code, costs about 45% of the CPU of opening and migrating a
# database. The race detector itself still instruments every package, and
# the full run keeps checkptr everywhere.
fast_gcflags='-gcflags=modernc.org/...=-d=checkptr=0'
if [[ $lane == fast ]]; then
	plans=("go test -race -short -vet=off $fast_gcflags -timeout 10m -count=1 ${fast[*]}")
else
	plans=("go test -race -vet=off -timeout 30m -count=1 ${race[*]}")
	if ((${#norace[@]})); then
		plans+=("go test -vet=off -timeout 45m -count=1 ${norace[*]}")
	fi
fi
if [[ $plan == 1 ]]; then
	printf '%s\n' "${plans[@]}"
	exit 0
fi

lint

start=$(date +%s)
# One build setting with the README's commands, so one warms the build
# cache for the other: CGO_ENABLED=0 (nothing in chalupa needs cgo; its
# SQLite is modernc.org's pure-Go translation), as the binaries the
# end-to-end tests build (proctest.BuildBinary) use — except under -race,
# which needs cgo and has a build cache of its own anyway.
for i in "${!plans[@]}"; do
	p=${plans[i]}
	cgo=0
	[[ $p != *" -race "* ]] || cgo=1
	# shellcheck disable=SC2086 # each plan is a word list without spaces inside a word
	CGO_ENABLED=$cgo phase "go test, $lane run part $((i + 1)) of ${#plans[@]} (CGO_ENABLED=$cgo)" gotest ${p#go test } || exit 1
done
echo "test.sh: all tests of the $lane run passed in $(( $(date +%s) - start ))s"
