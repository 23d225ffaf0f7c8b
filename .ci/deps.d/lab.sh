#!/usr/bin/env bash
# Host prerequisites of the kernel interop lab (tests/lab/lab.sh, tests/tests/lab_kernel.rs)
# on a fresh Debian bookworm machine, as root. Idempotent: installs only what is missing,
# and runs `apt-get update` only if an install from the current package lists fails.
# The lab's own packages (kernel, qemu, busybox, rdma-core, ...) are not installed: lab.sh
# downloads and extracts them into tests/lab/cache at test time.
set -euo pipefail

# iproute2: ip netns / bridge / tuntap; gcc + libc6-dev: the static rdstool (libc.a);
# python3: vmlinux extraction (lzma) and the initramfs writer; util-linux: flock;
# coreutils: timeout, sha256sum; dpkg + apt: apt-get download, dpkg-deb -x.
pkgs=(iproute2 gcc libc6-dev python3 util-linux coreutils dpkg apt)
missing=()
for p in "${pkgs[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "lab deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y --no-install-recommends "${missing[@]}"; then
		apt-get update
		apt-get install -y --no-install-recommends "${missing[@]}"
	fi
fi
if ! /usr/bin/python3 -c 'import lzma' 2>/dev/null; then
	echo "lab deps: /usr/bin/python3 has no lzma module" >&2
	exit 1
fi
# the guests' taps need the tun device
if [ ! -e /dev/net/tun ]; then
	modprobe tun 2>/dev/null || true
fi
if [ ! -e /dev/net/tun ]; then
	echo "lab deps: /dev/net/tun is missing (no tun support in this kernel?)" >&2
	exit 1
fi
echo "lab deps: ok"
