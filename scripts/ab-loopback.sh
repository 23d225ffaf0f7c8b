#!/usr/bin/env bash
# Interleaved comparison of rds-stress builds on one `--loopback` pattern (both sides in one
# process, no daemon): runs every build once per round, A, B[, C ...], for ROUNDS rounds of
# S-second runs, so that the load other programs put on a shared machine falls on every build
# alike. Prints each run, then per build the medians and their ratio to A's, and the median of
# the per-round ratios to A:
# - rate: messages sent a second, or for messages of 1 MiB and more the GB/s moved both ways;
# - cpu_us/req: CPU microseconds (user+sys of the whole process, getrusage) per message sent
#   in the whole run, its 2 s warm-up included (rds-stress's "requests_sent");
# - with --syscalls: system calls (perf stat -e raw_syscalls:sys_enter, counted in the kernel
#   without slowing them) and context switches per message sent.
# With --cpus LIST rds-stress runs on those CPUs only (taskset -c LIST): on one CPU no thread
# spins while another works, so CPU per message is the work a message costs, which the load
# of other programs moves far less than it moves the rate (a few % between runs of one build
# against 10-40% for the rate of two CPUs on a busy machine). Not a test (CI never runs it);
# bounded: about ROUNDS x builds x (S + 3) seconds.
#
# Usage: scripts/ab-loopback.sh [--rounds N] [--seconds S] [--syscalls] [--cpus LIST]
#                               A_DIR B_DIR [C_DIR ...] [-- ARGS]
#   *_DIR  directories holding an rds-stress binary (A: the reference)
#   ARGS   the pattern: rds-stress options after --loopback and the addresses
#          (default: -q 64 -a 64 -d 8 -t 1, bench-app-path.sh's depth-8 row)
# Examples:
#   scripts/ab-loopback.sh --rounds 6 /work/wt/old/target/release target/release -- -d 1
#   scripts/ab-loopback.sh --cpus 1 old new fixed -- -q 64 -a 64 -d 32 -t 1
# Addresses 127.73.0.1-2 (bench-app-path.sh uses 127.19.x), ports from 5100 up.
set -euo pipefail
ROUNDS=5
SECS=2
SC=
CPUS=
usage="usage: ab-loopback.sh [--rounds N] [--seconds S] [--syscalls] [--cpus LIST] A_DIR B_DIR [C_DIR ...] [-- ARGS]"
while [ $# -gt 0 ]; do
	case $1 in
	--rounds | --pairs) ROUNDS=$2; shift 2 ;;
	--seconds) SECS=$2; shift 2 ;;
	--syscalls) SC=1; shift ;;
	--cpus) CPUS=$2; shift 2 ;;
	-*) echo "ab-loopback: unknown option $1" >&2; echo "$usage" >&2; exit 2 ;;
	*) break ;;
	esac
done
case $ROUNDS in '' | *[!0-9]* | 0) echo "ab-loopback: --rounds wants a whole number above 0, got '$ROUNDS'" >&2; exit 2 ;; esac
case $SECS in '' | *[!0-9]* | 0) echo "ab-loopback: --seconds wants a whole number above 0, got '$SECS'" >&2; exit 2 ;; esac
DIRS=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
	[ -x "$1/rds-stress" ] || { echo "ab-loopback: $1: no rds-stress there" >&2; exit 2; }
	DIRS+=("$1")
	shift
done
[ ${#DIRS[@]} -ge 2 ] || { echo "$usage" >&2; exit 2; }
[ "${1:-}" != -- ] || shift
ARGS=("$@")
[ ${#ARGS[@]} -gt 0 ] || ARGS=(-q 64 -a 64 -d 8 -t 1)
if [ -n "$SC" ] && ! perf stat -e raw_syscalls:sys_enter -x, -o /dev/null -- true 2>/dev/null; then
	echo "ab-loopback: --syscalls needs perf with the raw_syscalls tracepoint (apt-get install linux-perf)" >&2
	exit 2
fi
RUN=$(mktemp -d /tmp/ab-loopback.XXXXXX)
trap 'rm -rf "$RUN"' EXIT
PORT=5100

# One run of build number $1 (directory $2): appends "index rate cpu_us_per_req
# [syscalls_per_req cs_per_req]" to $RUN/results.
run() {
	local i=$1 dir=$2
	PORT=$((PORT + 1))
	local pre=()
	[ -z "$SC" ] || pre=(perf stat -e raw_syscalls:sys_enter,context-switches -x, -o "$RUN/perf" --)
	[ -z "$CPUS" ] || pre+=(taskset -c "$CPUS")
	RDS_NO_DAEMON=1 python3 - "$RUN/cpu" "${pre[@]}" timeout $((SECS + 30)) "$dir/rds-stress" --loopback \
		-r 127.73.0.1 -s 127.73.0.2 -p $PORT "${ARGS[@]}" -T "$SECS" -z --json >"$RUN/out.json" 2>"$RUN/err" <<'PY' ||
import resource, subprocess, sys
rc = subprocess.call(sys.argv[2:])
r = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write("%.6f\n" % (r.ru_utime + r.ru_stime))
sys.exit(rc)
PY
		{ echo "ab-loopback: run of $dir failed:" >&2; cat "$RUN/err" >&2; exit 1; }
	python3 - "$i" "$RUN" "${SC:-0}" "${ARGS[@]}" <<'PY' | tee -a "$RUN/results"
import json, sys
i, run, sc = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
args = sys.argv[4:]
q = int(args[args.index("-q") + 1]) if "-q" in args else 1024
d = json.load(open(run + "/out.json"))
cpu = float(open(run + "/cpu").read())
rate = d["tx_rx_kib_per_sec"] * 1024 / 1e9 if q >= 1 << 20 else d["tx_per_sec"]
reqs = max(d["requests_sent"], 1)
out = "%s %.4f %.2f" % (i, rate, cpu * 1e6 / reqs)
if sc:
    ev = {}
    for line in open(run + "/perf"):
        f = line.strip().split(",")
        if len(f) > 2 and f[0].replace(".", "").isdigit():
            ev[f[2]] = float(f[0])
    out += " %.2f %.3f" % (ev.get("raw_syscalls:sys_enter", 0) / reqs, ev.get("context-switches", 0) / reqs)
print(out)
PY
}

echo "pattern: --loopback ${ARGS[*]} -T $SECS, $ROUNDS rounds${CPUS:+, on CPUs $CPUS}"
for i in "${!DIRS[@]}"; do echo "build $i: ${DIRS[$i]}"; done
echo "build rate cpu_us/req${SC:+ syscalls/req cs/req} (rate: msgs/s, or GB/s for 1 MiB messages; req: a message sent)"
for _ in $(seq "$ROUNDS"); do
	for i in "${!DIRS[@]}"; do run "$i" "${DIRS[$i]}"; done
done
python3 - "$RUN/results" "${#DIRS[@]}" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
n = int(sys.argv[2])
runs = [[list(map(float, r[1:])) for r in rows if r[0] == str(i)] for i in range(n)]
names = ["rate", "cpu_us/req", "syscalls/req", "cs/req"][: len(runs[0][0])]
print("medians (ratio to build 0; median of the per-round ratios to build 0)")
for k, name in enumerate(names):
    base = st.median(x[k] for x in runs[0])
    cells = []
    for i in range(n):
        m = st.median(x[k] for x in runs[i])
        pr = st.median(y[k] / x[k] for x, y in zip(runs[0], runs[i]) if x[k])
        cells.append("%d: %.4g (%.3f; %.3f)" % (i, m, m / base if base else 0, pr))
    print("%-13s %s" % (name, "  ".join(cells)))
PY
