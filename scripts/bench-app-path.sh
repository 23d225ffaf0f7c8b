#!/usr/bin/env bash
# The application path against raw TCP on loopback (issue 19's table), in one run: for each row
# our figure, the raw-TCP reference measured right after it with the same pattern, the ratio
# and the issue's target. Not a test (CI never runs it); bounded (about 2 minutes, 4 with --vs).
#
#   rds-ping RTT, embedded node to the daemon      vs the TCP round trip (qperf tcp_lat x 2)
#   rds-stress --loopback 64 B -t1 -d1/-d8/-d32, -t2 -d32, 1 MiB -a 256 -d 4 (tx+rx)
#                                                  vs the raw_tcp example / iperf3 --bidir
#   two rds-stress processes through the daemon, 64 B -t1 -d1 and 1 MiB -d4
#
# References: qperf and iperf3 when installed (.ci/deps.d/bench.sh installs them), else the
# raw_tcp example (rds-stress/examples/raw_tcp.rs). qperf's tcp_lat "latency" is half a round
# trip (it divides by two), so the TCP round trip is twice it.
#
# Usage: scripts/bench-app-path.sh [--seconds S] [--vs DIR]
#   --seconds S  length of each measured run (default 4)
#   --vs DIR     also run every row with the binaries in DIR (rds-stress, rds-ping, rds-ctrl:
#                an older build), printed as "before" next to ours, in the same run
# Addresses 127.19.0.1-2 (embedded nodes) and 127.19.1.1-2 (the daemon); a private runtime
# directory keeps the daemon apart from any other.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=4
VS=
while [ $# -gt 0 ]; do
	case $1 in
	--seconds) SECS=$2; shift 2 ;;
	--vs) VS=$2; shift 2 ;;
	*) echo "bench-app-path: unknown option $1 (use --seconds S, --vs DIR)" >&2; exit 2 ;;
	esac
done
case $SECS in '' | *[!0-9]*) echo "bench-app-path: --seconds wants whole seconds, got '$SECS'" >&2; exit 2 ;; esac
if [ -n "$VS" ] && [ ! -x "$VS/rds-stress" ]; then
	echo "bench-app-path: --vs $VS: no rds-stress there" >&2
	exit 2
fi
TGT=${CARGO_TARGET_DIR:-target}
cargo build -q --release -p rds-stress --bins --example raw_tcp -p rds-ping -p rds-ctrl
NEW=$TGT/release
RAW=$TGT/release/examples/raw_tcp
RUN=$(mktemp -d /tmp/bench-app-path.XXXXXX)
chmod 700 "$RUN"
export RDS_RUNTIME_DIR=$RUN
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for d in "$NEW" ${VS:+"$VS"}; do "$d/rds-ctrl" unload >/dev/null 2>&1 || true; done
	rm -rf "$RUN"
}
trap cleanup EXIT
E1=127.19.0.1 E2=127.19.0.2 D1=127.19.1.1 D2=127.19.1.2
PORT=4900

py() { python3 -c "$1"; }
json_field() { py "import json,sys; d=json.load(open('$1')); print($2)"; }

# rds-stress, both sides in one process: prints "tx_per_sec tx_rx_kib_per_sec p50".
stress_loop() {
	local bin=$1 q=$2 a=$3 d=$4 t=$5 out=$RUN/stress.json
	PORT=$((PORT + 1))
	RDS_NO_DAEMON=1 timeout $((SECS + 30)) "$bin/rds-stress" --loopback -r $E1 -s $E2 -p $PORT \
		-q "$q" -a "$a" -d "$d" -t "$t" -T "$SECS" -z --json >"$out" 2>/dev/null
	json_field "$out" '"%.1f %.1f %s" % (d["tx_per_sec"], d["tx_rx_kib_per_sec"], (d.get("rtt_us") or d["rtt_usecs"])["p50"])'
}

