#!/usr/bin/env bash
# qperf over the preload library: rds_lat and rds_bw between two preloaded qperf processes on
# loopback (embedded nodes: the server's RDS socket on the address it is reached at, the
# client's on 127.0.0.1), next to qperf's tcp_lat and tcp_bw in the same run, and the ratios.
# Not part of the CI test run (tests/tests/preload.rs runs qperf as a test).
# Usage: scripts/bench-preload.sh [seconds per test, default 5] [server address, default 127.21.9.2]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
ADDR=${2:-127.21.9.2}
PORT=19922
command -v qperf >/dev/null || { echo "bench-preload: qperf is missing (apt-get install qperf)" >&2; exit 1; }
cargo build -q --release -p rds-preload
T=${CARGO_TARGET_DIR:-target}
case $T in
/*) ;;
*) T=$(pwd)/$T ;;
esac
LIB=$T/release/librds_preload.so
export RDS_NO_DAEMON=1 RDS_RUNTIME_DIR=${TMPDIR:-/tmp}/bench-preload.$$
LD_PRELOAD=$LIB qperf -lp "$PORT" >/dev/null 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; rm -rf "$RDS_RUNTIME_DIR"' EXIT
# One client per test, retried while the server does not listen (qperf listens anew after
# each test).
run() {
	local out
	for _ in $(seq 1 50); do
		out=$(LD_PRELOAD=$LIB timeout $((SECS + 30)) qperf -lp "$PORT" -t "$SECS" "$ADDR" "$1" 2>&1) || true
		case $out in
		*"Connection refused"*) sleep 0.2 ;;
		*) break ;;
		esac
	done
	# The figure and its unit ("57.3 us", "152 MB/sec").
	awk '$2 == "=" { print $3, $4; found = 1; exit } END { if (!found) print "0 ?" }' <<<"$out"
	[[ $out == *"latency"* || $out == *"bw"* ]] || echo "bench-preload: $1: $out" >&2
}
rds_lat=$(run rds_lat)
tcp_lat=$(run tcp_lat)
rds_bw=$(run rds_bw)
tcp_bw=$(run tcp_bw)
python3 - "$rds_lat" "$tcp_lat" "$rds_bw" "$tcp_bw" <<'PY'
import sys
SCALE = {"ns": 1e-3, "us": 1, "ms": 1e3, "sec": 1e6, "bytes/sec": 1, "KB/sec": 1e3,
         "MB/sec": 1e6, "GB/sec": 1e9}
def value(s):
    n, unit = s.split()
    return float(n) * SCALE.get(unit, float("nan"))
rl, tl, rb, tb = (value(x) for x in sys.argv[1:])
print(f"latency    rds_lat {rl:9.1f} us     tcp_lat {tl:9.1f} us     rds/tcp {rl / tl:6.2f}")
print(f"bandwidth  rds_bw  {rb / 1e6:9.1f} MB/s   tcp_bw  {tb / 1e6:9.1f} MB/s   rds/tcp {rb / tb:6.3f}")
PY
