#!/usr/bin/env bash
# Python's prometheus_client for the metrics tests (tests/tests/metrics.rs and the kernel lab's
# rds-info check, through tests/src/prometheus.rs): the Prometheus text parser they run our
# exposition through, in /usr/bin/python3 (Debian's python3-prometheus-client), on a fresh
# Debian bookworm machine as root. Idempotent: does nothing when the module imports; runs
# `apt-get update` only if an install from the current package lists fails.
set -euo pipefail

py=/usr/bin/python3
if [ -x "$py" ] && "$py" -c 'import prometheus_client.parser' 2>/dev/null; then
	echo "prometheus deps: ok (prometheus_client $("$py" -c 'import importlib.metadata as m; print(m.version("prometheus_client"))'))"
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "prometheus deps: $py cannot import prometheus_client and this is not root; install the python3-prometheus-client package" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
echo "prometheus deps: installing python3-prometheus-client"
if ! apt-get install -y --no-install-recommends python3 python3-prometheus-client; then
	apt-get update
	apt-get install -y --no-install-recommends python3 python3-prometheus-client
fi
if ! "$py" -c 'import prometheus_client.parser' 2>/dev/null; then
	echo "prometheus deps: $py still cannot import prometheus_client after the install" >&2
	exit 1
fi
echo "prometheus deps: ok (prometheus_client $("$py" -c 'import importlib.metadata as m; print(m.version("prometheus_client"))'))"