# rds-stress, two processes through the daemon (it owns both addresses).
stress_daemon() {
	local bin=$1 q=$2 a=$3 d=$4 t=$5 out=$RUN/stress.json pp
	PORT=$((PORT + 1))
	timeout $((SECS + 30)) "$bin/rds-stress" -r $D1 -p $PORT >/dev/null 2>&1 &
	pp=$!
	PIDS+=("$pp")
	timeout $((SECS + 30)) "$bin/rds-stress" -r $D2 -s $D1 -p $PORT --connect-retries 20 \
		-q "$q" -a "$a" -d "$d" -t "$t" -T "$SECS" -z --json >"$out" 2>/dev/null
	wait "$pp" || true
	json_field "$out" '"%.1f %.1f %s" % (d["tx_per_sec"], d["tx_rx_kib_per_sec"], (d.get("rtt_us") or d["rtt_usecs"])["p50"])'
}

# Median rds-ping RTT in us (of its reply lines; the median, because a loaded 2-core machine
# adds rare millisecond stalls that move the average), embedded node (E1) to the daemon (D1).
ping_rtt() {
	local bin=$1 n=$((SECS * 500))
	RDS_NO_DAEMON= timeout $((SECS + 30)) "$bin/rds-ping" -I $E1 -n 1 -c $n -i 1ms $D1 2>/dev/null |
		sed -n 's/^ *[0-9]*: \([0-9]*\) usec$/\1/p' | sort -n |
		awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]; else print 0}'
}

