#!/usr/bin/env bash
# cargo-fuzz for the fuzz smoke run of scripts/test-all.sh (scripts/fuzz.sh). The nightly
# toolchain comes with the machine (rustup); cargo-fuzz is built from crates.io when missing.
# Idempotent.
set -euo pipefail

if ! cargo +nightly --version >/dev/null 2>&1; then
	echo "fuzz deps: the nightly toolchain is missing; install it with 'rustup toolchain install nightly'" >&2
	exit 1
fi
if cargo +nightly fuzz --version >/dev/null 2>&1; then
	echo "fuzz deps: ok ($(cargo +nightly fuzz --version))"
	exit 0
fi
echo "fuzz deps: installing cargo-fuzz"
cargo install --locked cargo-fuzz
echo "fuzz deps: ok ($(cargo +nightly fuzz --version))"
