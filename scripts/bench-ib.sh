#!/usr/bin/env bash
# RDS over soft-RoCE (rxe) in the kernel interop lab: our stack next to perftest
# (ib_send_bw / ib_send_lat, RC) and the kernel's rds_rdma, same two guests, same sizes, one
# lab boot (tests/tests/bench_ib.rs has the details). Prints per size and contender msgs/s,
# MB/s, one-way latency (round trip / 2) median and p99, and the ratios ours/kernel and
# ours/ib_send. Emulated (TCG): the ratios matter, not the absolute numbers.
# Not part of the CI test run; needs root (namespaces, taps, qemu).
# Usage: scripts/bench-ib.sh [TPUT_PLAN [RR_PLAN]]
#   plans are SIZE:COUNT,... (defaults 64:1000,4096:500,65536:100 and 64:300,4096:200,65536:50)
#   BENCH_PERFTEST_ARGS (default -e: completion events instead of busy polling)
#   BENCH_CAPTURES=DIR keeps the captures of the lab bridge (one per contender and round; the
#   run prints each one's profile of its longest run of round trips: turnarounds, packets)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
	echo "bench-ib.sh: needs root (the lab uses network namespaces, taps and qemu)" >&2
	exit 2
fi
[ $# -ge 1 ] && export BENCH_TPUT=$1
[ $# -ge 2 ] && export BENCH_RR=$2
# Every wait inside the test is bounded; this is the outer bound of the whole run.
exec timeout --kill-after=30 ${BENCH_TIMEOUT:-3600} \
	cargo test -q -p rds-tests --release --test bench_ib -- \
	--ignored --exact --nocapture --test-threads 1 bench_ib
