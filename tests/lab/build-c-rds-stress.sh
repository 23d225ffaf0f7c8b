#!/bin/bash
# Builds the original C rds-stress (oracle/rds-tools 2.0.7) as a static binary for the lab
# guests and prints its path. Cached under tests/lab/cache/ (LAB_CACHE overrides), keyed by
# the sources and the build command, so a second run only hashes.
#
# Sources: a git mirror of oracle/rds-tools at the pinned commit when one exists
# (RDS_TOOLS_GIT = its git dir, default /work/.mirror/oracle+rds-tools/repo), else the
# vendored copy in tests/lab/c-rds-stress/ (CI has no GitHub access).
set -euo pipefail

LAB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${LAB_CACHE:-$LAB_DIR/cache}
VENDOR=$LAB_DIR/c-rds-stress
COMMIT=1dc77ac00fac0732731adbc7f0bae10aad17167d
VERSION=2.0.7
FILES="rds-stress.c pfhack.c pfhack.h kernel-list.h include/rds.h"
CFLAGS="-O2 -static -w -DRDS_VERSION=\"$VERSION\""

log() { echo "build-c-rds-stress: $*" >&2; }
die() { log "$*"; exit 1; }

command -v gcc >/dev/null || die "gcc not found (apt-get install gcc libc6-dev)"
mkdir -p "$CACHE"
src=$(mktemp -d "$CACHE/c-rds-stress-src.XXXXXX")
trap 'rm -rf "$src"' EXIT
mkdir -p "$src/include"

git_dir=${RDS_TOOLS_GIT:-/work/.mirror/oracle+rds-tools/repo}
origin=vendored
if [ -d "$git_dir" ] && git --git-dir="$git_dir" cat-file -e "$COMMIT^{commit}" 2>/dev/null; then
	for f in $FILES; do
		git --git-dir="$git_dir" show "$COMMIT:$f" >"$src/$f" || die "$f missing in $git_dir"
	done
	origin="git $git_dir@$COMMIT"
else
	for f in $FILES; do
		b=$(basename "$f")
		[ -f "$VENDOR/$b" ] || die "vendored $VENDOR/$b missing"
		cp "$VENDOR/$b" "$src/$f"
	done
fi

key=$( (cd "$src" && cat $FILES; echo "$CFLAGS") | sha256sum | cut -c1-16)
out=$CACHE/c-rds-stress
if [ -x "$out" ] && [ "$(cat "$out.key" 2>/dev/null)" = "$key" ]; then
	echo "$out"
	exit 0
fi
log "building from $origin (gcc $CFLAGS)"
# shellcheck disable=SC2086 # CFLAGS is a word list
gcc $CFLAGS -I"$src/include" -I"$src" -o "$out.tmp" "$src/rds-stress.c" "$src/pfhack.c" 2>"$src/gcc.log" ||
	{ cat "$src/gcc.log" >&2; die "gcc failed"; }
mv "$out.tmp" "$out"
echo "$key" >"$out.key"
echo "$out"
