# What the lab benchmark scripts (bench-lab-app-path.sh, bench-lab-smp.sh) check before they
# build or boot anything; sourced, not run. lab_bench_checks NAME: root, RDS_TOOLS_GIT set and
# exported, BENCH_SECS whole seconds, and the original C rds-stress built from RDS_TOOLS_GIT
# (a wrong clone fails here first). NAME starts each error message; every failure exits 2,
# except the C build's, which exits with its status.
lab_bench_checks() {
	local name=$1
	if [ "$(id -u)" != 0 ]; then
		echo "$name: needs root (the lab uses network namespaces, taps and qemu)" >&2
		exit 2
	fi
	if [ -z "${RDS_TOOLS_GIT:-}" ]; then
		echo "$name: RDS_TOOLS_GIT is not set: it names a git clone of" \
			"oracle/rds-tools, from which tests/lab/build-c-rds-stress.sh builds the original C" \
			"rds-stress (git clone --bare https://github.com/oracle/rds-tools rds-tools.git;" \
			"RDS_TOOLS_GIT=\$PWD/rds-tools.git scripts/$name)" >&2
		exit 2
	fi
	export RDS_TOOLS_GIT
	case ${BENCH_SECS:-5} in '' | *[!0-9]*) echo "$name: BENCH_SECS wants whole seconds, got '$BENCH_SECS'" >&2; exit 2 ;; esac
	tests/lab/build-c-rds-stress.sh 2.0.7 >/dev/null
}
