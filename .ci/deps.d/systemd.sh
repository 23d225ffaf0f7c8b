#!/usr/bin/env bash
# systemd-analyze for tests/tests/systemd_unit.rs (`systemd-analyze verify` of
# contrib/rds-daemon.service), on a fresh Debian bookworm machine as root. A machine booted
# with systemd has it; a container image may not. Idempotent: does nothing when
# systemd-analyze is on PATH; runs `apt-get update` only if an install from the current
# package lists fails.
set -euo pipefail

if command -v systemd-analyze >/dev/null 2>&1; then
	echo "systemd deps: ok (systemd-analyze)"
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "systemd deps: systemd-analyze is missing and this is not root; install the systemd package" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
echo "systemd deps: installing systemd"
if ! apt-get install -y --no-install-recommends systemd; then
	apt-get update
	apt-get install -y --no-install-recommends systemd
fi
if ! command -v systemd-analyze >/dev/null 2>&1; then
	echo "systemd deps: systemd-analyze is still missing after the install" >&2
	exit 1
fi
echo "systemd deps: ok (systemd-analyze)"
