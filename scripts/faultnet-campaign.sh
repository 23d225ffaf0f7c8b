#!/bin/sh
# A faultnet campaign: the kernel-selftest replica through the cutting proxy
# (tests/tests/faultnet.rs) for COUNT consecutive seeds from FIRST, one after the other.
# Prints each failing seed with the test's last lines, then how many passed and the time.
# Exit status: 0 when every seed passed, 1 otherwise, 2 on bad arguments.
#
#   scripts/faultnet-campaign.sh FIRST COUNT
#
# FAULTNET_KEEP=DIR keeps each failing seed's whole output in DIR/seed-N.log.
# FAULTNET_NET=N (1-254) runs on 127.3.N.0/24 instead of 127.3.3.0/24, beside another run.
set -eu
if [ $# -ne 2 ] || ! [ "$1" -ge 0 ] 2>/dev/null || ! [ "$2" -ge 1 ] 2>/dev/null; then
	echo "usage: $0 FIRST_SEED COUNT (non-negative integers, COUNT >= 1)" >&2
	exit 2
fi
first=$1
count=$2
cd "$(dirname "$0")/.."
cargo test --release -p rds-tests --test faultnet --no-run 2>/dev/null
bin=$(cargo test --release -p rds-tests --test faultnet --no-run --message-format=json 2>/dev/null |
	sed -n 's/.*"executable":"\([^"]*faultnet[^"]*\)".*/\1/p' | tail -1)
[ -x "$bin" ] || { echo "cannot find the faultnet test binary" >&2; exit 1; }
# A copy, so that a build during the campaign does not change what runs.
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp "$bin" "$dir/faultnet"
bin=$dir/faultnet
log=$dir/log
start=$(date +%s)
failed=0
s=$first
end=$((first + count))
while [ "$s" -lt "$end" ]; do
	# A run that hangs past its own 60 s deadline is a failure too.
	if ! FAULTNET_SEED=$s timeout 120 "$bin" --test-threads=1 >"$log" 2>&1; then
		failed=$((failed + 1))
		echo "seed $s FAILED:"
		grep -E "panicked|received|stalled|assert" "$log" | head -5 | sed 's/^/    /'
		if [ -n "${FAULTNET_KEEP:-}" ]; then
			mkdir -p "$FAULTNET_KEEP"
			cp "$log" "$FAULTNET_KEEP/seed-$s.log"
		fi
	fi
	s=$((s + 1))
done
secs=$(($(date +%s) - start))
echo "faultnet seeds $first..$((end - 1)): $((count - failed)) of $count passed in ${secs} s"
[ "$failed" -eq 0 ]
