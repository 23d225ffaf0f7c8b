#!/usr/bin/env bash
# qperf over the preload library: rds_lat and rds_bw (qperf's default message size, -m 4096
# and -m 65536) between two preloaded qperf processes on loopback (embedded nodes: the
# server's RDS socket on the address it is reached at, the client's on 127.0.0.1), next to
# qperf's tcp_lat and tcp_bw with the same options in the same run (the default row's tcp_bw
# with -m 8192: qperf's default size is 8 KiB for rds_bw, 64 KiB for tcp_bw), the ratios and
# the targets of issue 32 (rds_lat <= 1.3x tcp_lat, rds_bw >= 0.5x tcp_bw).
# With --vs OTHER.so (the library before a change, e.g. /work/wt/old/target/release/
# librds_preload.so, or main's built into another target directory), also ROUNDS rounds
# (default 3) of the rds tests through both libraries, alternating which goes first, and each
# library's medians with their ratios to tcp and this library's over OTHER's.
# Each row also has the CPU time and the system calls per message, RDS and TCP:
# - cpu us/msg: qperf's own `loc_cpus_used` (-v; it reads /proc/stat, so on one host it is
#   the whole machine's CPU time: both qperf processes and anything else running) over its
#   `msg_rate` (rds_lat and tcp_lat count each direction's message: a round trip is two);
# - syscalls/msg: `perf stat -e raw_syscalls:sys_enter` of the client and of the server
#   (attached, its forked test process included), start-up included, over the messages of
#   the run (msg_rate x seconds); `-` without a working perf (apt-get install linux-perf).
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
mkdir -p "$RDS_RUNTIME_DIR"
PERF=
if command -v perf >/dev/null && perf stat -e raw_syscalls:sys_enter -x, -o /dev/null -- true 2>/dev/null; then
	PERF=1
