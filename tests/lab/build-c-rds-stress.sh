#!/bin/bash
# Builds the original C rds-stress (oracle/rds-tools) as a static binary for the lab guests
# and prints its path:  build-c-rds-stress.sh [2.0.7|2.3.11]   (default 2.0.7)
# Cached under tests/lab/cache/ (LAB_CACHE overrides), keyed by the sources and the build
# command, so a second run only hashes.
#
# Sources: a git clone or mirror of oracle/rds-tools holding the pinned commit, named by
# RDS_TOOLS_GIT (a clone's directory or a bare git dir; there is no default). The project
# keeps no copy of the original's code, so without one this fails with a message saying how
# to make one.
# 2.3.11 links json-c statically: the host's libjson-c-dev if installed, else its .deb
# fetched with `apt-get download` and extracted into the cache (never installed).
# Both are built as the real packages are: RDS_VERSION "2.0.7" (the pre-generated configure
# says 2.0.7 on every branch; it is exchanged on the control connection), DYNAMIC_PF_RDS.
set -euo pipefail

LAB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${LAB_CACHE:-$LAB_DIR/cache}
VER=${1:-2.0.7}
case $VER in
2.0.7) COMMIT=1dc77ac00fac0732731adbc7f0bae10aad17167d ;;   # master, tag rds-tools-2.0.7-1.18
2.3.11) COMMIT=579f5c64b5990eec5288881701043b7babd1a5de ;;  # tag rdma-vos/rds-tools-2.3.11-1
*) echo "usage: $0 [2.0.7|2.3.11]" >&2; exit 2 ;;
esac
FILES="rds-stress.c pfhack.c pfhack.h kernel-list.h include/rds.h"
CFLAGS="-O2 -static -w -DDEBUG_EXE -DDYNAMIC_PF_RDS -DRDS_VERSION=\"2.0.7\""

log() { echo "build-c-rds-stress: $*" >&2; }
die() { log "$*"; exit 1; }

how="clone it (git clone --bare https://github.com/oracle/rds-tools rds-tools.git) and set RDS_TOOLS_GIT=/path/to/rds-tools.git"
[ -n "${RDS_TOOLS_GIT:-}" ] ||
	die "RDS_TOOLS_GIT is not set: it names a git clone of oracle/rds-tools, whose C sources this builds; $how"
git_dir=$RDS_TOOLS_GIT
[ -d "$git_dir" ] || die "RDS_TOOLS_GIT=$git_dir does not exist; $how"
[ ! -d "$git_dir/.git" ] || git_dir=$git_dir/.git
git --git-dir="$git_dir" cat-file -e "$COMMIT^{commit}" 2>/dev/null ||
	die "RDS_TOOLS_GIT=$RDS_TOOLS_GIT is not a git clone of oracle/rds-tools holding commit $COMMIT; fetch it there, or $how"
command -v gcc >/dev/null || die "gcc not found (apt-get install gcc libc6-dev)"
mkdir -p "$CACHE"
src=$(mktemp -d "$CACHE/c-rds-stress-src.XXXXXX")
trap 'rm -rf "$src"' EXIT
mkdir -p "$src/include"

for f in $FILES; do
	git --git-dir="$git_dir" show "$COMMIT:$f" >"$src/$f" || die "$f missing in $git_dir"
done
origin="git $git_dir@$COMMIT"

LIBS=
if [ "$VER" = 2.3.11 ]; then
	jc=/usr/lib/x86_64-linux-gnu/libjson-c.a
	inc=/usr/include
	if [ ! -f "$jc" ] || [ ! -f "$inc/json-c/json.h" ]; then
		jroot=$CACHE/json-c-dev
		if [ ! -f "$jroot/usr/lib/x86_64-linux-gnu/libjson-c.a" ]; then
			log "fetching libjson-c-dev (apt-get download)"
			rm -rf "$jroot.tmp" && mkdir -p "$jroot.tmp"
			(cd "$jroot.tmp" && apt-get download libjson-c-dev >/dev/null 2>&1) ||
				{ apt-get update >/dev/null 2>&1 && (cd "$jroot.tmp" && apt-get download libjson-c-dev >/dev/null 2>&1); } ||
				die "apt-get download libjson-c-dev failed"
			dpkg-deb -x "$jroot.tmp"/libjson-c-dev_*.deb "$jroot.tmp/root"
			rm -rf "$jroot" && mv "$jroot.tmp/root" "$jroot" && rm -rf "$jroot.tmp"
		fi
		jc=$jroot/usr/lib/x86_64-linux-gnu/libjson-c.a
		inc=$jroot/usr/include
	fi
	CFLAGS="$CFLAGS -I$inc -I$inc/json-c"
	LIBS=$jc
fi

key=$( (cd "$src" && cat $FILES; echo "$CFLAGS"; [ -z "$LIBS" ] || sha256sum <"$LIBS") | sha256sum | cut -c1-16)
out=$CACHE/c-rds-stress-$VER
if [ -x "$out" ] && [ "$(cat "$out.key" 2>/dev/null)" = "$key" ]; then
	echo "$out"
	exit 0
fi
log "building $VER from $origin"
# shellcheck disable=SC2086 # CFLAGS/LIBS are word lists
gcc $CFLAGS -I"$src/include" -I"$src" -o "$out.tmp" "$src/rds-stress.c" "$src/pfhack.c" $LIBS 2>"$src/gcc.log" ||
	{ cat "$src/gcc.log" >&2; die "gcc failed"; }
mv "$out.tmp" "$out"
echo "$key" >"$out.key"
echo "$out"
