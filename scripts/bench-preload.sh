#!/usr/bin/env bash
# qperf over the preload library: rds_lat and rds_bw between two preloaded qperf processes on
# loopback (embedded nodes: the server's RDS socket on the address it is reached at, the
# client's on 127.0.0.1), next to qperf's tcp_lat and tcp_bw in the same run, and the ratios.
# With --vs OTHER.so (e.g. main's library built into another target directory), also rounds
# of the rds tests through both libraries, and this library's medians over OTHER's.
# Not part of the CI test run (tests/tests/preload.rs runs qperf as a test).
# Usage: [ROUNDS=n] scripts/bench-preload.sh [--vs OTHER.so] [seconds per test, default 5]
#        [server address, default 127.21.9.2]
set -euo pipefail
cd "$(dirname "$0")/.."
VS=
if [[ ${1:-} == --vs ]]; then
	VS=${2:?bench-preload: --vs needs a library path}
	[[ -f $VS ]] || { echo "bench-preload: --vs: $VS is not a file" >&2; exit 2; }
	VS=$(realpath "$VS")
	shift 2
fi
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
server=
trap '[[ -n $server ]] && kill "$server" 2>/dev/null; rm -rf "$RDS_RUNTIME_DIR"' EXIT
# Starts a qperf server preloaded with library $1 ("" for none).
serve() {
	[[ -n $server ]] && { kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true; }
	LD_PRELOAD=$1 qperf -lp "$PORT" >/dev/null 2>&1 &
	server=$!
}
# One client of test $2 preloaded with library $1, retried while the server does not listen
# (qperf listens anew after each test).
run() {
	local out
	for _ in $(seq 1 50); do
		out=$(LD_PRELOAD=$1 timeout $((SECS + 30)) qperf -lp "$PORT" -t "$SECS" "$ADDR" "$2" 2>&1) || true
		case $out in
		*"Connection refused"*) sleep 0.2 ;;
		*) break ;;
		esac
	done
	# The figure and its unit ("57.3 us", "152 MB/sec").
	awk '$2 == "=" { print $3, $4; found = 1; exit } END { if (!found) print "0 ?" }' <<<"$out"
	[[ $out == *"latency"* || $out == *"bw"* ]] || echo "bench-preload: $2: $out" >&2
}
serve "$LIB"
rds_lat=$(run "$LIB" rds_lat)
tcp_lat=$(run "$LIB" tcp_lat)
rds_bw=$(run "$LIB" rds_bw)
tcp_bw=$(run "$LIB" tcp_bw)
# --vs: ROUNDS rounds (default 5), each running both libraries' rds tests back to back,
# alternating which goes first; the medians are compared (the machine's load varies more
# between runs than the libraries differ).
vs=()
if [[ -n $VS ]]; then
	for r in $(seq 1 "${ROUNDS:-5}"); do
		if ((r % 2)); then order=("$LIB" "$VS"); else order=("$VS" "$LIB"); fi
		for l in "${order[@]}"; do
			serve "$l"
			vs+=("$l=$(run "$l" rds_lat)=$(run "$l" rds_bw)")
		done
	done
fi
python3 - "$rds_lat" "$tcp_lat" "$rds_bw" "$tcp_bw" "$LIB" "$VS" "${vs[@]}" <<'PY'
import statistics
import sys
SCALE = {"ns": 1e-3, "us": 1, "ms": 1e3, "sec": 1e6, "bytes/sec": 1, "KB/sec": 1e3,
         "MB/sec": 1e6, "GB/sec": 1e9}
def value(s):
    n, unit = s.split()
    return float(n) * SCALE.get(unit, float("nan"))
rl, tl, rb, tb = (value(x) for x in sys.argv[1:5])
print(f"latency    rds_lat {rl:9.1f} us     tcp_lat {tl:9.1f} us     rds/tcp {rl / tl:6.2f}")
print(f"bandwidth  rds_bw  {rb / 1e6:9.1f} MB/s   tcp_bw  {tb / 1e6:9.1f} MB/s   rds/tcp {rb / tb:6.3f}")
lib, vs = sys.argv[5], sys.argv[6]
if vs:
    runs = {lib: ([], []), vs: ([], [])}
    for r in sys.argv[7:]:
        l, lat, bw = r.split("=")
        if value(lat) > 0 and value(bw) > 0:
            runs[l][0].append(value(lat))
            runs[l][1].append(value(bw))
    if not all(runs[l][0] for l in runs):
        sys.exit("bench-preload: --vs: no complete round")
    (la, ba), (lb, bb) = ((statistics.median(x) for x in runs[l]) for l in (lib, vs))
    n = len(runs[lib][0])
    print(f"medians of {n} alternating rounds, this library / {vs}:")
    print(f"latency    rds_lat {la:9.1f} us   vs {lb:9.1f} us     this/vs {la / lb:6.2f}")
    print(f"bandwidth  rds_bw  {ba / 1e6:9.1f} MB/s vs {bb / 1e6:9.1f} MB/s   this/vs {ba / bb:6.2f}")
PY
