#!/usr/bin/env bash
# The application path against raw TCP on loopback (issue 19's table), in one run: for each row
# our figure, the raw-TCP reference measured right after it with the same pattern, the ratio
# and the issue's target. Not a test (CI never runs it); bounded (about 2 minutes, 4 with --vs).
#
#   rds-ping RTT, embedded node to the daemon      vs the TCP round trip (qperf tcp_lat x 2)
#     (pings 1 ms apart, and 10 us apart as an informational row; and, informational,
#     against a TCP ping-pong between two processes at the same spacings, the tcp_ping
#     example: what waking two sleeping ends costs this machine)
#   rds-stress --loopback 64 B -t1 -d1/-d8/-d32, -t2 -d32, 1 MiB -a 256 -d 4 (tx+rx)
#                                                  vs the raw_tcp example / iperf3 --bidir
#   two rds-stress processes through the daemon, 64 B -t1 -d1 and 1 MiB -d4
#
# References: qperf and iperf3 when installed (.ci/deps.d/bench.sh installs them), else the
# raw_tcp example (rds-stress/examples/raw_tcp.rs). qperf's tcp_lat "latency" is half a round
# trip (it divides by two), so the TCP round trip is twice it.
#
# Next to each ratio, for ours and for the reference: CPU time per request (user+sys of every
# process of the row, the daemon's and a server's included: getrusage of the children, or
# /proc/PID/stat of a background process, over the measured run, divided by the requests it
# made; for the 1 MiB rows a "request" is a MiB moved) and system calls per request (from a
# separate run of the same row, SC_SECS seconds (default: --seconds), every process counted,
# attached to the daemon too, start-up included: `perf stat -e raw_syscalls:sys_enter`, which
# counts in the kernel without slowing the calls, else `strace -f -c`, which slows every call
# about a hundredfold, so that timers and polls weigh far more per request there).
# Without either (apt-get install linux-perf strace) the system call column says "-".
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
cargo build -q --release -p rds-stress --bins --example raw_tcp --example tcp_ping -p rds-ping -p rds-ctrl
NEW=$TGT/release
RAW=$TGT/release/examples/raw_tcp
TCP_PING=$TGT/release/examples/tcp_ping
RUN=$(mktemp -d /tmp/bench-app-path.XXXXXX)
chmod 700 "$RUN"
export RDS_RUNTIME_DIR=$RUN
SC_SECS=${SC_SECS:-$SECS}
# How system calls are counted: perf (its syscall tracepoint), else strace, else not at all.
SCMODE=
if command -v perf >/dev/null && perf stat -e raw_syscalls:sys_enter -x, -o /dev/null -- true 2>/dev/null; then
	SCMODE=perf
elif command -v strace >/dev/null; then
	SCMODE=strace
else
	echo "bench-app-path: neither perf nor strace can count system calls (apt-get install linux-perf strace): no system call column" >&2
fi
TCK=$(getconf CLK_TCK)
DPID=
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

# cpu_run FILE CMD...: runs CMD, then writes to FILE the CPU seconds (user+sys) it and the
# children it waited for used.
cat >"$RUN/cpu_run.py" <<'PY'
import resource, subprocess, sys
rc = subprocess.call(sys.argv[2:])
r = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write("%.6f\n" % (r.ru_utime + r.ru_stime))
sys.exit(rc)
PY
cpu_run() { python3 "$RUN/cpu_run.py" "$@"; }
# CPU seconds process PID has used so far (its threads and the children it waited for).
pid_cpu() { awk -v t="$TCK" '{ sub(/^.*\) /, ""); print ($12 + $13 + $14 + $15) / t }' "/proc/$1/stat" 2>/dev/null || echo 0; }
# CPU microseconds per request: the sum of CPU seconds $2.. over $1 requests.
per_req_us() {
	local n=$1
	shift
	py "n = $n; s = sum(float(x) for x in '$*'.split()); print('%.1f' % (s * 1e6 / n) if n > 0 else '-')"
}
# sc_run FILE CMD...: runs CMD (and its children), counting their system calls into FILE.
sc_run() {
	local f=$1
	shift
	if [ "$SCMODE" = perf ]; then
		perf stat -e raw_syscalls:sys_enter -x, -o "$f" -- "$@"
	else
		strace -f -c -o "$f" "$@"
	fi
}
# System calls counted in FILE (perf's CSV line, or the total of an `strace -c` summary).
sc_total() {
	if [ "$SCMODE" = perf ]; then
		awk -F, '/raw_syscalls:sys_enter/ { n = $1 } END { print n + 0 }' "$1" 2>/dev/null || echo 0
	else
		awk '$NF == "total" { n = $4 } END { print n + 0 }' "$1" 2>/dev/null || echo 0
	fi
}
# sc_bg FILE PID: counts process PID's system calls into FILE in the background (until sc_end).
sc_bg() {
	if [ "$SCMODE" = perf ]; then
		perf stat -e raw_syscalls:sys_enter -x, -o "$1" -p "$2" 2>/dev/null &
	else
		strace -f -c -o "$1" -p "$2" 2>/dev/null &
	fi
	SPID=$!
	sleep 0.3
}
sc_end() { kill -INT "$SPID" 2>/dev/null || true; wait "$SPID" 2>/dev/null || true; }

