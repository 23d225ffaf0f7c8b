//! Helpers shared by the workspace-level tests (network namespaces, the kernel interop lab,
//! fault-injecting proxies, tshark). Each submodule documents its own contract.

pub mod faultnet;
pub mod guestcpu;
pub mod hostdaemon;
pub mod ib;
pub mod interop;
pub mod lab;
pub mod labbench;
pub mod manpage;
pub mod peer;
pub mod proc;
pub mod prometheus;
pub mod raw;
pub mod stress;
pub mod users;
pub mod wireprof;

/// The project's dissector, `wireshark/rds.lua`.
pub fn lua_script() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../wireshark/rds.lua")
        .canonicalize()
        .expect("wireshark/rds.lua exists")
}

/// A tshark command (`exe`, see [`tshark`]) with a private HOME (no personal plugins or
/// preferences), name resolution off, and the project's dissector loaded from the source tree.
pub fn tshark_cmd(exe: &std::path::Path, home: &std::path::Path) -> std::process::Command {
    let mut c = std::process::Command::new(exe);
    c.env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("LC_ALL", "C.UTF-8")
        .arg("-n")
        .arg("-X")
        .arg(format!("lua_script:{}", lua_script().display()));
    c
}

/// tshark on `PATH`.
///
/// # Panics
/// tshark is missing; the message says how to install it (`.ci/deps.d/tshark.sh`, which
/// `scripts/test-all.sh` runs).
pub fn tshark() -> std::path::PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("tshark"))
        .find(|p| p.is_file())
        .expect(
            "tshark is not installed: run .ci/deps.d/tshark.sh as root (Debian: apt-get install \
             tshark)",
        )
}

/// A release binary of the workspace (`rds-ctrl`, `rds-ping`, ...), next to the running test's
/// executable (`target/<profile>/deps/..`).
///
/// # Panics
/// The binary is not built.
pub fn workspace_bin(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe
        .parent()
        .and_then(std::path::Path::parent)
        .expect("test executable in target/<profile>/deps");
    let b = dir.join(name);
    assert!(
        b.is_file(),
        "{} is missing: build the workspace first (cargo test --workspace --release)",
        b.display()
    );
    b
}

/// `tests/preload/NAME.c` built with `cc -O1 -Wall -Werror` into `out_dir`: statically for a
/// lab guest (which need not have the host's libc) or dynamically for `LD_PRELOAD` (which
/// needs the dynamic loader).
///
/// # Panics
/// `cc` is missing or fails.
pub fn build_c_program(
    name: &str,
    static_link: bool,
    out_dir: &std::path::Path,
) -> std::path::PathBuf {
    let kind = if static_link { "static" } else { "dynamic" };
    let out = out_dir.join(format!("{name}-{kind}-{}", std::process::id()));
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("preload")
        .join(format!("{name}.c"));
    let mut cc = std::process::Command::new("cc");
    if static_link {
        cc.arg("-static");
    }
    let st = cc
        .args(["-O1", "-Wall", "-Werror", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("cc is missing: install gcc and libc6-dev");
    assert!(st.success(), "cc ({kind}) failed on {}", src.display());
    out
}

/// Prints how a benchmark phase ended (`NAME: done|FAILED after S s`, counted from `since`)
/// and passes its result on, with the phase's name as context.
pub fn report_phase(
    name: &str,
    since: std::time::Instant,
    r: anyhow::Result<()>,
) -> anyhow::Result<()> {
    println!(
        "{name}: {} after {:.1} s",
        if r.is_ok() { "done" } else { "FAILED" },
        since.elapsed().as_secs_f64()
    );
    anyhow::Context::with_context(r, || name.to_string())
}

/// `librds_preload.so` of this build: the newer of `target/<profile>/` (`cargo build -p
/// rds-preload`) and `target/<profile>/deps/` (where `cargo test --workspace` builds it, for
/// the crate's doctests).
pub fn preload_library() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("target/<profile>/deps");
    let profile = deps.parent().expect("target/<profile>");
    let newest = [profile, deps]
        .iter()
        .map(|d| d.join("librds_preload.so"))
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max();
    match newest {
        Some((_, p)) => p,
        None => panic!(
            "librds_preload.so is missing under {}: build the workspace first (cargo test \
             --workspace --release, or cargo build --release -p rds-preload)",
            profile.display()
        ),
    }
}

/// The command that runs `rds-ctrl daemon tcp --addr ADDR` in the foreground with its runtime
/// directory at `dir/run` and its configuration at `dir/rds.conf` (under `ulimit -n NOFILE`
/// when given, through `sh`), its standard input closed; its output is the caller's to set.
pub fn daemon_command(
    dir: &std::path::Path,
    addr: &str,
    nofile: Option<u64>,
) -> std::process::Command {
    let ctrl = workspace_bin("rds-ctrl");
    let mut c = match nofile {
        Some(n) => {
            let mut c = std::process::Command::new("sh");
            c.arg("-c")
                .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                .arg(&ctrl);
            c
        }
        None => std::process::Command::new(&ctrl),
    };
    c.args(["daemon", "tcp", "--addr", addr])
        .env("RDS_RUNTIME_DIR", dir.join("run"))
        .env("RDS_CONFIG", dir.join("rds.conf"))
        .env_remove("RDS_NO_DAEMON")
        .stdin(std::process::Stdio::null());
    c
}

/// Points this process's sockets at the daemon whose runtime directory is `dir/run` (as
/// [`spawn_daemon`] starts it), over shared-memory rings. It sets the environment, so only
/// one test of a test binary may call it.
pub fn use_daemon_rings(dir: &std::path::Path) {
    std::env::set_var("RDS_RUNTIME_DIR", dir.join("run"));
    std::env::remove_var("RDS_NO_DAEMON");
    std::env::remove_var("RDS_NO_RING");
}

/// Asserts that `s` has nothing to receive: a receive that does not wait says `EAGAIN`.
pub fn assert_nothing_to_receive(s: &rds_core::Socket) {
    let none = s.recv_msg(
        &mut [0u8; 64],
        rds_core::RecvFlags {
            dontwait: true,
            ..rds_core::RecvFlags::default()
        },
    );
    assert_eq!(none.unwrap_err().raw_os_error(), Some(libc::EAGAIN));
}

/// One of the RDS counters of the daemon whose control socket is `sock`.
pub fn daemon_counter(sock: &std::path::Path, name: &str) -> u64 {
    let mut c = rds_core::ctl::client::CtlClient::connect(sock).unwrap();
    match c.call(&rds_core::ctl::Request::Stats, &[]).unwrap().0 {
        rds_core::ctl::Reply::Stats { counters } => counters
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("no counter {name}")),
        other => panic!("unexpected reply {other:?}"),
    }
}

/// A daemon child (`daemon_command`) on `addrs`, its output discarded; waits (20 s at most)
/// until its control socket `dir/run/daemon.sock` answers, and returns it with that path.
pub fn spawn_daemon(
    dir: &std::path::Path,
    addrs: &[&str],
) -> (proc::KillOnDrop, std::path::PathBuf) {
    let mut c = daemon_command(dir, addrs[0], None);
    for a in &addrs[1..] {
        c.args(["--addr", a]);
    }
    let child = proc::KillOnDrop(
        c.stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("starting rds-ctrl daemon"),
    );
    let sock = dir.join("run").join("daemon.sock");
    let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while rds_core::ctl::client::CtlClient::connect(&sock).is_err() {
        assert!(std::time::Instant::now() < end, "the daemon did not start");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    (child, sock)
}
