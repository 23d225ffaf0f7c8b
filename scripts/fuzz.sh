#!/usr/bin/env bash
# Runs every fuzz target of rds-core (rds-core/fuzz) for FUZZ_SECONDS each, then prints one
# line per target: executions, executions per second, corpus inputs (committed + new), and
# whether it crashed.
#
# Usage: scripts/fuzz.sh [TARGET...]        (default: every target `cargo fuzz list` names)
#
# Environment:
#   FUZZ_SECONDS  seconds per target (default 600)
#   FUZZ_JOBS     targets fuzzed at the same time (default 1)
#   FUZZ_MERGE    1: afterwards, add the inputs that found new coverage to the committed
#                 corpus (rds-core/fuzz/corpus/TARGET, via libFuzzer's -merge=1); default 0
#   FUZZ_NICE     niceness of the fuzzers (default 19)
#
# New inputs go to target/fuzz/corpus/TARGET (the committed corpus is read, never written,
# unless FUZZ_MERGE=1); logs to target/fuzz/logs/TARGET.log; a crashing input to
# rds-core/fuzz/artifacts/TARGET/. Exits 1 if any target crashed, 2 if a tool is missing.
#
# Needs the nightly toolchain and cargo-fuzz:
#   rustup toolchain install nightly
#   cargo install cargo-fuzz
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${FUZZ_SECONDS:-600}
jobs=${FUZZ_JOBS:-1}
merge=${FUZZ_MERGE:-0}
niceness=${FUZZ_NICE:-19}

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz.sh: the nightly toolchain is missing; install it with:" >&2
    echo "    rustup toolchain install nightly" >&2
    exit 2
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: cargo-fuzz is missing; install it with:" >&2
    echo "    cargo install cargo-fuzz" >&2
    exit 2
fi
case $seconds in '' | *[!0-9]*)
    echo "fuzz.sh: FUZZ_SECONDS must be a number of seconds, not '$seconds'" >&2
    exit 2
    ;;
esac

cd "$root/rds-core"
if [ $# -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo +nightly fuzz list)
fi
out="$root/target/fuzz"
mkdir -p "$out/logs"

start=$(date +%s)
nice -n "$niceness" cargo +nightly fuzz build -O 2>&1 | tail -n 1 ||
    { echo "fuzz.sh: building the fuzz targets failed" >&2; exit 1; }
echo "fuzz.sh: built the fuzz targets in $(($(date +%s) - start)) s; fuzzing ${#targets[@]} for ${seconds} s each"

run_one() {
    local t=$1 scratch="$out/corpus/$1" log="$out/logs/$1.log" rc=0
    mkdir -p "$scratch"
    # The first corpus directory receives new inputs; the committed one is only read.
    nice -n "$niceness" cargo +nightly fuzz run -O "$t" "$scratch" "fuzz/corpus/$t" -- \
        -max_total_time="$seconds" -print_final_stats=1 -timeout=20 >"$log" 2>&1 || rc=$?
    if [ "$merge" = 1 ] && [ "$rc" = 0 ]; then
        nice -n "$niceness" cargo +nightly fuzz run -O "$t" "fuzz/corpus/$t" "$scratch" -- \
            -merge=1 >>"$log" 2>&1 || rc=$?
    fi
    echo "$rc" >"$log.rc"
}

running=0
for t in "${targets[@]}"; do
    run_one "$t" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n || true
        running=$((running - 1))
    fi
done
wait

status=0
printf '%-12s %12s %9s %8s  %s\n' target execs execs/s inputs result
for t in "${targets[@]}"; do
    log="$out/logs/$t.log"
    rc=$(cat "$log.rc" 2>/dev/null || echo "?")
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    corpus=$(find "fuzz/corpus/$t" "$out/corpus/$t" -type f 2>/dev/null | wc -l)
    if [ "$rc" = 0 ]; then
        result=ok
    else
        result="FAILED (exit $rc; see $log and fuzz/artifacts/$t/)"
        status=1
    fi
    printf '%-12s %12s %9s %8s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "$corpus" "$result"
done
exit "$status"