# Requests of an rds-stress run of $2 seconds (its JSON $1): messages sent, or for 1 MiB
# messages ($3) MiB moved.
stress_reqs() {
	if [ "$3" -ge 1048576 ]; then
		json_field "$1" "d['tx_rx_kib_per_sec'] * $2 / 1024"
	else
		json_field "$1" "d['tx_per_sec'] * $2"
	fi
}

# rds-stress, both sides in one process: prints "tx_per_sec tx_rx_kib_per_sec p50 cpu_us/req".
stress_loop() {
	local bin=$1 q=$2 a=$3 d=$4 t=$5 out=$RUN/stress.json
	PORT=$((PORT + 1))
	RDS_NO_DAEMON=1 cpu_run "$RUN/cpu" timeout $((SECS + 30)) "$bin/rds-stress" --loopback -r $E1 -s $E2 -p $PORT \
		-q "$q" -a "$a" -d "$d" -t "$t" -T "$SECS" -z --json >"$out" 2>/dev/null
	local cpu
	cpu=$(per_req_us "$(stress_reqs "$out" "$SECS" "$q")" "$(cat "$RUN/cpu")")
	json_field "$out" '"%.1f %.1f %s" % (d["tx_per_sec"], d["tx_rx_kib_per_sec"], (d.get("rtt_us") or d["rtt_usecs"])["p50"])' |
		sed "s/\$/ $cpu/"
}

# System calls per request of stress_loop's row (a SC_SECS run, counted).
stress_loop_sc() {
	[ -n "$SCMODE" ] || { echo -; return; }
	local bin=$1 q=$2 a=$3 d=$4 t=$5 out=$RUN/stress-sc.json
	PORT=$((PORT + 1))
	RDS_NO_DAEMON=1 sc_run "$RUN/sc" timeout $((SC_SECS + 60)) "$bin/rds-stress" --loopback -r $E1 -s $E2 \
		-p $PORT -q "$q" -a "$a" -d "$d" -t "$t" -T "$SC_SECS" -z --json >"$out" 2>/dev/null
	py "print('%.1f' % ($(sc_total "$RUN/sc") / max($(stress_reqs "$out" "$SC_SECS" "$q"), 1)))"
}

# rds-stress, two processes through the daemon (it owns both addresses; its pid in DPID):
# prints "tx_per_sec tx_rx_kib_per_sec p50 cpu_us/req" (both processes and the daemon).
stress_daemon() {
	local bin=$1 q=$2 a=$3 d=$4 t=$5 out=$RUN/stress.json pp d0 d1
	PORT=$((PORT + 1))
	d0=$(pid_cpu "$DPID")
	cpu_run "$RUN/cpu2" timeout $((SECS + 30)) "$bin/rds-stress" -r $D1 -p $PORT >/dev/null 2>&1 &
	pp=$!
	PIDS+=("$pp")
	cpu_run "$RUN/cpu" timeout $((SECS + 30)) "$bin/rds-stress" -r $D2 -s $D1 -p $PORT --connect-retries 20 \
		-q "$q" -a "$a" -d "$d" -t "$t" -T "$SECS" -z --json >"$out" 2>/dev/null
	wait "$pp" || true
	d1=$(pid_cpu "$DPID")
	local cpu
	cpu=$(per_req_us "$(stress_reqs "$out" "$SECS" "$q")" "$(cat "$RUN/cpu")" "$(cat "$RUN/cpu2")" "$(py "print($d1 - $d0)")")
	json_field "$out" '"%.1f %.1f %s" % (d["tx_per_sec"], d["tx_rx_kib_per_sec"], (d.get("rtt_us") or d["rtt_usecs"])["p50"])' |
		sed "s/\$/ $cpu/"
}

