#!/usr/bin/env bash
# rdma-core headers and run-time libraries for the verbs bindings tests
# (rds-core/tests/ib_layout.rs, ib_runtime.rs), on a fresh Debian bookworm machine as root.
# The layout test compiles a C program against <infiniband/verbs.h> and <rdma/rdma_cma.h>
# and compares every bound struct's size and field offsets with rds-core's Rust definitions;
# the run-time test loads libibverbs.so.1 and librdmacm.so.1.
# Idempotent: installs only what is missing, runs `apt-get update` only if an install from the
# current package lists fails. Nothing here is needed to *build* the workspace: rds-core loads
# rdma-core at run time.
set -euo pipefail

# libibverbs-dev pulls libibverbs1 + ibverbs-providers, librdmacm-dev pulls librdmacm1;
# gcc + libc6-dev compile the layout probe; binutils (readelf) checks there is no link-time
# dependency on rdma-core.
pkgs=(libibverbs-dev librdmacm-dev libibverbs1 librdmacm1 ibverbs-providers gcc libc6-dev binutils)
missing=()
for p in "${pkgs[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done
if [ ${#missing[@]} -eq 0 ]; then
	echo "ibverbs deps: ok"
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "ibverbs deps: missing ${missing[*]} and this is not root; install them with apt-get" >&2
	exit 1
fi
echo "ibverbs deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# wait (bounded) for a concurrent apt/dpkg run instead of failing on its lock
apt_opts=(-y --no-install-recommends -o DPkg::Lock::Timeout=300)
if ! apt-get install "${apt_opts[@]}" "${missing[@]}"; then
	apt-get -o DPkg::Lock::Timeout=300 update
	apt-get install "${apt_opts[@]}" "${missing[@]}"
fi
echo "ibverbs deps: ok"