fi
# The system calls perf counted in file $1 (0 if none).
calls() {
	awk -F, '/raw_syscalls:sys_enter/ { n = $1 } END { print n + 0 }' "$1" 2>/dev/null || echo 0
}
# Starts a qperf server preloaded with library $1 ("" for none).
serve() {
	[[ -n $server ]] && { kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true; }
	LD_PRELOAD=$1 qperf -lp "$PORT" >/dev/null 2>&1 &
	server=$!
}
# One client of test $2 with qperf options $3 (message size), preloaded with library $1,
# retried while the server does not listen (qperf listens anew after each test).
# Prints "figure unit|messages/s|CPUs used|system calls" (the last "-" unless $4 is "count").
run() {
	local out sp cf=$RDS_RUNTIME_DIR/client.perf sf=$RDS_RUNTIME_DIR/server.perf
	local counted=$([[ $4 == count && -n $PERF ]] && echo 1)
	for _ in $(seq 1 50); do
		rm -f "$cf" "$sf"
		sp=
		if [[ -n $counted ]]; then
			perf stat -e raw_syscalls:sys_enter -x, -o "$sf" -p "$server" 2>/dev/null &
			sp=$!
			sleep 0.2
		fi
		# shellcheck disable=SC2086
		out=$(${counted:+perf stat -e raw_syscalls:sys_enter -x, -o "$cf" --} env LD_PRELOAD="$1" \
			timeout $((SECS + 30)) qperf -v -lp "$PORT" -t "$SECS" $3 "$ADDR" "$2" 2>&1) || true
		if [[ -n $sp ]]; then
			kill -INT "$sp" 2>/dev/null || true
			wait "$sp" 2>/dev/null || true
		fi
		case $out in
		*"Connection refused"*) sleep 0.2 ;;
		*) break ;;
		esac
	done
	[[ $out == *"latency"* || $out == *"bw"* ]] || echo "bench-preload: $2 $3: $out" >&2
	# The figure and its unit ("57.3 us", "152 MB/sec"), the message rate ("26.8 K/sec") and
	# the CPUs used ("65 % cpus").
	local sc=-
	[[ -n $counted ]] && sc=$(($(calls "$cf") + $(calls "$sf")))
	awk -v sc="$sc" '
		$1 == "latency" || $1 == "bw" { fig = $3 " " $4 }
		$1 == "msg_rate" { rate = $3 * ($4 == "K/sec" ? 1e3 : $4 == "M/sec" ? 1e6 : 1) }
		$1 == "loc_cpus_used" || $1 == "send_cpus_used" { cpus = $3 / 100 }
		END { if (fig == "") fig = "0 ?"; printf "%s|%s|%s|%s\n", fig, rate + 0, cpus + 0, sc }' <<<"$out"
}
# The rows: test suffix (lat, bw) and qperf options.
ROWS=("lat|" "bw|" "bw|-m 4096" "bw|-m 65536")
res=()
serve "$LIB"
for row in "${ROWS[@]}"; do
	kind=${row%%|*} opts=${row#*|}
	res+=("this|$kind|$opts|$(run "$LIB" "rds_$kind" "$opts" count)")
	# qperf's default size is 8 KiB for rds_bw but 64 KiB for tcp_bw: the default row's TCP
	# reference runs at rds_bw's size.
	topts=$opts
	[[ $kind == bw && -z $opts ]] && topts="-m 8192"
	res+=("tcp|$kind|$opts|$(run "$LIB" "tcp_$kind" "$topts" count)")
done
if [[ -n $VS ]]; then
	for r in $(seq 1 "${ROUNDS:-3}"); do
		if ((r % 2)); then order=("$LIB" "$VS"); else order=("$VS" "$LIB"); fi
		for l in "${order[@]}"; do
			serve "$l"
			who=vs
			[[ $l == "$LIB" ]] && who=round
			for row in "${ROWS[@]}"; do
				kind=${row%%|*} opts=${row#*|}
				res+=("$who|$kind|$opts|$(run "$l" "rds_$kind" "$opts" no)")
			done
		done
	done
fi
python3 - "$VS" "$SECS" "${res[@]}" <<'PY'
import statistics
import sys
SCALE = {"ns": 1e-3, "us": 1, "ms": 1e3, "sec": 1e6, "bytes/sec": 1, "KB/sec": 1e3,
         "MB/sec": 1e6, "GB/sec": 1e9}
def value(s):
    n, unit = s.split()
    return float(n) * SCALE.get(unit, float("nan"))
vs, secs = sys.argv[1], float(sys.argv[2])
got = {}
cost = {}
for r in sys.argv[3:]:
    who, kind, opts, fig, rate, cpus, sc = r.split("|")
    v = value(fig)
    if v > 0:
        got.setdefault((who, kind, opts), []).append(v)
    rate, cpus = float(rate), float(cpus)
    if rate > 0:
        calls = f"{int(sc) / (rate * secs):.1f}" if sc != "-" else "-"
        cost[(who, kind, opts)] = (f"{cpus * 1e6 / rate:.1f}", calls)
def fmt(kind, v):
    return f"{v:9.1f} us  " if kind == "lat" else f"{v / 1e6:9.1f} MB/s"
def med(who, kind, opts):
    xs = got.get((who, kind, opts))
    return statistics.median(xs) if xs else float("nan")
rows = [("lat", ""), ("bw", ""), ("bw", "-m 4096"), ("bw", "-m 65536")]
print(f"{'test':22} {'rds':>14} {'tcp':>14} {'rds/tcp':>8} {'target':>7}"
      f" {'cpu us/msg rds | tcp':>21} {'syscalls/msg rds | tcp':>23}")
for kind, opts in rows:
    name = f"rds_{kind} {opts or ('(default, 8 KiB)' if kind == 'bw' else '')}"
    r, t = med("this", kind, opts), med("tcp", kind, opts)
    target = "<= 1.3" if kind == "lat" else ">= 0.5"
    (rc, rs), (tc, ts) = (cost.get((w, kind, opts), ("?", "?")) for w in ("this", "tcp"))
    print(f"{name:22} {fmt(kind, r):>14} {fmt(kind, t):>14} {r / t:8.3f} {target:>7}"
          f" {rc + ' | ' + tc:>21} {rs + ' | ' + ts:>23}")
if vs:
    n = len(got.get(("round", "lat", ""), []))
    print(f"\nmedians of {n} alternating rounds, this library / {vs}, each over tcp (above):")
    print(f"{'test':22} {'this':>14} {'before':>14} {'this/tcp':>8} {'before/tcp':>10} {'this/before':>11}")
    for kind, opts in rows:
        name = f"rds_{kind} {opts or ('(default, 8 KiB)' if kind == 'bw' else '')}"
        a, b, t = med("round", kind, opts), med("vs", kind, opts), med("tcp", kind, opts)
        print(f"{name:22} {fmt(kind, a):>14} {fmt(kind, b):>14} {a / t:8.3f} {b / t:10.3f} {a / b:11.2f}")
PY