# System calls per request of stress_daemon's row: both processes and the daemon.
stress_daemon_sc() {
	[ -n "$SCMODE" ] || { echo -; return; }
	local bin=$1 q=$2 a=$3 d=$4 t=$5 out=$RUN/stress-sc.json pp
	PORT=$((PORT + 1))
	sc_bg "$RUN/sc-daemon" "$DPID"
	sc_run "$RUN/sc2" timeout $((SC_SECS + 60)) "$bin/rds-stress" -r $D1 -p $PORT >/dev/null 2>&1 &
	pp=$!
	PIDS+=("$pp")
	sc_run "$RUN/sc" timeout $((SC_SECS + 60)) "$bin/rds-stress" -r $D2 -s $D1 -p $PORT \
		--connect-retries 20 -q "$q" -a "$a" -d "$d" -t "$t" -T "$SC_SECS" -z --json >"$out" 2>/dev/null
	wait "$pp" || true
	sc_end
	local n
	n=$(($(sc_total "$RUN/sc") + $(sc_total "$RUN/sc2") + $(sc_total "$RUN/sc-daemon")))
	py "print('%.1f' % ($n / max($(stress_reqs "$out" "$SC_SECS" "$q"), 1)))"
}

# Median rds-ping RTT in us (of its reply lines; the median, because a loaded 2-core machine
# adds rare millisecond stalls that move the average), embedded node (E1) to the daemon (D1),
# and the CPU per ping (rds-ping's and the daemon's): prints "p50 cpu_us/req". The pings are
# 1 ms apart (each finds both sides' threads asleep), or as the second argument says.
ping_rtt() {
	local bin=$1 iv=${2:-1ms} n=$((SECS * 500)) d0 d1 p50 got
	d0=$(pid_cpu "$DPID")
	RDS_NO_DAEMON= cpu_run "$RUN/cpu" timeout $((SECS + 30)) "$bin/rds-ping" -I $E1 -n 1 -c $n -i "$iv" $D1 2>/dev/null |
		sed -n 's/^ *[0-9]*: \([0-9]*\) usec$/\1/p' | sort -n >"$RUN/ping"
	d1=$(pid_cpu "$DPID")
	got=$(wc -l <"$RUN/ping")
	p50=$(awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]; else print 0}' "$RUN/ping")
	echo "$p50 $(per_req_us "$got" "$(cat "$RUN/cpu")" "$(py "print($d1 - $d0)")")"
}

# System calls per ping (rds-ping's and the daemon's), SC_SECS of pings.
ping_sc() {
	[ -n "$SCMODE" ] || { echo -; return; }
	local bin=$1 n=$((SC_SECS * 500)) got
	sc_bg "$RUN/sc-daemon" "$DPID"
	RDS_NO_DAEMON= sc_run "$RUN/sc" timeout $((SC_SECS + 60)) "$bin/rds-ping" -I $E1 -n 1 -c $n -i 1ms $D1 2>/dev/null |
		grep -c ' usec$' >"$RUN/ping-n" || true
	sc_end
	got=$(cat "$RUN/ping-n")
	py "print('%.1f' % (($(sc_total "$RUN/sc") + $(sc_total "$RUN/sc-daemon")) / max($got, 1)))"
}

# Median TCP round trip in us of $1 pings $2 us apart (the tcp_ping example).
tcp_ping_p50() {
	"$TCP_PING" "$1" "$2" | sed -n 's/^p50_us=\([0-9]*\) .*/\1/p'
}

