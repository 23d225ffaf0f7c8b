#!/usr/bin/env bash
# rds-stress between two processes through one host daemon (`rds-ctrl daemon tcp`), both
# sockets on the daemon: 64 B -t1 -d1 and 1 MiB -a 256 -d4, on all CPUs and under
# `taskset -c 0` (everything on one CPU). With BASE=DIR, the same cases also run with the
# binaries in DIR (rds-stress, rds-ctrl) back to back, and the ratio new/base is printed.
# Not part of the CI test run. Usage: scripts/bench-daemon.sh [seconds, default 3]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-3}
NEW=${NEW:-${CARGO_TARGET_DIR:-target}/release}
A=127.20.9.1
B=127.20.9.2
run_case() { # bindir pin q a d -> req/s
	local bin=$1 pin=$2 q=$3 a=$4 d=$5 dir pre=() dpid ppid out
	dir=$(mktemp -d)
	[ "$pin" = 1 ] && pre=(taskset -c 0)
	RDS_RUNTIME_DIR=$dir/run RDS_CONFIG=$dir/rds.conf "${pre[@]}" "$bin/rds-ctrl" daemon tcp \
		--addr $A --addr $B >"$dir/daemon.log" 2>&1 </dev/null &
	dpid=$!
	for _ in $(seq 50); do [ -S "$dir/run/rds.sock" ] && break; sleep 0.1; done
	RDS_RUNTIME_DIR=$dir/run "${pre[@]}" "$bin/rds-stress" -r $A -p 4400 >"$dir/passive.log" 2>&1 &
	ppid=$!
	sleep 0.3
	out=$(RDS_RUNTIME_DIR=$dir/run "${pre[@]}" "$bin/rds-stress" -r $B -s $A -p 4400 \
		-q "$q" -a "$a" -d "$d" -t 1 -T "$SECS" -z --json 2>"$dir/active.err" || true)
	kill "$ppid" 2>/dev/null || true
	kill "$dpid" 2>/dev/null || true
	wait "$ppid" 2>/dev/null || true
	wait "$dpid" 2>/dev/null || true
	python3 -c 'import json,sys
try: print("%.0f" % json.load(sys.stdin)["tx_per_sec"])
except Exception: print(0)' <<<"$out"
	rm -rf "$dir"
}
for pin in 0 1; do
	for c in "64 64 1" "1048576 256 4"; do
		set -- $c
		n=$(run_case "$NEW" $pin "$1" "$2" "$3")
		if [ -n "${BASE:-}" ]; then
			b=$(run_case "$BASE" $pin "$1" "$2" "$3")
			printf '%-24s cpu0=%s  new %8s req/s  base %8s req/s  ratio %s\n' "q=$1 a=$2 d=$3" $pin \
				"$n" "$b" "$(python3 -c "print('%.2f' % ($n / $b) if $b else 'n/a')")"
		else
			printf '%-24s cpu0=%s  %8s req/s\n' "q=$1 a=$2 d=$3" $pin "$n"
		fi
	done
done
