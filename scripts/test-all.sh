#!/usr/bin/env bash
# The project's test command (see README.md): installs test prerequisites when missing,
# checks formatting and lints, then runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
for f in .ci/deps.d/*.sh; do
	[ -e "$f" ] || continue
	echo "== prerequisites: $f"
	bash "$f"
done
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --release -- -D warnings
echo "== cargo test"
cargo test --workspace --release
