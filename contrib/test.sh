#!/usr/bin/env bash
# Runs every test of chalupa: the README's test command, and what .ci/run calls.
#
# 1. installs the real components the tests drive (litestream CLI, versitygw,
#    the pulumi CLI)
#    and staticcheck through contrib/install-test-tools.sh, cached per tool and
#    version in the user's cache directory;
# 2. checks formatting, go vet and staticcheck;
# 3. runs the packages with concurrency (storage, ingest, daemon, reaper, jobs, console, mcpserver) under the
#    race detector, and the rest (the end-to-end tests in the root package,
#    contrib) without it: the e2e tests drive a separately built binary, so
#    -race there would only slow the test process.
#
# Under CI=true a missing tool fails the run instead of skipping its tests.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v go >/dev/null || { echo "test.sh: go is not installed" >&2; exit 1; }

bin=$(contrib/install-test-tools.sh)
export PATH="$bin:$PATH"

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.tools/*'))
if [[ -n "$unformatted" ]]; then
	echo "test.sh: gofmt would change:" >&2
	echo "$unformatted" >&2
	exit 1
fi
go vet ./...
# The linked binary, never one from elsewhere on PATH: its version is pinned.
if [[ ! -x "$bin/staticcheck" ]]; then
	echo "test.sh: $bin/staticcheck is missing (contrib/install-test-tools.sh builds it)" >&2
	exit 1
fi
"$bin/staticcheck" ./...

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

start=$(date +%s)
gotest -race -timeout 20m -count=1 ./storage/... ./ingest/... ./agent/... ./adminapi/... ./daemon/... ./reaper/... ./digitalocean/... ./jobs/... ./boxes/... ./console/... ./mcpserver/...
gotest -timeout 45m -count=1 . ./internal/... ./contrib/... ./pulumiexec/...
echo "test.sh: all tests passed in $(( $(date +%s) - start ))s"
