#!/usr/bin/env bash
# The preload library's tests (tests/tests/preload.rs) on a fresh Debian bookworm machine as
# root: qperf (rds_lat/rds_bw between two preloaded processes), a C compiler (the C test
# program) and python3 (socket.AF_RDS). Idempotent: installs only what is missing; runs
# `apt-get update` only if an install from the current package lists fails.
set -euo pipefail

missing=()
command -v qperf >/dev/null 2>&1 || missing+=(qperf)
command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
if [ ${#missing[@]} -eq 0 ]; then
	echo "preload deps: ok (qperf, cc, python3)"
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "preload deps: missing ${missing[*]} and this is not root; install those packages" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
echo "preload deps: installing ${missing[*]}"
if ! apt-get install -y --no-install-recommends "${missing[@]}"; then
	apt-get update
	apt-get install -y --no-install-recommends "${missing[@]}"
fi
for c in qperf cc python3; do
	if ! command -v "$c" >/dev/null 2>&1; then
		echo "preload deps: $c is still missing after the install" >&2
		exit 1
	fi
done
echo "preload deps: ok (qperf, cc, python3)"
