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
if [ "$(id -u)" != 0 ]; then
	echo "bench-lab-smp.sh: needs root (the lab uses network namespaces, taps and qemu)" >&2
	exit 2
fi
if [ -z "${RDS_TOOLS_GIT:-}" ]; then
	echo "bench-lab-smp.sh: RDS_TOOLS_GIT is not set: it names a git clone of" \
		"oracle/rds-tools, from which tests/lab/build-c-rds-stress.sh builds the original C" \
		"rds-stress (git clone --bare https://github.com/oracle/rds-tools rds-tools.git;" \
		"RDS_TOOLS_GIT=\$PWD/rds-tools.git $0)" >&2
	exit 2
fi
export RDS_TOOLS_GIT
case ${BENCH_SECS:-5} in '' | *[!0-9]*) echo "bench-lab-smp.sh: BENCH_SECS wants whole seconds, got '$BENCH_SECS'" >&2; exit 2 ;; esac
# The C program first: a wrong RDS_TOOLS_GIT fails here, before anything is built or booted.
tests/lab/build-c-rds-stress.sh 2.0.7 >/dev/null
# Every wait inside the test is bounded; this is the outer bound of each step.
timeout --kill-after=30 "${BENCH_TIMEOUT:-900}" \
	cargo build -q --release -p rds-stress --bins --example raw_tcp
exec timeout --kill-after=30 "${BENCH_TIMEOUT:-900}" \
	cargo test -q -p rds-tests --release --test bench_lab_smp -- \
	--ignored --exact --nocapture --test-threads 1 bench_lab_smp
