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

start=$(date +%s)
go test -race -timeout 20m -count=1 ./storage/... ./ingest/... ./daemon/... ./reaper/... ./jobs/... ./boxes/... ./console/... ./mcpserver/...
go test -timeout 45m -count=1 . ./internal/... ./contrib/... ./converge/...
echo "test.sh: all tests passed in $(( $(date +%s) - start ))s"