# TCP round trip in us: qperf tcp_lat x 2, else 1 / raw_tcp's one-flow request rate; prints
# "rtt source cpu_us/req syscalls/req" (client and server; a request is a round trip).
tcp_rtt() {
	if command -v qperf >/dev/null; then
		qperf -lp 19901 >/dev/null 2>&1 &
		local qp=$!
		PIDS+=("$qp")
		sleep 0.3
		local lat s0 s1 cpu sc=-
		s0=$(pid_cpu "$qp")
		lat=$(cpu_run "$RUN/cpu" qperf -lp 19901 $E2 -t "$SECS" -m 1 tcp_lat | sed -n 's/.*latency *= *\([0-9.]*\) us.*/\1/p')
		s1=$(pid_cpu "$qp")
		cpu=$(per_req_us "$(py "print($SECS * 1e6 / (2 * $lat))")" "$(cat "$RUN/cpu")" "$(py "print($s1 - $s0)")")
		if [ -n "$SCMODE" ]; then
			local slat
			sc_bg "$RUN/sc-server" "$qp"
			slat=$(sc_run "$RUN/sc" qperf -lp 19901 $E2 -t "$SC_SECS" -m 1 tcp_lat |
				sed -n 's/.*latency *= *\([0-9.]*\) us.*/\1/p')
			sc_end
			sc=$(py "print('%.1f' % (($(sc_total "$RUN/sc") + $(sc_total "$RUN/sc-server")) / max($SC_SECS * 1e6 / (2 * ${slat:-1e9}), 1)))")
		fi
		kill "$qp" 2>/dev/null || true
		wait "$qp" 2>/dev/null || true
		py "print('%.1f qperf $cpu $sc' % (2 * $lat))"
	else
		local r
		r=$(cpu_run "$RUN/cpu" "$RAW" 1 1 1 1 "$SECS")
		r=${r#tx_per_sec=}
		py "print('%.1f raw_tcp %s %s' % (1e6 / ${r%% *}, '$(per_req_us "$(py "print(${r%% *} * $SECS)")" "$(cat "$RUN/cpu")")', '$(raw_sc 1 1 1 1)'))"
	fi
}

# raw_tcp: prints "tx_per_sec kib_per_sec cpu_us/req syscalls/req" (requests as for rds-stress:
# messages sent, or MiB moved for 1 MiB messages).
raw() {
	local r reqs
	r=$(cpu_run "$RUN/cpu" "$RAW" "$@" "$SECS")
	local tx=${r#tx_per_sec=}
	tx=${tx%% *}
	local kib=${r#*kib_per_sec=}
	if [ "$1" -ge 1048576 ]; then reqs=$(py "print($kib * $SECS / 1024)"); else reqs=$(py "print($tx * $SECS)"); fi
	echo "$tx $kib $(per_req_us "$reqs" "$(cat "$RUN/cpu")") $(raw_sc "$@")"
}

# System calls per request of raw_tcp's pattern (a SC_SECS run, counted).
raw_sc() {
	[ -n "$SCMODE" ] || { echo -; return; }
	local r tx kib reqs
	r=$(sc_run "$RUN/sc" "$RAW" "$@" "$SC_SECS")
	tx=${r#tx_per_sec=}
	tx=${tx%% *}
	kib=${r#*kib_per_sec=}
	if [ "$1" -ge 1048576 ]; then reqs=$(py "print($kib * $SC_SECS / 1024)"); else reqs=$(py "print($tx * $SC_SECS)"); fi
	py "print('%.1f' % ($(sc_total "$RUN/sc") / max($reqs, 1)))"
}

# Both directions summed of iperf3 --bidir in KiB/s, else raw_tcp's 1 MiB pattern; prints
# "kib source cpu_us/MiB syscalls/MiB" (client and server).
iperf_kib() {
	python3 -c "import json; d = json.load(open('$1')); print((d['end']['sum_sent']['bits_per_second'] + d['end']['sum_sent_bidir_reverse']['bits_per_second']) / 8 / 1024)"
}
bidir_kib() {
	if command -v iperf3 >/dev/null; then
		iperf3 -s -p 19902 -B $E2 -1 >/dev/null 2>&1 &
		local ip=$!
		PIDS+=("$ip")
		sleep 0.3
		cpu_run "$RUN/cpu" iperf3 -c $E2 -p 19902 --bidir -t "$SECS" -J >"$RUN/iperf.json" 2>/dev/null || true
		# The server's CPU: it exits after one test (-1); its last reading.
		local s1=0
		while kill -0 "$ip" 2>/dev/null; do
			s1=$(pid_cpu "$ip")
			sleep 0.05
		done
		wait "$ip" 2>/dev/null || true
		local kib cpu sc=-
		kib=$(iperf_kib "$RUN/iperf.json")
		cpu=$(per_req_us "$(py "print($kib * $SECS / 1024)")" "$(cat "$RUN/cpu")" "$s1")
		if [ -n "$SCMODE" ]; then
			sc_run "$RUN/sc-server" iperf3 -s -p 19902 -B $E2 -1 >/dev/null 2>&1 &
			ip=$!
			PIDS+=("$ip")
			sleep 0.5
			sc_run "$RUN/sc" iperf3 -c $E2 -p 19902 --bidir -t "$SC_SECS" -J >"$RUN/iperf-sc.json" 2>/dev/null || true
			wait "$ip" 2>/dev/null || true
			sc=$(py "print('%.1f' % (($(sc_total "$RUN/sc") + $(sc_total "$RUN/sc-server")) / max($(iperf_kib "$RUN/iperf-sc.json") * $SC_SECS / 1024, 1)))")
		fi
		echo "$kib iperf3 $cpu $sc"
	else
		read -r _ kib cpu sc <<<"$(raw 1048576 256 4 1)"
		echo "$kib raw_tcp $cpu $sc"
	fi
}

printf 'machine: %s, %s cores, %s; %s s per run, system calls from %s s runs (%s)\n' "$(uname -r)" "$(nproc)" \
	"$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)" "$SECS" "$SC_SECS" "${SCMODE:-not counted}"
echo "cpu us/req and syscalls/req: ours | the reference's (all processes of the row; 1 MiB rows: per MiB moved)"
printf '%-38s %14s%s %16s %6s %13s %13s %s\n' "row" "ours" "${VS:+  $(printf '%14s' before)}" "reference" "ratio" \
	"cpu us/req" "syscalls/req" "target"
NOT_MET=()
# row NAME OURS [BEFORE] REF RATIO_EXPR TARGET_OP TARGET CPU_OURS CPU_REF SC_OURS SC_REF
row() {
	local name=$1 ours=$2 before=$3 ref=$4 ratio=$5 op=$6 target=$7 verdict=""
	local cpu="$8 | $9" sc="${10} | ${11}"
	if [ "$op" != "-" ]; then
		verdict=$(py "print('met' if $ratio $op $target else 'NOT met')")
		target="$op $target ($verdict)"
		[ "$verdict" = "met" ] || NOT_MET+=("$name")
	else
		target="-"
	fi
	if [ -n "$VS" ]; then
		printf '%-38s %14s  %14s %16s %6s %13s %13s %s\n' "$name" "$ours" "$before" "$ref" "$ratio" "$cpu" "$sc" "$target"
	else
		printf '%-38s %14s %16s %6s %13s %13s %s\n' "$name" "$ours" "$ref" "$ratio" "$cpu" "$sc" "$target"
	fi
}
ratio() { py "print('%.2f' % ($1 / $2 if $2 else 0))"; }

# The daemon (for the rds-ping row and the daemon rows); its pid in DPID.
start_daemon() {
	DPID=$("$1/rds-ctrl" load tcp --addr $D1 --addr $D2 | sed -n 's/.*loaded (pid \([0-9]*\)).*/\1/p')
	[ -n "$DPID" ] || { echo "bench-app-path: the daemon did not say its pid" >&2; exit 1; }
}
stop_daemon() {
	"$1/rds-ctrl" unload >/dev/null 2>&1 || true
	DPID=
}

# rds-ping RTT
start_daemon "$NEW"
read -r o ocpu <<<"$(ping_rtt "$NEW")"
# The same pings 10 us apart, closer to qperf's back-to-back round trip (informational: where
# TCP's own round trip is far below the wake-up of an idle thread, the 1 ms row measures that).
read -r o10 _ <<<"$(ping_rtt "$NEW" 10us)"
osc=$(ping_sc "$NEW")
stop_daemon "$NEW"
b=""
b10=""
if [ -n "$VS" ]; then
	start_daemon "$VS"
	read -r b _ <<<"$(ping_rtt "$VS")"
	read -r b10 _ <<<"$(ping_rtt "$VS" 10us)"
	stop_daemon "$VS"
	b="$b us"
	b10="$b10 us"
fi
read -r tr src tcpu tsc <<<"$(tcp_rtt)"
row "rds-ping RTT p50, embedded -> daemon" "$o us" "$b" "$tr us ($src)" "$(ratio "$o" "$tr")" "<=" 1.2 \
	"$ocpu" "$tcpu" "$osc" "$tsc"
row "rds-ping RTT p50, pings 10 us apart" "$o10 us" "$b10" "$tr us ($src)" "$(ratio "$o10" "$tr")" "-" - \
	- - - -
# The same spacings over TCP (tcp_ping: a client and an echoing server process, 48 B each
# way): both ends asleep between pings, as rds-ping's and the daemon's threads are.
tp1=$(tcp_ping_p50 $((SECS * 500)) 1000)
tp10=$(tcp_ping_p50 $((SECS * 500)) 10)
row "rds-ping vs TCP ping, both 1 ms apart" "$o us" "$b" "$tp1 us (tcp_ping)" "$(ratio "$o" "$tp1")" "-" - \
	- - - -
row "rds-ping vs TCP ping, both 10 us apart" "$o10 us" "$b10" "$tp10 us (tcp_ping)" "$(ratio "$o10" "$tp10")" "-" - \
	- - - -

# rds-stress --loopback rows (64 B)
for spec in "1 1 1.0 >= 0.9" "8 1 - - -" "32 1 - - -" "32 2 - >= 0.5"; do
	read -r d t _ op tg <<<"$spec"
	read -r tx _ p50 cpu <<<"$(stress_loop "$NEW" 64 64 "$d" "$t")"
	sc=$(stress_loop_sc "$NEW" 64 64 "$d" "$t")
	b=""
	if [ -n "$VS" ]; then read -r btx _ bp50 _ <<<"$(stress_loop "$VS" 64 64 "$d" "$t")"; b="$btx/s p50 $bp50"; fi
	read -r rtx _ rcpu rsc <<<"$(raw 64 64 "$d" "$t")"
	row "--loopback 64 B -t $t -d $d" "$tx/s p50 $p50" "$b" "$rtx/s raw_tcp" "$(ratio "$tx" "$rtx")" "$op" "$tg" \
		"$cpu" "$rcpu" "$sc" "$rsc"
done

# 1 MiB tx+rx
read -r _ kib _ cpu <<<"$(stress_loop "$NEW" 1048576 256 4 1)"
sc=$(stress_loop_sc "$NEW" 1048576 256 4 1)
b=""
if [ -n "$VS" ]; then read -r _ bkib _ _ <<<"$(stress_loop "$VS" 1048576 256 4 1)"; b="$(py "print('%.2f GB/s' % ($bkib * 1024 / 1e9))")"; fi
read -r rk src rcpu rsc <<<"$(bidir_kib)"
row "--loopback 1 MiB -a 256 -d 4 tx+rx" "$(py "print('%.2f GB/s' % ($kib * 1024 / 1e9))")" "$b" \
	"$(py "print('%.2f GB/s' % ($rk * 1024 / 1e9))") $src" "$(ratio "$kib" "$rk")" ">=" 0.9 "$cpu" "$rcpu" "$sc" "$rsc"

# Through the daemon: two processes.
for spec in "64 64 1 1 >= 0.8" "1048576 256 4 1 - -"; do
	read -r q a d t op tg <<<"$spec"
	start_daemon "$NEW"
	read -r tx _ p50 cpu <<<"$(stress_daemon "$NEW" "$q" "$a" "$d" "$t")"
	sc=$(stress_daemon_sc "$NEW" "$q" "$a" "$d" "$t")
	stop_daemon "$NEW"
	b=""
	if [ -n "$VS" ]; then
		start_daemon "$VS"
		read -r btx _ bp50 _ <<<"$(stress_daemon "$VS" "$q" "$a" "$d" "$t")"
		stop_daemon "$VS"
		b="$btx/s p50 $bp50"
	fi
	read -r rtx _ rcpu rsc <<<"$(raw "$q" "$a" "$d" "$t")"
	row "daemon, 2 processes, $q B -d $d" "$tx/s p50 $p50" "$b" "$rtx/s raw_tcp" "$(ratio "$tx" "$rtx")" "$op" "$tg" \
		"$cpu" "$rcpu" "$sc" "$rsc"
done

# A row not met: where its time goes is profiled in docs/performance.md (not measured here).
if [ ${#NOT_MET[@]} -gt 0 ]; then
	printf '\nnot met: %s\n' "$(IFS=';'; echo "${NOT_MET[*]}" | sed 's/;/; /g')"
	echo "where their time goes and what would close them: docs/performance.md, \"Where the time goes in the rows not met\" (perf, strace and lab captures)"
fi
