#!/usr/bin/env bash
# Issue 32's row rds-stress -t 2 -d 32 (64 B requests and acks; target ours >= 0.5x raw TCP)
# against the kernel's own RDS, in one boot of the kernel interop lab with TWO vCPUs per qemu
# TCG guest (LAB_SMP=2), between the two guests over TCP: the original C rds-stress on the
# kernel's RDS/TCP, the raw_tcp example (the same traffic over plain TCP, --listen in g2,
# --connect in g1), and our rds-stress as embedded nodes on RDS/TCP (the kernel's rds_tcp and
# rds removed first); also at -t 1 -d 1. Prints per pattern kernel, raw TCP and ours req/s
# with kernel/raw, ours/raw and ours/kernel (tests/tests/bench_lab_smp.rs has the details).
# Not part of the CI test run; needs root (namespaces, taps, qemu) and a git clone of
# oracle/rds-tools for the C rds-stress (the project keeps no copy of it).
# Usage: RDS_TOOLS_GIT=/path/to/rds-tools.git scripts/bench-lab-smp.sh
#   BENCH_SECS  -T of each run (default 5); BENCH_TIMEOUT outer limit in seconds (default 900)
set -euo pipefail
cd "$(dirname "$0")/.."
# Root, RDS_TOOLS_GIT, BENCH_SECS; then the C program: a wrong RDS_TOOLS_GIT fails here,
# before anything is built or booted.
. scripts/lib/lab-bench.sh
lab_bench_checks bench-lab-smp.sh
# Every wait inside the test is bounded; this is the outer bound of each step.
timeout --kill-after=30 "${BENCH_TIMEOUT:-900}" \
	cargo build -q --release -p rds-stress --bins --example raw_tcp
exec timeout --kill-after=30 "${BENCH_TIMEOUT:-900}" \
	cargo test -q -p rds-tests --release --test bench_lab_smp -- \
	--ignored --exact --nocapture --test-threads 1 bench_lab_smp
