#!/usr/bin/env bash
# qperf and iperf3, the raw-TCP references of scripts/bench-app-path.sh (a benchmark, not a
# test: CI does not run it; without them it falls back to the raw_tcp example). Debian
# bookworm, as root. Idempotent: installs only what is missing.
set -euo pipefail

missing=()
for p in qperf iperf3; do
	if ! command -v "$p" >/dev/null 2>&1; then
		missing+=("$p")
	fi
done
if [ ${#missing[@]} -eq 0 ]; then
	echo "bench deps: ok"
	exit 0
fi
echo "bench deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q "${missing[@]}" || { apt-get update -q && apt-get install -y -q "${missing[@]}"; }
echo "bench deps: ok"
