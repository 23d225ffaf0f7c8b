#!/usr/bin/env bash
# tshark for the dissector tests (tests/tests/dissector.rs), on a fresh Debian bookworm machine
# as root. Idempotent: does nothing when tshark is on PATH; runs `apt-get update` only if an
# install from the current package lists fails. The setuid dumpcap question of
# wireshark-common is preseeded to "no" so the install never prompts.
set -euo pipefail

if command -v tshark >/dev/null 2>&1; then
	echo "tshark deps: ok ($(tshark --version | head -n 1))"
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "tshark deps: tshark is missing and this is not root; install the tshark package" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
echo "tshark deps: installing tshark"
if ! apt-get install -y --no-install-recommends tshark; then
	apt-get update
	apt-get install -y --no-install-recommends tshark
fi
if ! command -v tshark >/dev/null 2>&1; then
	echo "tshark deps: tshark is still missing after the install" >&2
	exit 1
fi
echo "tshark deps: ok ($(tshark --version | head -n 1))"
