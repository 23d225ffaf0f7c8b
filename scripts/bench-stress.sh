#!/usr/bin/env bash
# rds-stress against raw TCP on loopback, same traffic pattern (requests + acks, both ways):
#   throughput: -q 1048576 -a 256 -d 4
#   message rate: -q 64 -a 64 -d 32 -t 2
# Prints rds-stress's average tx/s and tx+rx K/s next to the raw TCP figures, and the ratios.
# Not part of the CI test run. Usage: scripts/bench-stress.sh [seconds, default 5]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
cargo build -q --release -p rds-stress --bin rds-stress --example raw_tcp
RS=target/release/rds-stress
RAW=target/release/examples/raw_tcp
export RDS_NO_DAEMON=1
run_case() {
	local name=$1 q=$2 a=$3 d=$4 t=$5
	local js rs_tx rs_kib raw raw_tx raw_kib
	js=$($RS --loopback -r 127.0.0.1 -s 127.0.0.2 -q "$q" -a "$a" -d "$d" -t "$t" -T "$SECS" -z --json 2>/dev/null)
	rs_tx=$(python3 -c 'import json,sys; print("%.1f" % json.load(sys.stdin)["tx_per_sec"])' <<<"$js")
	rs_kib=$(python3 -c 'import json,sys; print("%.1f" % json.load(sys.stdin)["tx_rx_kib_per_sec"])' <<<"$js")
	raw=$($RAW "$q" "$a" "$d" "$t" "$SECS")
	raw_tx=${raw#tx_per_sec=}; raw_tx=${raw_tx%% *}
	raw_kib=${raw#*kib_per_sec=}
	printf '%-22s rds-stress %12s req/s %14s KiB/s | raw TCP %12s req/s %14s KiB/s | ratio %.3f\n' \
		"$name" "$rs_tx" "$rs_kib" "$raw_tx" "$raw_kib" \
		"$(python3 -c "print($rs_tx / $raw_tx if $raw_tx else 0)")"
}
run_case "throughput (1M/256/d4)" 1048576 256 4 1
run_case "rate (64/64/d32/t2)" 64 64 32 2
