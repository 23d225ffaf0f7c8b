#!/usr/bin/env bash
# Kernel RDS interop lab: the stock Debian bookworm kernel (rds, rds_tcp, rds_rdma,
# rdma_rxe) in one or two qemu guests on a bridge inside the private network namespace
# `rdslab`. Usage and the job-spool protocol: tests/lab/README.md, or `lab.sh help`.
#
# Network rule: every test address (198.18.0.0/24) lives inside the `rdslab` namespace
# and the guests attached to it. Nothing is configured in the host's main namespace.
set -euo pipefail

LAB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${LAB_CACHE:-$LAB_DIR/cache}
RUN=${LAB_RUN:-$LAB_DIR/run}
NS=rdslab
GUEST_MEM=${LAB_MEM:-768}
GUEST_SMP=${LAB_SMP:-1}
BOOT_TIMEOUT=${LAB_BOOT_TIMEOUT:-120}
EXEC_TIMEOUT=${LAB_EXEC_TIMEOUT:-120}
LAB_LOCK=${LAB_LOCK:-/run/lock/rdslab.lock}
HOST_ADDR1=198.18.0.1
HOST_ADDR2=198.18.0.3

# packages for the guest userland; their library dependencies are added automatically
GUEST_BASE_PKGS="libc6 libgcc-s1 iproute2 libibverbs1 librdmacm1 ibverbs-providers ibverbs-utils rdmacm-utils perftest qperf"
# binaries copied into the guest (with the libraries ldd lists for them)
GUEST_BINS="ip tc rdma ss bridge ibv_devices ibv_devinfo ibv_rc_pingpong ibv_ud_pingpong ibv_srq_pingpong rping ucmatose udaddy rdma_server rdma_client ib_send_bw ib_send_lat ib_write_bw ib_write_lat ib_read_bw ib_read_lat ib_atomic_bw ib_atomic_lat qperf"
# extra shared libraries for host-built glibc-dynamic programs (e.g. Rust binaries)
GUEST_EXTRA_LIBS="libc.so.6 libm.so.6 libgcc_s.so.1 libpthread.so.0 libdl.so.2 librt.so.1 libutil.so.1 libresolv.so.2 libnss_files.so.2 libibverbs.so.1 librdmacm.so.1"
# kernel modules whose dependency closure goes into the initramfs
GUEST_MODULES="virtio_pci virtio_net 9pnet_virtio 9p rds rds_tcp rds_rdma rdma_rxe ib_uverbs rdma_ucm crc32_generic crc32_pclmul sch_netem"

log() { echo "lab: $*" >&2; }
die() {
	echo "lab: error: $*" >&2
	exit 1
}

guest_ip() {
	case "$1" in
	1) echo 198.18.0.2 ;;
	2) echo 198.18.0.4 ;;
	*) die "guest must be 1 or 2, got '$1'" ;;
	esac
}

need_root() { [ "$(id -u)" = 0 ] || die "must run as root (needs network namespaces and taps)"; }

