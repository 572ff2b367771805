#!/bin/sh
# contrib/console-pages.sh — the console's page budget (docs/operations.md,
# "Console"): every page ≤ 100 KB and ≤ 50 ms of server time on one core,
# over 100 active deployments with 7 days of one-minute windows each
# (console.BenchmarkPageBudget seeds them into a real SQLite file).
#
# Usage: contrib/console-pages.sh [COUNT]   (default 20 renders a page)
# Pins the benchmark to CPU 0 (taskset) with GOMAXPROCS 1, as on a
# one-vCPU droplet. Prints ns/op (server time of one render), cpu-ms/op
# (the process's CPU time per render, which other load on the core does
# not inflate) and page-bytes; run it on a quiet machine and compare runs
# on one machine.
set -eu
cd "$(dirname "$0")/.."
count=${1:-20}
go test -c -o tmp/console.test ./console/
exec taskset -c 0 env GOMAXPROCS=1 tmp/console.test -test.run '^$' \
	-test.bench '^BenchmarkPageBudget$' -test.benchtime "${count}x" -test.cpu 1 -test.benchmem