# TCP round trip in us: qperf tcp_lat x 2, else 1 / raw_tcp's one-flow request rate.
tcp_rtt() {
	if command -v qperf >/dev/null; then
		qperf -lp 19901 >/dev/null 2>&1 &
		local qp=$!
		PIDS+=("$qp")
		sleep 0.3
		local lat
		lat=$(qperf -lp 19901 $E2 -t "$SECS" -m 1 tcp_lat | sed -n 's/.*latency *= *\([0-9.]*\) us.*/\1/p')
		kill "$qp" 2>/dev/null || true
		wait "$qp" 2>/dev/null || true
		py "print('%.1f qperf' % (2 * $lat))"
	else
		local r
		r=$("$RAW" 1 1 1 1 "$SECS")
		r=${r#tx_per_sec=}
		py "print('%.1f raw_tcp' % (1e6 / ${r%% *}))"
	fi
}

# raw_tcp: prints "tx_per_sec kib_per_sec".
raw() {
	local r
	r=$("$RAW" "$@" "$SECS")
	local tx=${r#tx_per_sec=}
	echo "${tx%% *} ${r#*kib_per_sec=}"
}

# Both directions summed of iperf3 --bidir in KiB/s, else raw_tcp's 1 MiB pattern.
bidir_kib() {
	if command -v iperf3 >/dev/null; then
		iperf3 -s -p 19902 -B $E2 -1 >/dev/null 2>&1 &
		local ip=$!
		PIDS+=("$ip")
		sleep 0.3
		iperf3 -c $E2 -p 19902 --bidir -t "$SECS" -J >"$RUN/iperf.json" 2>/dev/null || true
		wait "$ip" 2>/dev/null || true
		json_field "$RUN/iperf.json" \
			'"%.1f iperf3" % ((d["end"]["sum_sent"]["bits_per_second"] + d["end"]["sum_sent_bidir_reverse"]["bits_per_second"]) / 8 / 1024)'
	else
		echo "$(raw 1048576 256 4 1 | cut -d' ' -f2) raw_tcp"
	fi
}

printf 'machine: %s, %s cores, %s; %s s per run\n' "$(uname -r)" "$(nproc)" \
	"$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)" "$SECS"
printf '%-38s %14s%s %16s %9s %s\n' "row" "ours" "${VS:+  $(printf '%14s' before)}" "reference" "ratio" "target"
NOT_MET=()
# row NAME OURS [BEFORE] REF RATIO_EXPR TARGET_OP TARGET
row() {
	local name=$1 ours=$2 before=$3 ref=$4 ratio=$5 op=$6 target=$7 verdict=""
	if [ "$op" != "-" ]; then
		verdict=$(py "print('met' if $ratio $op $target else 'NOT met')")
		target="$op $target ($verdict)"
		[ "$verdict" = "met" ] || NOT_MET+=("$name")
	else
		target="-"
	fi
	if [ -n "$VS" ]; then
		printf '%-38s %14s  %14s %16s %9s %s\n' "$name" "$ours" "$before" "$ref" "$ratio" "$target"
	else
		printf '%-38s %14s %16s %9s %s\n' "$name" "$ours" "$ref" "$ratio" "$target"
	fi
}
ratio() { py "print('%.2f' % ($1 / $2 if $2 else 0))"; }

# The daemon (for the rds-ping row and the daemon rows).
start_daemon() {
	"$1/rds-ctrl" load tcp --addr $D1 --addr $D2 >/dev/null
}
stop_daemon() {
	"$1/rds-ctrl" unload >/dev/null 2>&1 || true
}

# rds-ping RTT
start_daemon "$NEW"
o=$(ping_rtt "$NEW")
stop_daemon "$NEW"
b=""
if [ -n "$VS" ]; then start_daemon "$VS"; b=$(ping_rtt "$VS"); stop_daemon "$VS"; b="$b us"; fi
read -r tr src <<<"$(tcp_rtt)"
row "rds-ping RTT p50, embedded -> daemon" "$o us" "$b" "$tr us ($src)" "$(ratio "$o" "$tr")" "<=" 1.1

# rds-stress --loopback rows (64 B)
for spec in "1 1 1.0 >= 0.9" "8 1 - - -" "32 1 - - -" "32 2 - >= 0.8"; do
	read -r d t _ op tg <<<"$spec"
	read -r tx _ p50 <<<"$(stress_loop "$NEW" 64 64 "$d" "$t")"
	b=""
	if [ -n "$VS" ]; then read -r btx _ bp50 <<<"$(stress_loop "$VS" 64 64 "$d" "$t")"; b="$btx/s p50 $bp50"; fi
	read -r rtx _ <<<"$(raw 64 64 "$d" "$t")"
	row "--loopback 64 B -t $t -d $d" "$tx/s p50 $p50" "$b" "$rtx/s raw_tcp" "$(ratio "$tx" "$rtx")" "$op" "$tg"
done

# 1 MiB tx+rx
read -r _ kib _ <<<"$(stress_loop "$NEW" 1048576 256 4 1)"
b=""
if [ -n "$VS" ]; then read -r _ bkib _ <<<"$(stress_loop "$VS" 1048576 256 4 1)"; b="$(py "print('%.2f GB/s' % ($bkib * 1024 / 1e9))")"; fi
read -r rk src <<<"$(bidir_kib)"
row "--loopback 1 MiB -a 256 -d 4 tx+rx" "$(py "print('%.2f GB/s' % ($kib * 1024 / 1e9))")" "$b" \
	"$(py "print('%.2f GB/s' % ($rk * 1024 / 1e9))") $src" "$(ratio "$kib" "$rk")" ">=" 0.9

# Through the daemon: two processes.
for spec in "64 64 1 1 >= 0.8" "1048576 256 4 1 - -"; do
	read -r q a d t op tg <<<"$spec"
	start_daemon "$NEW"
	read -r tx _ p50 <<<"$(stress_daemon "$NEW" "$q" "$a" "$d" "$t")"
	stop_daemon "$NEW"
	b=""
	if [ -n "$VS" ]; then
		start_daemon "$VS"
		read -r btx _ bp50 <<<"$(stress_daemon "$VS" "$q" "$a" "$d" "$t")"
		stop_daemon "$VS"
		b="$btx/s p50 $bp50"
	fi
	read -r rtx _ <<<"$(raw "$q" "$a" "$d" "$t")"
	row "daemon, 2 processes, $q B -d $d" "$tx/s p50 $p50" "$b" "$rtx/s raw_tcp" "$(ratio "$tx" "$rtx")" "$op" "$tg"
done

# A row not met: where its time goes is profiled in docs/performance.md (not measured here).
if [ ${#NOT_MET[@]} -gt 0 ]; then
	printf '\nnot met: %s\n' "$(IFS=';'; echo "${NOT_MET[*]}" | sed 's/;/; /g')"
	echo "where their time goes and what would close them: docs/performance.md, \"Where the time goes in the rows not met\" (perf, strace and lab captures)"
fi