need_cmds() {
	local c missing=()
	for c in "$@"; do command -v "$c" >/dev/null 2>&1 || missing+=("$c"); done
	[ ${#missing[@]} -eq 0 ] || die "missing host commands: ${missing[*]} (see .ci/deps.d/lab.sh)"
}

pick_python() {
	if [ -x /usr/bin/python3 ]; then PY=/usr/bin/python3; else PY=$(command -v python3 || true); fi
	[ -n "$PY" ] || die "python3 is required"
}

now_ms() { date +%s%3N; }

# ---------------------------------------------------------------------------------------
# setup: download, extract, build

APT_UPDATED=0
apt_update() {
	[ "$APT_UPDATED" = 1 ] && return 0
	log "apt-get update"
	apt-get update -qq >&2 || die "apt-get update failed"
	APT_UPDATED=1
}

resolve_kernel() {
	if [ -n "${KPKG:-}" ]; then
		KERNEL_PKG=$KPKG
	else
		local dep
		dep=$(apt-cache show --no-all-versions linux-image-amd64 2>/dev/null |
			sed -n 's/^Depends: *\(linux-image-[^ ,]*\).*/\1/p' | head -n 1 || true)
		if [ -z "$dep" ]; then
			apt_update
			dep=$(apt-cache show --no-all-versions linux-image-amd64 2>/dev/null |
				sed -n 's/^Depends: *\(linux-image-[^ ,]*\).*/\1/p' | head -n 1 || true)
		fi
		[ -n "$dep" ] || die "cannot resolve linux-image-amd64 to a kernel package (apt sources?)"
		KERNEL_PKG=$dep
	fi
	case "$KERNEL_PKG" in
	linux-image-*-amd64) ;;
	*) die "unexpected kernel package name '$KERNEL_PKG' (KPKG=linux-image-6.1.0-NN-amd64)" ;;
	esac
	KVER=${KERNEL_PKG#linux-image-}
}

deb_of() {
	# newest cached .deb of package $1 (empty if none)
	local f
	f=$(compgen -G "$CACHE/debs/${1}_*.deb" | sort -V | tail -n 1 || true)
	echo "$f"
}

# download PKG...: fetch the packages that are not cached yet; returns 1 on failure
download() {
	local p missing=()
	local -A seen=()
	for p in "$@"; do
		[ -n "${seen[$p]:-}" ] && continue
		seen[$p]=1
		[ -n "$(deb_of "$p")" ] || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	log "downloading ${#missing[@]} package(s): ${missing[*]}"
	local part="$CACHE/debs/.partial"
	rm -rf "$part"
	mkdir -p "$part"
	if ! (cd "$part" && apt-get -q -o APT::Sandbox::User=root download "${missing[@]}" >&2); then
		rm -rf "$part"
		return 1
	fi
	mv "$part"/*.deb "$CACHE/debs/"
	rm -rf "$part"
	for p in "${missing[@]}"; do
		[ -n "$(deb_of "$p")" ] || die "package $p was not downloaded"
	done
}

# extract_tree DIR PKG...: extract the .debs of PKG... into DIR unless already done
extract_tree() {
	local dir=$1
	shift
	local p stamp="" f
	for p in "$@"; do stamp+="$(basename "$(deb_of "$p")") "; done
	if [ -f "$dir/.lab-stamp" ] && [ "$(cat "$dir/.lab-stamp")" = "$stamp" ]; then
		return 0
	fi
	log "extracting $# package(s) into ${dir#"$CACHE"/}"
	rm -rf "$dir"
	mkdir -p "$dir"
	for p in "$@"; do
		f=$(deb_of "$p")
		dpkg-deb -x "$f" "$dir" || die "dpkg-deb -x $f failed"
	done
	printf '%s' "$stamp" >"$dir/.lab-stamp"
}

package_lists() {
	# qemu: exactly what `apt-get install -s --no-install-recommends qemu-system-x86` would add
	local ql="$CACHE/qemu-pkgs.txt"
	if [ ! -s "$ql" ]; then
		local sim
		sim=$(apt-get install -s --no-install-recommends qemu-system-x86 2>&1) || {
			apt_update
			sim=$(apt-get install -s --no-install-recommends qemu-system-x86 2>&1) ||
				die "apt-get install -s qemu-system-x86 failed: $(echo "$sim" | tail -n 3)"
		}
		{
			echo "$sim" | awk '/^Inst /{print $2}'
			# the core packages, even if the host already has some of them installed
			printf '%s\n' qemu-system-x86 qemu-system-common qemu-system-data seabios
		} | sort -u >"$ql.tmp"
		mv "$ql.tmp" "$ql"
	fi
	QEMU_PKGS=$(tr '\n' ' ' <"$ql")

	local gl="$CACHE/guest-pkgs.txt"
	if [ ! -s "$gl" ] || [ "$(head -n 1 "$gl")" != "# $GUEST_BASE_PKGS" ]; then
		local cl
		# shellcheck disable=SC2086
		cl=$("$PY" "$LAB_DIR/labpy.py" libclosure $GUEST_BASE_PKGS 2>/dev/null) || {
			apt_update
			# shellcheck disable=SC2086
			cl=$("$PY" "$LAB_DIR/labpy.py" libclosure $GUEST_BASE_PKGS) ||
				die "cannot compute the guest package closure"
		}
		{
			echo "# $GUEST_BASE_PKGS"
			echo "$cl"
		} >"$gl.tmp"
		mv "$gl.tmp" "$gl"
	fi
	GUEST_PKGS=$(tail -n +2 "$gl" | tr '\n' ' ')
}

build_rdstool() {
	local src="$LAB_DIR/rdstool.c" out="$CACHE/rdstool"
	if [ -x "$out" ] && [ "$out" -nt "$src" ]; then return 0; fi
	log "building rdstool (gcc -O2 -static)"
	gcc -O2 -static -Wall -Wextra -o "$out.tmp" "$src" || die "building rdstool failed"
	mv "$out.tmp" "$out"
}

# copy_elf_with_libs STAGE FILE...: the libraries each FILE needs (resolved with the
# guest tree's own dynamic loader) are copied into STAGE/usr/lib/x86_64-linux-gnu
copy_libs() {
	local stage=$1
	shift
	local gr="$CACHE/guest-root"
	local ld="$gr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
	[ -e "$ld" ] || ld="$gr/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
	[ -e "$ld" ] || die "guest glibc loader not found in $gr"
	local lp="$gr/lib/x86_64-linux-gnu:$gr/usr/lib/x86_64-linux-gnu:$gr/usr/lib/x86_64-linux-gnu/libibverbs"
	local f line lib path
	local -A seen=()
	for f in "$@"; do
		local out
		out=$("$ld" --library-path "$lp" --list "$f" 2>&1) || die "ldd of $f failed: $out"
		while IFS= read -r line; do
			case "$line" in
			*"not found"*) die "library missing for $f: $line" ;;
			*" => "*)
				lib=$(echo "$line" | awk '{print $1}')
				lib=${lib##*/}
				path=$(echo "$line" | awk '{print $3}')
				;;
			*ld-linux-x86-64.so.2*)
				lib="ld-linux-x86-64.so.2"
				path=$ld
				;;
			*) continue ;;
			esac
			[ -n "${seen[$lib]:-}" ] && continue
			seen[$lib]=1
			case "$path" in
			"$gr"/*) ;;
			*) log "warning: $lib for $(basename "$f") comes from the host ($path)" ;;
			esac
			cp -L "$path" "$stage/usr/lib/x86_64-linux-gnu/$lib"
		done <<<"$out"
	done
	cp -L "$ld" "$stage/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
	ln -sf ../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$stage/usr/lib64/ld-linux-x86-64.so.2"
}

build_initramfs() {
	local kroot="$CACHE/kernel/root" gr="$CACHE/guest-root" tr="$CACHE/tools-root"
	local out="$CACHE/initramfs-$KVER.cpio" fpfile="$CACHE/initramfs-$KVER.fp"
	local fp
	fp=$(
		{
			cat "$LAB_DIR/guest-init" "$LAB_DIR/labpy.py" "$CACHE/rdstool"
			declare -f build_initramfs copy_libs
			echo "$KVER $GUEST_PKGS $GUEST_BINS $GUEST_EXTRA_LIBS $GUEST_MODULES"
		} | sha256sum | cut -d' ' -f1
	)
	if [ -s "$out" ] && [ -f "$fpfile" ] && [ "$(cat "$fpfile")" = "$fp" ]; then
		INITRD=$out
		return 0
	fi
	log "building initramfs for $KVER"
	local st="$CACHE/initramfs-root"
	rm -rf "$st"
	mkdir -p "$st"/{usr/bin,usr/sbin,usr/lib/x86_64-linux-gnu,usr/lib64,etc,proc,sys,dev,tmp,run,mnt/share,root,var}
	ln -s usr/bin "$st/bin"
	ln -s usr/sbin "$st/sbin"
	ln -s usr/lib "$st/lib"
	ln -s usr/lib64 "$st/lib64"

	# busybox and its applet links
	cp "$tr/bin/busybox" "$st/usr/bin/busybox"
	local a dst
	while IFS= read -r a; do
		case "$a" in
		bin/*) dst="usr/bin/${a#bin/}" ;;
		sbin/*) dst="usr/sbin/${a#sbin/}" ;;
		usr/*) dst=$a ;;
		*) continue ;;
		esac
		[ -e "$st/$dst" ] || [ -L "$st/$dst" ] || ln -s /usr/bin/busybox "$st/$dst"
	done < <("$tr/bin/busybox" --list-full)
	[ -L "$st/usr/sbin/modprobe" ] || die "busybox has no modprobe applet"

	# kernel modules: the closure of GUEST_MODULES, plus modules.dep from depmod -b
	local mdir="lib/modules/$KVER"
	local line rel n=0
	local show
	# shellcheck disable=SC2086
	show=$(kmod_run modprobe -C /dev/null -d "$kroot" -S "$KVER" --show-depends -a $GUEST_MODULES) ||
		die "modprobe --show-depends failed: $show"
	mkdir -p "$st/usr/$mdir"
	while IFS= read -r line; do
		case "$line" in
		insmod\ *)
			rel=${line#insmod }
			rel=${rel%% *}
			rel=${rel#"$kroot"/}
			if [ ! -e "$st/usr/$rel" ]; then
				mkdir -p "$(dirname "$st/usr/$rel")"
				cp "$kroot/$rel" "$st/usr/$rel" || die "copying $rel failed"
				n=$((n + 1))
			fi
			;;
		builtin\ *) ;;
		*) [ -z "$line" ] || die "unexpected modprobe output: $line" ;;
		esac
	done <<<"$show"
	cp "$kroot/$mdir"/modules.{order,builtin,builtin.modinfo} "$st/usr/$mdir/"
	kmod_run depmod -b "$st/usr" "$KVER" || die "depmod -b failed"
	[ "$n" -gt 0 ] && [ -s "$st/usr/$mdir/modules.dep" ] || die "depmod produced no modules.dep"
	log "initramfs: $n kernel modules"

	# guest userland binaries (real iproute2 etc. replace busybox applets of the same name)
	local b f elfs=()
	for b in $GUEST_BINS; do
		f=""
		for d in usr/bin usr/sbin bin sbin; do
			if [ -f "$gr/$d/$b" ] && [ ! -L "$gr/$d/$b" ]; then
				f="$gr/$d/$b"
				break
			fi
		done
		[ -n "$f" ] || die "guest binary $b not found in the extracted packages"
		rm -f "$st/usr/bin/$b" "$st/usr/sbin/$b"
		cp "$f" "$st/usr/bin/$b"
		elfs+=("$f")
	done
	# Debian's busybox-static prefers its own applets over PATH: shell functions for the
	# real binaries, sourced by /init, the job agent and login shells
	local applets
	applets=" $("$tr/bin/busybox" --list | tr '\n' ' ') "
	: >"$st/etc/lab-functions"
	for b in $GUEST_BINS; do
		case "$applets" in *" $b "*) echo "$b() { /usr/bin/$b \"\$@\"; }" >>"$st/etc/lab-functions" ;; esac
	done
	# libibverbs provider for rxe
	local prov
	prov=$(compgen -G "$gr/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so" | head -n 1 || true)
	[ -n "$prov" ] || die "rxe provider (librxe-rdmav*.so) not found in ibverbs-providers"
	mkdir -p "$st/usr/lib/x86_64-linux-gnu/libibverbs" "$st/etc/libibverbs.d"
	cp "$prov" "$st/usr/lib/x86_64-linux-gnu/libibverbs/"
	cp "$gr/etc/libibverbs.d/rxe.driver" "$st/etc/libibverbs.d/" || die "rxe.driver missing"
	elfs+=("$prov")
	# libraries for the binaries, plus glibc/libgcc_s for host-built programs
	local l
	for l in $GUEST_EXTRA_LIBS; do
		f=$(compgen -G "$gr/lib/x86_64-linux-gnu/$l" || compgen -G "$gr/usr/lib/x86_64-linux-gnu/$l" || true)
		[ -n "$f" ] || die "library $l not found in the guest packages"
		f=$(echo "$f" | head -n 1)
		cp -L "$f" "$st/usr/lib/x86_64-linux-gnu/$l"
		elfs+=("$f")
	done
	copy_libs "$st" "${elfs[@]}"

	# our tools and /init
	cp "$CACHE/rdstool" "$st/usr/bin/rdstool"
	cp "$LAB_DIR/guest-init" "$st/init"
	chmod 755 "$st/init" "$st/usr/bin/rdstool"
	cat >"$st/etc/hosts" <<EOF
127.0.0.1 localhost
$HOST_ADDR1 host host1
$HOST_ADDR2 host2
198.18.0.2 g1
198.18.0.4 g2
EOF
	echo "hosts: files" >"$st/etc/nsswitch.conf"
	echo "root:x:0:0:root:/root:/bin/sh" >"$st/etc/passwd"
	echo "root:x:0:" >"$st/etc/group"
	echo 'export PATH=/usr/sbin:/usr/bin:/sbin:/bin PS1="\h# "; . /etc/lab-functions' >"$st/etc/profile"

	"$PY" "$LAB_DIR/labpy.py" cpio "$st" "$out.tmp" || die "writing the initramfs failed"
	mv "$out.tmp" "$out"
	echo "$fp" >"$fpfile"
	rm -rf "$st"
	log "initramfs: $(du -h "$out" | cut -f1) ($out)"
	INITRD=$out
}

kmod_run() {
	# kmod is multi-call: run it under the name of the tool
	local tool=$1
	shift
	local tr="$CACHE/tools-root"
	mkdir -p "$CACHE/bin"
	ln -sf "$tr/bin/kmod" "$CACHE/bin/$tool"
	LD_LIBRARY_PATH="$tr/usr/lib/x86_64-linux-gnu:$tr/lib/x86_64-linux-gnu" "$CACHE/bin/$tool" "$@" 2>&1
}

qemu_env() {
	QROOT="$CACHE/qemu-root"
	QEMU_BIN="$QROOT/usr/bin/qemu-system-x86_64"
	QEMU_LD="$QROOT/usr/lib/x86_64-linux-gnu:$QROOT/lib/x86_64-linux-gnu"
	QEMU_MODDIR="$QROOT/usr/lib/x86_64-linux-gnu/qemu"
}

cmd_setup() {
	need_root
	need_cmds apt-get apt-cache dpkg-deb gcc ip flock sha256sum
	pick_python
	mkdir -p "$CACHE/debs"
	exec 8>"$CACHE/.setup.lock"
	flock -w 900 8 || die "another setup holds $CACHE/.setup.lock"
	local t0
	t0=$(now_ms)
	resolve_kernel
	package_lists
	# shellcheck disable=SC2086
	if ! download "$KERNEL_PKG" kmod libkmod2 busybox-static $QEMU_PKGS $GUEST_PKGS; then
		# stale package lists: refresh them, resolve the kernel again, retry once
		[ "$APT_UPDATED" = 1 ] && die "apt-get download failed (see above)"
		apt_update
		resolve_kernel
		# shellcheck disable=SC2086
		download "$KERNEL_PKG" kmod libkmod2 busybox-static $QEMU_PKGS $GUEST_PKGS ||
			die "apt-get download failed even after apt-get update (see above)"
	fi

	# keep only the kernel in use (each one costs ~70 MB of .deb and ~65 MB of vmlinux)
	local old
	for old in "$CACHE"/debs/linux-image-*.deb "$CACHE"/kernel/vmlinux-* "$CACHE"/initramfs-*; do
		[ -e "$old" ] || continue
		case "$(basename "$old")" in
		"${KERNEL_PKG}"_* | vmlinux-"$KVER" | initramfs-"$KVER".*) ;;
		*) rm -f "$old" ;;
		esac
	done
	# kernel tree (boot/ and lib/modules/) and depmod
	local kroot="$CACHE/kernel/root"
	extract_tree "$kroot" "$KERNEL_PKG"
	[ -d "$kroot/lib/modules/$KVER/kernel" ] || die "no lib/modules/$KVER in $KERNEL_PKG"
	extract_tree "$CACHE/tools-root" kmod libkmod2 busybox-static
	if [ ! -s "$kroot/lib/modules/$KVER/modules.dep" ]; then
		log "depmod -b (kernel tree)"
		kmod_run depmod -b "$kroot" "$KVER" >/dev/null || die "depmod -b $kroot failed"
	fi
	VMLINUX="$CACHE/kernel/vmlinux-$KVER"
	if [ ! -s "$VMLINUX" ]; then
		log "extracting vmlinux from vmlinuz-$KVER"
		"$PY" "$LAB_DIR/labpy.py" vmlinux "$kroot/boot/vmlinuz-$KVER" "$VMLINUX" ||
			die "vmlinux extraction failed"
	fi
	# shellcheck disable=SC2086
	extract_tree "$CACHE/qemu-root" $QEMU_PKGS
	# shellcheck disable=SC2086
	extract_tree "$CACHE/guest-root" $GUEST_PKGS
	qemu_env
	[ -x "$QEMU_BIN" ] || die "qemu-system-x86_64 missing from the extracted qemu packages"
	LD_LIBRARY_PATH="$QEMU_LD" "$QEMU_BIN" --version >/dev/null 2>&1 ||
		die "extracted qemu does not run: $(LD_LIBRARY_PATH="$QEMU_LD" "$QEMU_BIN" --version 2>&1 | tail -n 2)"
	build_rdstool
	build_initramfs
	cat >"$CACHE/lab.env.tmp" <<EOF
KVER=$KVER
KERNEL_PKG=$KERNEL_PKG
VMLINUX=$VMLINUX
INITRD=$INITRD
EOF
	mv "$CACHE/lab.env.tmp" "$CACHE/lab.env"
	log "setup done in $(($(now_ms) - t0)) ms (kernel $KVER)"
}

# ---------------------------------------------------------------------------------------
# network namespace

ns_exists() { ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$NS"; }

netns_up() {
	mkdir -p "$RUN"
	if ! ns_exists; then
		ip netns add "$NS" || die "ip netns add $NS failed"
		touch "$RUN/netns.created"
	fi
	ip -n "$NS" link set lo up
	ip -n "$NS" link show br0 >/dev/null 2>&1 || ip -n "$NS" link add br0 type bridge ||
		die "creating br0 failed"
	# no STP, forward at once
	ip -n "$NS" link set br0 type bridge stp_state 0 forward_delay 0 2>/dev/null || true
	ip -n "$NS" addr replace "$HOST_ADDR1/24" dev br0
	ip -n "$NS" addr replace "$HOST_ADDR2/24" dev br0
	ip -n "$NS" link set br0 up
	local t
	for t in tap1 tap2; do
		ip -n "$NS" link show "$t" >/dev/null 2>&1 || ip -n "$NS" tuntap add dev "$t" mode tap ||
			die "creating $t failed"
		ip -n "$NS" link set "$t" master br0
		ip -n "$NS" link set "$t" up
	done
}

# ---------------------------------------------------------------------------------------
# guests

accel_args() {
	local a=${ACCEL:-auto}
	if [ "$a" = auto ]; then
		if [ -d /sys/module/kvm_pvm ] || [ ! -w /dev/kvm ]; then a=tcg; else a=kvm; fi
	fi
	case "$a" in
	tcg) ACCEL_USED=tcg ACCEL_ARGS="-accel tcg -cpu max" ;;
	kvm) ACCEL_USED=kvm ACCEL_ARGS="-accel kvm -cpu host" ;;
	*) die "ACCEL must be auto, tcg or kvm" ;;
	esac
}

# LAB_SMP: vCPUs per guest, a small positive integer (1..8; default 1). qemu's TCG runs one
# host thread per vCPU (multi-threaded TCG, its default for x86 guests on x86 hosts).
check_smp() {
	case "$GUEST_SMP" in
	[1-8]) ;;
	*) die "LAB_SMP must be the number of vCPUs per guest, 1 to 8, got '$GUEST_SMP'" ;;
	esac
}

qemu_pid_of() {
	# prints the pid of guest $1's qemu if it is alive and is ours
	local g=$1 pf="$RUN/g$1/qemu.pid" pid
	[ -f "$pf" ] || return 1
	pid=$(cat "$pf" 2>/dev/null || true)
	[ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$RUN/g$g/" || return 1
	echo "$pid"
}

running_guests() {
	local g n=0
	for g in 1 2; do qemu_pid_of "$g" >/dev/null && n=$((n + 1)); done
	echo $n
}

# qemu_args G IB MODE: the qemu command line (after the binary) for guest G
qemu_args() {
	local g=$1 ib=$2 mode=$3
	local gd="$RUN/g$g" ip
	ip=$(guest_ip "$g")
	# shellcheck disable=SC2206
	QARGS=(-name "lab-g$g" $ACCEL_ARGS -smp "$GUEST_SMP" -m "$GUEST_MEM"
		-nodefaults -no-user-config -no-reboot
		-L "$QROOT/usr/share/qemu" -L "$QROOT/usr/share/seabios"
		-kernel "$VMLINUX" -initrd "$INITRD"
		-append "console=ttyS0 quiet loglevel=3 panic=-1 lab.mode=$mode lab.ip=$ip lab.name=g$g lab.ib=$ib"
		-netdev "tap,id=n0,ifname=tap$g,script=no,downscript=no"
		-device "virtio-net-pci,netdev=n0,mac=52:54:00:00:00:0$g,romfile="
		-virtfs "local,path=$gd/share,mount_tag=share,security_model=none,id=share"
		-display none)
}

launch_guest() {
	local g=$1 ib=$2
	local gd="$RUN/g$g"
	rm -rf "$gd"
	mkdir -p "$gd/share/jobs"
	qemu_args "$g" "$ib" agent
	ip netns exec "$NS" env LD_LIBRARY_PATH="$QEMU_LD" QEMU_MODULE_DIR="$QEMU_MODDIR" \
		"$QEMU_BIN" "${QARGS[@]}" -monitor none -serial "file:$gd/console.log" \
		-pidfile "$gd/qemu.pid" -daemonize >"$gd/qemu.stderr" 2>&1 7>&- 8>&- ||
		die "qemu for g$g failed to start: $(tail -n 5 "$gd/qemu.stderr")"
}

cmd_shell() {
	need_root
	local g=${1:-1} ib=${LAB_IB:-1}
	guest_ip "$g" >/dev/null
	qemu_pid_of "$g" >/dev/null && die "g$g is running (lab.sh stop first)"
	[ -f "$CACHE/lab.env" ] || die "lab not set up (run lab.sh setup)"
	# shellcheck disable=SC1091
	. "$CACHE/lab.env"
	qemu_env
	accel_args
	check_smp
	netns_up
	rm -rf "$RUN/g$g"
	mkdir -p "$RUN/g$g/share/jobs"
	qemu_args "$g" "$ib" shell
	log "interactive g$g: quit with Ctrl-a x; 'lab.sh stop' removes the namespace afterwards"
	ip netns exec "$NS" env LD_LIBRARY_PATH="$QEMU_LD" QEMU_MODULE_DIR="$QEMU_MODDIR" \
		"$QEMU_BIN" "${QARGS[@]}" -serial mon:stdio
}

console_tail() {
	local g=$1
	echo "---- g$g console (last 40 lines) ----" >&2
	tail -n 40 "$RUN/g$g/console.log" >&2 2>/dev/null || echo "(no console log)" >&2
	if [ -s "$RUN/g$g/qemu.stderr" ]; then
		echo "---- g$g qemu stderr ----" >&2
		tail -n 10 "$RUN/g$g/qemu.stderr" >&2
	fi
}

cmd_start() {
	need_root
	local n=${1:-}
	shift || true
	local ib=${LAB_IB:-1} arg
	for arg in "$@"; do
		case "$arg" in
		--ib=0 | --ib=1) ib=${arg#--ib=} ;;
		*) die "start: unknown option $arg" ;;
		esac
	done
	case "$n" in 1 | 2) ;; *) die "usage: lab.sh start 1|2 [--ib=0|1]" ;; esac
	[ "$(running_guests)" = 0 ] || die "the lab is already running (lab.sh stop first)"
	[ -f "$CACHE/lab.env" ] || die "lab not set up (run lab.sh setup)"
	# shellcheck disable=SC1091
	. "$CACHE/lab.env"
	[ -s "$VMLINUX" ] && [ -s "$INITRD" ] || die "lab files missing (run lab.sh setup)"
	qemu_env
	accel_args
	check_smp
	netns_up
	local t0 g
	t0=$(now_ms)
	for g in $(seq 1 "$n"); do launch_guest "$g" "$ib"; done
	cat >"$RUN/state" <<EOF
GUESTS=$n
IB=$ib
ACCEL=$ACCEL_USED
SMP=$GUEST_SMP
KVER=$KVER
EOF
	# wait for LAB:READY on every console
	local deadline=$(($(now_ms) + BOOT_TIMEOUT * 1000)) ready
	while :; do
		ready=0
		for g in $(seq 1 "$n"); do
			if grep -q '^LAB:FAIL' "$RUN/g$g/console.log" 2>/dev/null; then
				console_tail "$g"
				cmd_stop >/dev/null 2>&1 || true
				die "guest g$g failed during boot: $(grep -m1 '^LAB:FAIL' "$RUN/g$g/console.log")"
			fi
			if grep -q '^LAB:READY' "$RUN/g$g/console.log" 2>/dev/null; then
				ready=$((ready + 1))
			elif ! qemu_pid_of "$g" >/dev/null; then
				console_tail "$g"
				cmd_stop >/dev/null 2>&1 || true
				die "qemu of guest g$g exited before READY"
			fi
		done
		[ "$ready" = "$n" ] && break
		if [ "$(now_ms)" -gt "$deadline" ]; then
			for g in $(seq 1 "$n"); do console_tail "$g"; done
			cmd_stop >/dev/null 2>&1 || true
			die "guests not READY within ${BOOT_TIMEOUT}s"
		fi
		sleep 0.05
	done
	log "$n guest(s) READY in $(($(now_ms) - t0)) ms (accel $ACCEL_USED, $GUEST_SMP vCPU each, kernel $KVER, rds_rdma=$ib)"
	for g in $(seq 1 "$n"); do grep -m1 '^LAB:READY' "$RUN/g$g/console.log" >&2; done
}

cmd_stop() {
	need_root
	local g pid i
	for g in 1 2; do
		if pid=$(qemu_pid_of "$g"); then
			kill "$pid" 2>/dev/null || true
			for i in $(seq 1 50); do
				[ -d "/proc/$pid" ] || break
				sleep 0.1
			done
			[ -d "/proc/$pid" ] && kill -9 "$pid" 2>/dev/null
			log "stopped g$g (pid $pid)"
		elif [ -f "$RUN/g$g/qemu.pid" ]; then
			log "g$g: pidfile is stale or not ours; not killing anything"
		fi
		rm -f "$RUN/g$g/qemu.pid"
	done
	if [ -f "$RUN/netns.created" ]; then
		if ns_exists; then
			ip netns del "$NS" || die "ip netns del $NS failed"
			log "deleted netns $NS"
		fi
		rm -f "$RUN/netns.created"
	elif ns_exists; then
		log "netns $NS was not created by the lab; leaving it"
	fi
	rm -f "$RUN/state"
}

cmd_status() {
	local g pid
	if [ -f "$CACHE/lab.env" ]; then
		echo "setup: done ($(grep ^KVER= "$CACHE/lab.env"))"
	else
		echo "setup: not done"
	fi
	if ns_exists; then
		echo "netns: $NS present$([ -f "$RUN/netns.created" ] && echo " (created by the lab)")"
	else
		echo "netns: absent"
	fi
	[ -f "$RUN/state" ] && sed 's/^/state: /' "$RUN/state"
	for g in 1 2; do
		if pid=$(qemu_pid_of "$g"); then
			echo "g$g: running pid $pid ip $(guest_ip "$g") $(grep -m1 '^LAB:READY' "$RUN/g$g/console.log" 2>/dev/null || echo 'not ready')"
		else
			echo "g$g: not running"
		fi
	done
}

# ---------------------------------------------------------------------------------------
# job spool (see README.md): jobs/ID.job -> ID.out, ID.err, ID.rc

new_job_id() { echo "h$(date +%s%N)-$$-$RANDOM"; }

# submit G TIMEOUT CMD -> prints the job id
job_submit() {
	local g=$1 t=$2 cmd=$3
	qemu_pid_of "$g" >/dev/null || die "guest g$g is not running"
	local dir="$RUN/g$g/share/jobs" id
	id=$(new_job_id)
	printf '#lab-timeout=%s\n%s\n' "$t" "$cmd" >"$dir/$id.job.tmp"
	mv "$dir/$id.job.tmp" "$dir/$id.job"
	echo "$id"
}

# wait G ID TIMEOUT: prints stdout, stderr to stderr, returns the job's status
job_wait() {
	local g=$1 id=$2 t=$3
	local dir="$RUN/g$g/share/jobs"
	local deadline=$(($(now_ms) + (t + 15) * 1000)) i=0
	while [ ! -f "$dir/$id.rc" ]; do
		if [ "$(now_ms)" -gt "$deadline" ]; then
			: >"$dir/$id.kill"
			sleep 2
			cat "$dir/$id.out" 2>/dev/null || true
			cat "$dir/$id.err" >&2 2>/dev/null || true
			echo "lab: job $id in g$g did not finish within ${t}s (+15s)" >&2
			return 124
		fi
		i=$((i + 1))
		if [ $((i % 20)) = 0 ] && ! qemu_pid_of "$g" >/dev/null; then
			console_tail "$g"
			echo "lab: guest g$g died while running job $id" >&2
			return 125
		fi
		sleep 0.05
	done
	cat "$dir/$id.out" 2>/dev/null || true
	cat "$dir/$id.err" >&2 2>/dev/null || true
	local rc
	rc=$(cat "$dir/$id.rc")
	rm -f "$dir/$id".{job,run,out,err,rc,kill}
	return "$rc"
}

cmd_exec() {
	local t=$EXEC_TIMEOUT
	if [ "${1:-}" = "--timeout" ]; then
		t=$2
		shift 2
	fi
	[ $# = 2 ] || die "usage: lab.sh exec [--timeout SEC] G 'command'"
	local g=$1 id
	guest_ip "$g" >/dev/null
	id=$(job_submit "$g" "$t" "$2")
	local rc=0
	job_wait "$g" "$id" "$t" || rc=$?
	return $rc
}

cmd_ns() {
	[ $# -ge 1 ] || die "usage: lab.sh ns 'command'"
	need_root
	ns_exists || die "netns $NS does not exist (lab.sh start first)"
	ip netns exec "$NS" bash -c "$*"
}

# ---------------------------------------------------------------------------------------
# kernel-only checks

CHECK_PASS=0
CHECK_FAIL=0
CHECK_OUT=""

# run_job G TIMEOUT CMD: runs and stores combined output in CHECK_OUT; returns status
run_job() {
	local rc=0
	CHECK_OUT=$(cmd_exec --timeout "$2" "$1" "$3" 2>&1) || rc=$?
	return $rc
}

report() {
	# report NAME STATUS(0=pass) T0 DETAIL
	local name=$1 st=$2 t0=$3 detail=${4:-}
	local dt
	dt=$(awk -v a="$t0" -v b="$(now_ms)" 'BEGIN{printf "%.1f", (b-a)/1000}')
	if [ "$st" = 0 ]; then
		CHECK_PASS=$((CHECK_PASS + 1))
		printf 'check %-24s PASS  %6ss  %s\n' "$name" "$dt" "$detail"
	else
		CHECK_FAIL=$((CHECK_FAIL + 1))
		printf 'check %-24s FAIL  %6ss  %s\n' "$name" "$dt" "$detail"
		printf '%s\n' "$CHECK_OUT" | tail -n 25 | sed 's/^/    | /'
	fi
}

# a receiver job must have bound its socket before the sender starts
spawn_and_wait_line() {
	# spawn_and_wait_line G TIMEOUT PATTERN CMD -> sets SPAWNED_ID
	local g=$1 t=$2 pat=$3 cmd=$4
	SPAWNED_ID=$(job_submit "$g" "$t" "$cmd")
	local dir="$RUN/g$g/share/jobs" deadline=$(($(now_ms) + 30000))
	while ! grep -q "$pat" "$dir/$SPAWNED_ID.out" 2>/dev/null; do
		[ -f "$dir/$SPAWNED_ID.rc" ] && return 1
		[ "$(now_ms)" -gt "$deadline" ] && return 1
		sleep 0.05
	done
}

collect() {
	# collect G ID TIMEOUT -> CHECK_OUT, status
	local rc=0
	CHECK_OUT=$(job_wait "$1" "$2" "$3" 2>&1) || rc=$?
	return $rc
}

# transfer_once TRANSPORT PORT RECV_OPTS SEND_OPTS: one transfer, g1 receives on .2:PORT, g2
# sends; sets CHECK_OUT and TRANSFER_SUMMARY, returns 0 when both ends passed
transfer_once() {
	local tr=$1 port=$2 ropts=$3 sopts=$4 st=0 out1 out2
	TRANSFER_SUMMARY="receiver did not start"
	if ! spawn_and_wait_line 1 120 'recv: bound' "rdstool recv -b 198.18.0.2:$port -t $tr --timeout 100 $ropts"; then
		collect 1 "$SPAWNED_ID" 5 || true
		return 1
	fi
	run_job 2 110 "rdstool send -b 198.18.0.4:$((port + 1)) -d 198.18.0.2:$port -t $tr --timeout 100 $sopts" || st=1
	out2=$CHECK_OUT
	collect 1 "$SPAWNED_ID" 110 || st=1
	out1=$CHECK_OUT
	CHECK_OUT="$out2"$'\n'"$out1"
	TRANSFER_SUMMARY="$(echo "$out2" | grep -o 'sent=[0-9]* bytes=[0-9]*.*MBps=[0-9.]*' | head -n 1) $(echo "$out1" | grep -o 'recv: [a-zA-Z]* received=[0-9]*' | head -n 1)"
	return $st
}

# check_transfer NAME TRANSPORT PORT RECV_OPTS SEND_OPTS [retry]: one transfer_once, reported.
# "retry": a failure is shown with both kernels' congestion counters and the transfer is run
# once more on fresh ports; the check passes when that one does (kernel-only checks whose
# rare failures are the kernels' own, see README)
check_transfer() {
	local name=$1 tr=$2 port=$3 ropts=$4 sopts=$5 retry=${6:-} t0 st=0
	t0=$(now_ms)
	transfer_once "$tr" "$port" "$ropts" "$sopts" || st=1
	if [ "$st" = 1 ] && [ "$retry" = retry ]; then
		local first=$TRANSFER_SUMMARY out=$CHECK_OUT g
		for g in 1 2; do
			run_job "$g" 20 'rdstool info counters' || true
			out+=$'\n'"g$g counters: $(echo "$CHECK_OUT" | grep -i 'cong' | tr '\n' ' ')"
		done
		printf 'check %-24s first attempt failed (%s); retrying\n' "$name" "$first"
		printf '%s\n' "$out" | tail -n 25 | sed 's/^/    | /'
		st=0
		transfer_once "$tr" "$((port + 10))" "$ropts" "$sopts" || st=1
		TRANSFER_SUMMARY+=" (second attempt; the first failed: $first)"
	fi
	report "$name" "$st" "$t0" "$TRANSFER_SUMMARY"
}

digest_of() {
	# digest_of OUTPUT KIND S R -> "COUNT DIGEST"
	echo "$1" | awk -v k="$2" -v s="$3" -v r="$4" '$1==k && $2==s && $3==r {print $4, $5}' | head -n 1
}

check_selftest_peer() {
	# endpoint 0 in g1 (198.18.0.2:10000), endpoint 1 in g2 (198.18.0.4:20000); the
	# leader (g2, the larger address) resets RDS/TCP at every barrier
	local name=$1 total=$2 reset=$3 tr=$4 t0 st=0 id1 o1 o2
	t0=$(now_ms)
	local common="-n $total -t $tr --ep0 198.18.0.2:10000 --ep1 198.18.0.4:20000 --timeout 150"
	[ "$tr" = ib ] && common="-n $total -t ib --ep0 198.18.0.2:30000 --ep1 198.18.0.4:30000 --timeout 150"
	[ "$reset" -gt 0 ] && common+=" --reset-every $reset"
	id1=$(job_submit 1 180 "rdstool selftest-peer --me 0 $common")
	run_job 2 180 "rdstool selftest-peer --me 1 $common" || st=1
	o2=$CHECK_OUT
	collect 1 "$id1" 180 || st=1
	o1=$CHECK_OUT
	CHECK_OUT="$o1"$'\n'"$o2"
	# cross-check: what one endpoint sent is what the other received, per pair
	local a b pair
	for pair in "$o1|$o2|0 1" "$o2|$o1|1 0" "$o1|$o1|0 0" "$o2|$o2|1 1"; do
		local snd=${pair%%|*} rest=${pair#*|}
		local rcv=${rest%%|*} sr=${rest#*|}
		# shellcheck disable=SC2086
		a=$(digest_of "$snd" send $sr)
		# shellcheck disable=SC2086
		b=$(digest_of "$rcv" recv $sr)
		if [ -z "$a" ] || [ "$a" != "$b" ]; then
			st=1
			CHECK_OUT+=$'\n'"pair ${sr/ /->}: sent '$a' received '$b'"
		fi
	done
	local r
	r=$(echo "$o2" | grep -o 'resets=[0-9]*' | head -n 1)
	report "$name" "$st" "$t0" "$total msgs over $tr, g2 $r, per-pair digests $([ $st = 0 ] && echo match || echo MISMATCH)"
}

run_checks() {
	local n
	n=$(running_guests)
	[ "$n" -ge 1 ] || die "no guest is running (lab.sh start 1|2)"
	local ib=1
	[ -f "$RUN/state" ] && ib=$(sed -n 's/^IB=//p' "$RUN/state")
	local t0 st
	echo "kernel-only lab checks: $n guest(s), kernel $(sed -n 's/^KVER=//p' "$RUN/state" 2>/dev/null), rds_rdma=$ib"

	# --- one guest ---
	t0=$(now_ms)
	st=0
	run_job 1 30 'for m in rds rds_tcp rdma_rxe ib_uverbs rdma_ucm sch_netem crc32_generic; do grep -q "^$m " /proc/modules || { echo "module $m not loaded"; exit 1; }; done
test -d /proc/sys/net/rds/tcp || { echo "no /proc/sys/net/rds/tcp"; exit 1; }
if [ '"$ib"' = 1 ]; then grep -q "^rds_rdma " /proc/modules && test -d /proc/sys/net/rds/ib || { echo "rds_rdma not loaded"; exit 1; }
else ! grep -q "^rds_rdma " /proc/modules || { echo "rds_rdma loaded with lab.ib=0"; exit 1; }; fi
netstat -ltn | grep -q ":16385 " || { echo "no listener on 16385"; netstat -ltn; exit 1; }
uname -r' || st=1
	report g1-modules "$st" "$t0" "$(echo "$CHECK_OUT" | tail -n 1)"

	t0=$(now_ms)
	st=0
	run_job 1 30 'rdma link show; rdma link show | grep -q "rxe0/1 state ACTIVE" || exit 1
ibv_devices | grep -q rxe0 || exit 1
ibv_devinfo -d rxe0 | grep -q PORT_ACTIVE || exit 1
test -e /sys/class/infiniband/rxe0/ports/1/gids/1 && cat /sys/class/infiniband/rxe0/ports/1/gids/1' || st=1
	report g1-rxe0 "$st" "$t0" "$(echo "$CHECK_OUT" | tail -n 1)"

	t0=$(now_ms)
	st=0
	run_job 1 90 'rdstool recv -b 198.18.0.2:4000 -t tcp -n 24 --extra-ms 300 --timeout 60 > /tmp/r.out 2>&1 &
i=0; while ! grep -q "recv: bound" /tmp/r.out; do i=$((i+1)); [ $i -gt 500 ] && { cat /tmp/r.out; exit 1; }; usleep 10000; done
rdstool send -b 198.18.0.2:4001 -d 198.18.0.2:4000 -t tcp -n 24 -s 0,1,15,16,17,100,8192,1m --timeout 60 || exit 1
wait $! || { cat /tmp/r.out; exit 1; }
cat /tmp/r.out
rdstool info conns | grep "^198.18.0.2 198.18.0.2 .* loopback " || { rdstool info conns; exit 1; }' || st=1
	report g1-tcp-loopback "$st" "$t0" "$(echo "$CHECK_OUT" | grep -o 'recv: ok received=[0-9]* bytes=[0-9]*')"

	t0=$(now_ms)
	st=0
	run_job 1 30 'rdstool bind 198.18.0.2:4100 -t tcp --expect ok | grep "transport=tcp(2)" || exit 1
rdstool bind 0.0.0.0:4101 -t tcp --expect EINVAL || exit 1
rdstool bind 198.18.0.9:4102 -t tcp --expect ENOPROTOOPT || exit 1
rdstool bind 198.18.0.9:4103 --expect EADDRNOTAVAIL || exit 1
rdstool bind 198.18.0.2:1 -t tcp --expect EINVAL || exit 1
rdstool info raw 10000 | grep -q "each=40" || exit 1
rdstool info raw 10001 | grep -q "each=42" || exit 1
rdstool info raw 10007 | grep -q "each=41" || exit 1
rdstool info counters > /tmp/c; for c in conn_reset recv_delivered send_queued tcp_data_ready_calls; do grep -q "^$c [0-9]*$" /tmp/c || { echo "counter $c missing"; exit 1; }; done
echo "$(wc -l < /tmp/c) counters"' || st=1
	report g1-socket-api-info "$st" "$t0" "$(echo "$CHECK_OUT" | tail -n 1)"

	if [ "$ib" = 1 ]; then
		t0=$(now_ms)
		st=0
		run_job 1 120 'rdstool bind 198.18.0.2:4200 -t ib --expect ok | grep "transport=ib(0)" || exit 1
rdstool bind 198.18.0.2:4201 --expect ok | grep "transport=ib(0)" || { echo "default transport is not IB with rds_rdma loaded"; exit 1; }
rdstool recv -b 198.18.0.2:4300 -t ib -n 12 --extra-ms 300 --timeout 90 > /tmp/r.out 2>&1 &
i=0; while ! grep -q "recv: bound" /tmp/r.out; do i=$((i+1)); [ $i -gt 500 ] && { cat /tmp/r.out; exit 1; }; usleep 10000; done
rdstool send -b 198.18.0.2:4301 -d 198.18.0.2:4300 -t ib -n 12 -s 0,1,100,4096,4097,60000 --timeout 90 || exit 1
wait $! || { cat /tmp/r.out; exit 1; }
cat /tmp/r.out
rdstool info conns | grep "^198.18.0.2 198.18.0.2 .* infiniband " || { rdstool info conns; exit 1; }' || st=1
		report g1-ib-bind-loop "$st" "$t0" "$(echo "$CHECK_OUT" | grep -o 'recv: ok received=[0-9]* bytes=[0-9]*')"
	else
		t0=$(now_ms)
		st=0
		run_job 1 30 'rdstool bind 198.18.0.2:4200 -t ib --expect ENOPROTOOPT || exit 1
! grep -q "^rds_rdma " /proc/modules || { echo "rds_rdma got loaded"; exit 1; }
ibv_devices | grep -q rxe0 || exit 1' || st=1
		report g1-ib-absent "$st" "$t0" "lab.ib=0: no rds_rdma (SO_RDS_TRANSPORT=IB refused), rxe0 present"
	fi

	if [ "$n" -lt 2 ]; then
		echo "note: two-guest checks need 'lab.sh start 2'; $((CHECK_PASS + CHECK_FAIL)) one-guest checks ran"
		return
	fi

	# --- host side (netns) ---
	t0=$(now_ms)
	st=0
	CHECK_OUT=$(ip netns exec "$NS" bash -c 'ip -br addr show br0; for a in 198.18.0.2 198.18.0.4; do timeout 5 bash -c "exec 3<>/dev/tcp/$a/16385" || { echo "cannot reach $a:16385"; exit 1; }; done' 2>&1) || st=1
	report netns-reach-16385 "$st" "$t0" "TCP connect from the netns to both guests' RDS listeners"

	# --- two guests ---
	t0=$(now_ms)
	st=0
	run_job 2 30 'rdstool ping -b 198.18.0.4 -d 198.18.0.2 -c 5 -i 50 -t tcp' || st=1
	report ping-tcp-g2-g1 "$st" "$t0" "$(echo "$CHECK_OUT" | grep -o 'received=[0-9]* .*avg_us=[0-9.]*')"

	check_transfer tcp-g2-g1 tcp 5000 "-n 40 --sources 1 --extra-ms 300" "-n 40 -s 0,1,16,100,4096,8192,65536,1m"
	t0=$(now_ms)
	st=0
	run_job 2 20 'rdstool wait-conn -l 198.18.0.4 -f 198.18.0.2 -t tcp --timeout 10 && rdstool info conns && rdstool info tcp' || st=1
	echo "$CHECK_OUT" | grep -q '^198.18.0.4 198.18.0.2 [0-9]* [0-9]* tcp 0x0[4-7]' || st=1
	echo "$CHECK_OUT" | grep -q '^198.18.0.4:16385 198.18.0.2:[0-9]' || st=1
	report info-conns-tcp "$st" "$t0" "$(echo "$CHECK_OUT" | grep '^198.18.0.4 198.18.0.2' | head -n 1)"

	check_transfer tcp-multisock-congest tcp 5100 "-n 400 --sources 4 --rcvbuf 65536 --pause-after 40 --pause-ms 1500" "-n 400 --sockets 4 --nonblock -s 256:16k" retry

	if [ "$ib" = 1 ]; then
		check_transfer ib-g2-g1 ib 5200 "-n 30 --sources 1 --extra-ms 300" "-n 30 -s 0,1,100,4096,4097,60000,1m"
		run_job 2 20 'rdstool info conns' || true
		t0=$(now_ms)
		st=0
		echo "$CHECK_OUT" | grep -q '^198.18.0.4 198.18.0.2 [0-9]* [0-9]* infiniband 0x0[4-7]' || st=1
		report info-conns-ib "$st" "$t0" "$(echo "$CHECK_OUT" | grep '^198.18.0.4 198.18.0.2 .*infiniband' | head -n 1)"
	fi

	# request/response against echo
	t0=$(now_ms)
	st=0
	if spawn_and_wait_line 1 60 'echo: bound' 'rdstool echo -b 198.18.0.2:5300 -n 100 -t tcp --timeout 50'; then
		local eid=$SPAWNED_ID o2
		run_job 2 60 'rdstool rr -b 198.18.0.4:5301 -d 198.18.0.2:5300 -n 100 -s 64,8k -t tcp --timeout 50' || st=1
		o2=$CHECK_OUT
		collect 1 "$eid" 60 || st=1
		CHECK_OUT="$o2"$'\n'"$CHECK_OUT"
	else
		st=1
	fi
	report echo-rr-tcp "$st" "$t0" "$(echo "$CHECK_OUT" | grep -o 'ok=[0-9]* avg_us=[0-9.]*' | head -n 1)"

	# the kernel selftest traffic, kernel <-> kernel across the guests, with resets
	check_selftest_peer selftest-peer-tcp 2000 100 tcp
	[ "$ib" = 1 ] && check_selftest_peer selftest-peer-ib 2000 0 ib

	# netem on both guests' eth0, then traffic must still arrive intact
	t0=$(now_ms)
	st=0
	for g in 1 2; do
		run_job "$g" 20 'tc -V | grep -q iproute2 || { echo "tc is not iproute2 tc"; exit 1; }; tc qdisc add dev eth0 root netem loss 1% corrupt 1% duplicate 1% && tc qdisc show dev eth0 | grep -q "netem.*loss 1%.*corrupt 1%" && tc qdisc show dev eth0' || st=1
	done
	report netem-qdisc "$st" "$t0" "$(echo "$CHECK_OUT" | head -n 1)"
	check_transfer tcp-under-netem tcp 5400 "-n 200 --sources 1 --extra-ms 300" "-n 200 -s 1:20000"
	check_selftest_peer selftest-peer-netem 1000 200 tcp
	for g in 1 2; do run_job "$g" 20 'tc qdisc del dev eth0 root' || true; done
	run_job 1 20 'echo "conn_reset=$(rdstool info counter conn_reset) recv_drop_old_seq=$(rdstool info counter recv_drop_old_seq) recv_drop_bad_checksum=$(rdstool info counter recv_drop_bad_checksum)"' || true
	echo "g1 counters: $CHECK_OUT"
}

checks_summary() {
	local total=$((CHECK_PASS + CHECK_FAIL))
	if [ "$CHECK_FAIL" = 0 ] && [ "$total" -gt 0 ]; then
		echo "lab checks: $CHECK_PASS passed, 0 failed"
		echo "PASS"
		return 0
	fi
	echo "lab checks: $CHECK_PASS passed, $CHECK_FAIL failed"
	echo "FAIL"
	return 1
}

cmd_check() {
	need_root
	run_checks
	checks_summary
}

cmd_selftest() {
	need_root
	local t0 ts tb tc
	# the same machine-wide lock as the Rust Lab (namespace, bridge and taps are global)
	mkdir -p "$(dirname "$LAB_LOCK")"
	exec 7>"$LAB_LOCK"
	flock -w 900 7 || die "another lab holds $LAB_LOCK"
	t0=$(now_ms)
	cmd_setup
	ts=$(now_ms)
	[ "$(running_guests)" = 0 ] || die "the lab is running; 'lab.sh stop' first (or 'lab.sh check' to test it)"
	trap 'cmd_stop >/dev/null 2>&1 || true' EXIT
	cmd_start 2
	tb=$(now_ms)
	local rc=0
	run_checks
	tc=$(now_ms)
	cmd_stop >/dev/null 2>&1 || true
	trap - EXIT
	echo "timing: setup $((ts - t0))ms, boot $((tb - ts))ms, checks $((tc - tb))ms, total $(($(now_ms) - t0))ms"
	checks_summary || rc=$?
	return $rc
}

# ---------------------------------------------------------------------------------------

cmd_spawn() {
	local t=$EXEC_TIMEOUT
	if [ "${1:-}" = "--timeout" ]; then
		t=$2
		shift 2
	fi
	[ $# = 2 ] || die "usage: lab.sh spawn [--timeout SEC] G 'command'   (prints the job id)"
	guest_ip "$1" >/dev/null
	job_submit "$1" "$t" "$2"
}

cmd_wait() {
	local t=$EXEC_TIMEOUT
	if [ "${1:-}" = "--timeout" ]; then
		t=$2
		shift 2
	fi
	[ $# = 2 ] || die "usage: lab.sh wait [--timeout SEC] G ID"
	local rc=0
	job_wait "$1" "$2" "$t" || rc=$?
	return $rc
}

cmd_kill() {
	[ $# = 2 ] || die "usage: lab.sh kill G ID"
	: >"$RUN/g$1/share/jobs/$2.kill"
}

usage() {
	cat <<'EOF'
usage: lab.sh COMMAND
  setup                 download, extract and build (idempotent, cached in tests/lab/cache)
  start 1|2 [--ib=0|1]  boot guests g1 (198.18.0.2) [and g2 (198.18.0.4)] in agent mode;
                        --ib=0 leaves the kernel's rds_rdma unloaded (LAB_IB=0 likewise)
  exec [--timeout S] G 'cmd'    run a shell command in guest G, print output, exit with its status
  spawn [--timeout S] G 'cmd'   start a background job in guest G; prints its id
  wait [--timeout S] G ID       wait for a spawned job; prints output, exits with its status
  kill G ID                     kill a spawned job
  ns 'cmd'              run a host command inside the rdslab netns
  shell [G]             boot guest G (default 1) with an interactive console (Ctrl-a x quits)
  check                 kernel-only checks against the running lab
  selftest              setup + start 2 + check + stop
  status                show what is running
  stop                  stop our qemu processes; delete the netns if the lab created it
environment: ACCEL=auto|tcg|kvm  KPKG=linux-image-6.1.0-NN-amd64  LAB_CACHE  LAB_RUN
             LAB_MEM (MB, 768)  LAB_SMP (vCPUs per guest, 1..8, 1)  LAB_BOOT_TIMEOUT (s, 120)
             LAB_EXEC_TIMEOUT (s, 120)  LAB_IB
EOF
}

main() {
	local c=${1:-help}
	shift || true
	case "$c" in
	setup) cmd_setup "$@" ;;
	start) cmd_start "$@" ;;
	stop) cmd_stop "$@" ;;
	exec) cmd_exec "$@" ;;
	spawn) cmd_spawn "$@" ;;
	wait) cmd_wait "$@" ;;
	kill) cmd_kill "$@" ;;
	ns) cmd_ns "$@" ;;
	shell) cmd_shell "$@" ;;
	check) cmd_check "$@" ;;
	selftest) cmd_selftest "$@" ;;
	status) cmd_status "$@" ;;
	help | -h | --help) usage ;;
	*)
		usage >&2
		exit 2
		;;
	esac
}

main "$@"
