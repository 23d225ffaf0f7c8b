#!/usr/bin/env bash
# The project's test command (see README.md): installs test prerequisites when missing,
# checks formatting and lints, runs every fuzz target briefly (a smoke run; scripts/fuzz.sh
# runs them longer), then runs every test of the workspace.
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
echo "== fuzz smoke: every target of rds-core/fuzz for ${FUZZ_SMOKE_SECONDS:-20} s (scripts/fuzz.sh)"
FUZZ_SECONDS=${FUZZ_SMOKE_SECONDS:-20} FUZZ_JOBS=2 scripts/fuzz.sh
echo "== cargo test"
cargo test --workspace --release
