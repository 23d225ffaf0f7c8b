#!/bin/sh
# Installs the RDS tools: the five binaries to $DESTDIR$PREFIX/bin, the preload library
# (librds_preload.so, for unmodified AF_RDS programs) to $DESTDIR$PREFIX/lib and its header to
# $DESTDIR$PREFIX/include, the man pages to $DESTDIR$PREFIX/share/man/man1, man7 and man8, and
# the systemd unit of the host daemon (contrib/rds-daemon.service, its ExecStart pointing at
# the installed rds-ctrl) to $DESTDIR$PREFIX/lib/systemd/system, and each tool's shell
# completions (`TOOL --generate-completions SHELL`) to $DESTDIR$PREFIX/share/bash-completion/
# completions/TOOL, share/zsh/vendor-completions/_TOOL and share/fish/vendor_completions.d/
# TOOL.fish.
#
#   scripts/install.sh                          # builds, installs under /usr/local
#   sudo PREFIX=/usr scripts/install.sh
#   DESTDIR=/tmp/pkg PREFIX=/usr scripts/install.sh   # staging for a package
#
# PREFIX (default /usr/local) is where the files are used; DESTDIR (default empty) is put in
# front of every path written, for staging. The release binaries are built with cargo unless
# BINDIR names a directory that already holds them (for example target/release after
# `cargo build --release`); LIBDIR (default BINDIR) is where librds_preload.so is then.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
PREFIX=${PREFIX:-/usr/local}
DESTDIR=${DESTDIR:-}
TOOLS="rds-ping rds-info rds-stress rds-ctrl rds-trace"
PRELOAD=librds_preload.so

case $PREFIX in
/*) ;;
*)
	echo "install.sh: PREFIX must be an absolute path, not '$PREFIX'" >&2
	exit 2
	;;
esac

if [ -z "${BINDIR:-}" ]; then
	pkgs="-p rds-preload"
	for t in $TOOLS; do
		pkgs="$pkgs -p $t"
	done
	# shellcheck disable=SC2086 # one word per option
	cargo build --release --manifest-path "$root/Cargo.toml" $pkgs
	BINDIR=${CARGO_TARGET_DIR:-$root/target}/release
fi
LIBDIR=${LIBDIR:-$BINDIR}
for f in $TOOLS "$PRELOAD"; do
	d=$BINDIR
	[ "$f" = "$PRELOAD" ] && d=$LIBDIR
	if [ ! -x "$d/$f" ]; then
		echo "install.sh: $d/$f is missing: build it (cargo build --release) or unset BINDIR" >&2
		exit 1
	fi
done

bin=$DESTDIR$PREFIX/bin
man=$DESTDIR$PREFIX/share/man
unit=$DESTDIR$PREFIX/lib/systemd/system

lib=$DESTDIR$PREFIX/lib
inc=$DESTDIR$PREFIX/include
bash_comp=$DESTDIR$PREFIX/share/bash-completion/completions
zsh_comp=$DESTDIR$PREFIX/share/zsh/vendor-completions
fish_comp=$DESTDIR$PREFIX/share/fish/vendor_completions.d

install -d "$bin" "$lib" "$inc" "$man/man1" "$man/man7" "$man/man8" "$unit" \
	"$bash_comp" "$zsh_comp" "$fish_comp"
for t in $TOOLS; do
	install -m 0755 "$BINDIR/$t" "$bin/$t"
	"$BINDIR/$t" --generate-completions bash >"$bash_comp/$t"
	"$BINDIR/$t" --generate-completions zsh >"$zsh_comp/_$t"
	"$BINDIR/$t" --generate-completions fish >"$fish_comp/$t.fish"
	chmod 0644 "$bash_comp/$t" "$zsh_comp/_$t" "$fish_comp/$t.fish"
done
install -m 0755 "$LIBDIR/$PRELOAD" "$lib/$PRELOAD"
install -m 0644 "$root/rds-preload/include/rds_preload.h" "$inc/rds_preload.h"
for page in "$root"/man/*.[178]; do
	section=${page##*.}
	install -m 0644 "$page" "$man/man$section/"
done
sed "s|/usr/bin/rds-ctrl|$PREFIX/bin/rds-ctrl|g" "$root/contrib/rds-daemon.service" \
	>"$unit/rds-daemon.service"
chmod 0644 "$unit/rds-daemon.service"

echo "installed $TOOLS to $bin"
echo "the preload library to $lib/$PRELOAD, its header to $inc/rds_preload.h"
echo "man pages to $man, the unit to $unit/rds-daemon.service"
echo "shell completions to $bash_comp, $zsh_comp and $fish_comp"
