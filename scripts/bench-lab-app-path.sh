#!/usr/bin/env bash
# Issue 19's one-CPU rows in the kernel interop lab, one boot of two qemu TCG guests (1 vCPU
# each, Debian's 6.1 kernel): the original C rds-stress on the kernel's RDS next to our
# rds-stress on our stack, 64 B requests and acks -t 1 -d 1 and -t 2 -d 32, and 64 KiB -d 4,
#   - between the two guests over TCP (kernel rds_tcp / our embedded nodes),
#   - inside one guest between two of its addresses (the kernel's loopback transport / two
#     clients of our daemon; our rds-stress --loopback as an extra, informational row).
# Prints per row kernel req/s, ours req/s (the (average) line's tx/s of the active side),
# ours/kernel and the issue's target (tests/tests/bench_lab_app_path.rs has the details), then
# where the two-guest depth-1 and 64 KiB time goes: a capture on the lab bridge split into
# each guest's turnaround and packets per round trip, both guests' CPU over the run, for the
# kernel, ours and qperf tcp_lat between the same guests; then qperf bandwidth between the
# guests at rds_bw's default size (8 KiB; tcp_bw's is 64 KiB, so that row runs it at 8 KiB),
# -m 4096 and -m 65536: rds_bw on the kernel's RDS/TCP, tcp_bw, and rds_bw preloaded with our
# librds_preload.so in both guests (embedded nodes, RDS/TCP), with kernel/tcp, ours/tcp,
# ours/kernel and issue 32's target (ours/tcp >= 0.5).
# Not part of the CI test run; needs root (namespaces, taps, qemu) and a git clone of
# oracle/rds-tools for the C rds-stress (the project keeps no copy of it).
# Usage: RDS_TOOLS_GIT=/path/to/rds-tools.git scripts/bench-lab-app-path.sh
#   BENCH_SECS  -T of each run (default 5); BENCH_TIMEOUT outer limit in seconds (default 1200)
#   BENCH_CAPTURES=DIR keeps the captures (read one again: BENCH_PCAP=FILE cargo test --release
#   -p rds-tests --test bench_lab_app_path -- --ignored --nocapture profile_pcap)
set -euo pipefail
cd "$(dirname "$0")/.."
# Root, RDS_TOOLS_GIT, BENCH_SECS; then the C program: a wrong RDS_TOOLS_GIT fails here,
# before anything is built or booted.
. scripts/lib/lab-bench.sh
lab_bench_checks bench-lab-app-path.sh
# Every wait inside the test is bounded; this is the outer bound of the whole run.
timeout --kill-after=30 "${BENCH_TIMEOUT:-1200}" \
	cargo build -q --release -p rds-stress -p rds-ctrl -p rds-preload
exec timeout --kill-after=30 "${BENCH_TIMEOUT:-1200}" \
	cargo test -q -p rds-tests --release --test bench_lab_app_path -- \
	--ignored --exact --nocapture --test-threads 1 bench_lab_app_path
