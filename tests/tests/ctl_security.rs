//! The control socket against another local user (issue 17): a root-owned node with a
//! named control socket in a private runtime directory serves a socket with a message queued;
//! a child process running as uid 65534 (python3 speaking the framing) tries to read, send
//! from, close, attach and enumerate it, binds a privileged port, holds 500 idle control
//! connections and stalls a half-sent request. Also: a runtime directory squatted by another
//! uid, or writable by others, is refused with a clear error, including a squatted
//! `/tmp/rds-65534` for uid 65534 without `XDG_RUNTIME_DIR` (a copy of this test executable
//! run as that uid, with a private `/tmp` of the test's own, so the host's `/tmp` is never
//! touched).
//!
//! Needs root (fails otherwise). What uid 65534 runs is copied out of the workspace first
//! (`rds_tests::users`): the clone may sit below a directory only root can enter.
//!
//! Loopback addresses 127.31.7.0/24. The tests share the process's `RDS_RUNTIME_DIR` and
//! count the process's threads, so they run one at a time (`SERIAL`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rds_core::ctl::client::CtlClient;
use rds_core::ctl::{Reply, Request};
use rds_core::node::admin::{CONNS_PER_UID, WORKERS};
use rds_core::{CtlMode, Node, NodeConfig};
use rds_tests::users::{command_as, require_root, Reachable, NOBODY};

static SERIAL: Mutex<()> = Mutex::new(());

fn python() -> &'static str {
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

/// The framing and helpers, for the child scripts.
const PY_LIB: &str = r#"
import json, os, socket, struct, sys, time
PATH = os.environ["CTL_PATH"]
def conn():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(PATH)
    return s
def read_exact(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise EOFError()
        b += c
    return b
def call(s, req, data=b""):
    j = json.dumps(req).encode()
    s.sendall(struct.pack(">II", len(j), len(data)) + j + data)
    jl, dl = struct.unpack(">II", read_exact(s, 8))
    rep = json.loads(read_exact(s, jl))
    d = read_exact(s, dl)
    return rep, d
def hello(s):
    return call(s, {"op": "hello", "v": 4})[0]
"#;

/// Runs `script` (after [`PY_LIB`]) as uid 65534 and returns its stdout, checking its status.
fn run_as_nobody(ctl: &Path, script: &str) -> String {
    let out = command_as(NOBODY, python())
        .arg("-c")
        .arg(format!("{PY_LIB}\n{script}"))
        .env("CTL_PATH", ctl)
        .stdin(Stdio::null())
        .output()
        .expect("running python3 as uid 65534");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "child failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A root-owned node on `ip` serving `name.sock` in a fresh runtime directory that other
/// users may enter.
fn node(dir: &Path, ip: &str, name: &str) -> Node {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::env::set_var("RDS_RUNTIME_DIR", dir);
    let mut cfg = NodeConfig::new([ip.parse().unwrap()]);
    cfg.client_sockets = Some(rds_core::socket::host::service());
    cfg.ctl = CtlMode::Named(name.into());
    Node::start(cfg).unwrap()
}

fn open_bound(c: &mut CtlClient, addr: &str) -> u64 {
    let tok = match c.call(&Request::SockOpen, &[]).unwrap().0 {
        Reply::Sock { sock } => sock,
        r => panic!("{r:?}"),
    };
    c.call(
        &Request::SockBind {
            sock: tok,
            addr: addr.parse().unwrap(),
            transport: None,
        },
        &[],
    )
    .unwrap();
    tok
}

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

#[test]
fn another_uid_cannot_touch_or_see_roots_socket() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    require_root("a child runs as uid 65534");
    let dir = tempfile::tempdir().unwrap();
    let n = node(dir.path(), "127.31.7.1", "daemon");
    let path = n.ctl_path().unwrap();
    // Root's socket on :7000 with a message queued from a local socket of the node.
    let mut root = CtlClient::connect(&path).unwrap();
    let tok = open_bound(&mut root, "127.31.7.1:7000");
    let local = rds_core::Socket::with_node(&n);
    local.bind("127.31.7.1:7001".parse().unwrap()).unwrap();
    local
        .send_to(b"secret", "127.31.7.1:7000".parse().unwrap())
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while n.recv_queue().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = run_as_nobody(
        &path,
        r#"
s = conn()
hello(s)
res = {"answers": set(), "errnos": set(), "other": []}
for tok in range(0, 200):
    for req in ({"op": "sock_state", "sock": tok},
                {"op": "sock_recv", "sock": tok, "max": 100, "peek": False, "dontwait": True,
                 "timeout_ms": None},
                {"op": "sock_send", "sock": tok, "dest": "127.31.7.1:7001", "dontwait": True,
                 "timeout_ms": None},
                {"op": "sock_cap", "sock": tok},
                {"op": "sock_close", "sock": tok}):
        rep, d = call(s, req)
        if rep.get("kind") != "error" or d:
            res["other"].append([req, rep])
        else:
            res["errnos"].add(rep["errno"])
            res["answers"].add(rep["message"].replace(str(tok), "N"))
for i in range(200):
    cap = os.urandom(16).hex() if i else "0" * 32
    rep, _ = call(s, {"op": "sock_attach", "cap": cap})
    if rep.get("kind") != "error":
        res["other"].append(["attach", rep])
    else:
        res["errnos"].add(rep["errno"])
# A fresh connection sees the same.
s2 = conn()
hello(s2)
rep, _ = call(s2, {"op": "sock_recv", "sock": 1, "max": 100, "peek": False, "dontwait": True,
                   "timeout_ms": None})
res["errnos"].add(rep.get("errno"))
info, _ = call(s2, {"op": "info"})
snap = info
print(json.dumps({"answers": sorted(res["answers"]), "errnos": sorted(res["errnos"]),
                  "other": res["other"], "sockets": len(snap["sockets"]),
                  "recv": len(snap["recv"]), "counters": len(snap["counters"]),
                  "connections": len(snap["connections"])}))
# Binding port 80 is refused; port 7002 is fine.
rep, _ = call(s2, {"op": "sock_open"})
t = rep["sock"]
rep80, _ = call(s2, {"op": "sock_bind", "sock": t, "addr": "127.31.7.1:80", "transport": None})
rep7002, _ = call(s2, {"op": "sock_bind", "sock": t, "addr": "127.31.7.1:7002",
                       "transport": None})
info, _ = call(s2, {"op": "info"})
print(json.dumps({"bind80": rep80, "bind7002": rep7002.get("kind"),
                  "own_sockets": [x["bound"] for x in info["sockets"]]}))
"#,
    );
    let mut lines = out.lines();
    let v: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    println!("uid 65534 probing: {v}");
    assert_eq!(v["other"], serde_json::json!([]), "{v}");
    assert_eq!(v["errnos"], serde_json::json!([libc::EBADF]), "{v}");
    // One answer for every token: existence does not leak.
    assert_eq!(
        v["answers"],
        serde_json::json!(["no client socket N"]),
        "{v}"
    );
    assert_eq!(v["sockets"], 0, "{v}");
    assert_eq!(v["recv"], 0, "{v}");
    assert!(v["counters"].as_u64().unwrap() > 10, "{v}");
    let v: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    println!("uid 65534 binding: {v}");
    assert_eq!(v["bind80"]["kind"], "error", "{v}");
    assert_eq!(v["bind80"]["errno"], libc::EACCES, "{v}");
    assert!(
        v["bind80"]["message"]
            .as_str()
            .unwrap()
            .contains("CAP_NET_BIND_SERVICE"),
        "{v}"
    );
    assert_eq!(v["bind7002"], "sock_state", "{v}");
    assert_eq!(
        v["own_sockets"],
        serde_json::json!(["127.31.7.1:7002"]),
        "{v}"
    );
    // Root sees every socket; root's socket still works: the queued message, then a round trip.
    let snap = root.info().unwrap();
    let ports: Vec<u16> = snap
        .sockets
        .iter()
        .filter_map(|s| s.bound.map(|b| b.port()))
        .collect();
    assert!(ports.contains(&7000) && ports.contains(&7001), "{ports:?}");
    assert_eq!(snap.recv.len(), 1);
    let (r, data) = root
        .call(
            &Request::SockRecv {
                sock: tok,
                max: 100,
                peek: false,
                dontwait: false,
                timeout_ms: Some(5000),
            },
            &[],
        )
        .unwrap();
    assert_eq!(data, b"secret");
    assert!(matches!(r, Reply::Recv { from: Some(f), .. } if f.port() == 7001));
    root.call(
        &Request::SockSend {
            sock: tok,
            dest: Some("127.31.7.1:7001".parse().unwrap()),
            dontwait: false,
            timeout_ms: Some(5000),
        },
        b"back",
    )
    .unwrap();
    let mut buf = [0u8; 16];
    local.set_read_timeout(Some(Duration::from_secs(5)));
    let got = local.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..got.0], b"back");
    // Root binds port 80.
    let t80 = open_bound(&mut root, "127.31.7.1:80");
    assert!(t80 > tok);
    drop(root);
    n.shutdown();
}

#[test]
fn idle_connections_and_a_slowloris_stay_bounded() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    require_root("a child runs as uid 65534");
    let dir = tempfile::tempdir().unwrap();
    let n = node(dir.path(), "127.31.7.2", "daemon");
    let path = n.ctl_path().unwrap();
    // Warm up: one request so that a worker exists.
    let mut root = CtlClient::connect(&path).unwrap();
    root.info().unwrap();
    let before = threads();
    let mut child = command_as(NOBODY, python())
        .arg("-c")
        .arg(format!(
            "{PY_LIB}\n{}",
            r#"
conns, refused, other = [], 0, 0
for i in range(500):
    try:
        conns.append(conn())
    except OSError as e:
        refused += 1
# Which ones the node refused: those get an error reply and end.
time.sleep(1.0)
alive = []
for s in conns:
    s.setblocking(False)
    try:
        b = s.recv(65536)
        if b:
            jl, dl = struct.unpack(">II", b[:8])
            rep = json.loads(b[8:8 + jl])
            assert rep["errno"] == 11 and "per uid" in rep["message"], rep
            refused += 1
        else:
            other += 1
    except BlockingIOError:
        alive.append(s)
print(json.dumps({"alive": len(alive), "refused": refused, "other": other}), flush=True)
sys.stdin.readline()
"#
        ))
        .env("CTL_PATH", &path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    {
        use std::io::BufRead;
        let mut r = std::io::BufReader::new(child.stdout.as_mut().unwrap());
        r.read_line(&mut line).unwrap();
    }
    let v: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
    let during = threads();
    println!(
        "500 idle control connections from uid 65534: {v}; threads of the node's process \
         before {before}, with them {during}"
    );
    assert_eq!(v["alive"], CONNS_PER_UID as u64, "{v}");
    assert_eq!(v["refused"], 500 - CONNS_PER_UID as u64, "{v}");
    assert!(during <= before + WORKERS, "{before} -> {during}");
    // A legitimate request is still answered, and a socket still opens.
    let t0 = Instant::now();
    assert_eq!(root.info().unwrap().transports, vec!["tcp".to_string()]);
    let mut again = CtlClient::connect(&path).unwrap();
    open_bound(&mut again, "127.31.7.2:7100");
    println!("a root request with them: answered in {:?}", t0.elapsed());
    let _ = child.stdin.take();
    let _ = child.wait();
    // A slowloris: part of a header, then nothing.
    let out = run_as_nobody(
        &path,
        r#"
s = None
# The 128 idle connections of the other child may still be closing: retry.
for i in range(100):
    s = conn()
    s.sendall(b"\x00\x00")
    s.settimeout(0.05)
    try:
        b = s.recv(65536)
        if b:
            s.close()
            time.sleep(0.05)
            continue
    except socket.timeout:
        pass
    break
t0 = time.monotonic()
s.settimeout(30)
b = s.recv(65536)
rest = s.recv(65536)
print(json.dumps({"secs": time.monotonic() - t0, "reply": json.loads(b[8:].decode()),
                  "eof": rest == b""}))
"#,
    );
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    println!("slowloris: disconnected after {:.2} s: {v}", v["secs"]);
    assert_eq!(v["reply"]["errno"], libc::ETIMEDOUT, "{v}");
    assert_eq!(v["eof"], true, "{v}");
    assert!(v["secs"].as_f64().unwrap() < 20.0, "{v}");
    drop(root);
    drop(again);
    n.shutdown();
}

fn start_err(dir: &Path, name: &str) -> String {
    std::env::set_var("RDS_RUNTIME_DIR", dir);
    let mut cfg = NodeConfig::new(["127.31.7.3".parse().unwrap()]);
    cfg.ctl = CtlMode::Named(name.into());
    match Node::start(cfg) {
        Ok(_) => panic!("a node started in {}", dir.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn squatted_runtime_directories_are_refused() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    require_root("it gives a directory to uid 65534");
    let top = tempfile::tempdir().unwrap();
    // Made by another uid.
    let squat: PathBuf = top.path().join("squat");
    std::fs::create_dir(&squat).unwrap();
    std::os::unix::fs::chown(&squat, Some(NOBODY), Some(NOBODY)).unwrap();
    std::fs::set_permissions(&squat, std::fs::Permissions::from_mode(0o700)).unwrap();
    let e = start_err(&squat, "sq1");
    println!("{e}");
    assert!(
        e.contains(&format!(
            "refusing the RDS runtime directory {}",
            squat.display()
        )) && e.contains("belongs to uid 65534")
            && e.contains("RDS_RUNTIME_DIR"),
        "{e}"
    );
    assert!(!squat.join("sq1.sock").exists());
    // Writable by everyone.
    let open = top.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = start_err(&open, "sq2");
    println!("{e}");
    assert!(
        e.contains("writable by group or others (mode 777)") && e.contains("chmod go-w"),
        "{e}"
    );
    // A symbolic link to a good directory.
    let good = top.path().join("good");
    std::fs::create_dir(&good).unwrap();
    let link = top.path().join("link");
    std::os::unix::fs::symlink(&good, &link).unwrap();
    let e = start_err(&link, "sq3");
    assert!(e.contains("symbolic link"), "{e}");
    // Clients do not look there either.
    std::env::set_var("RDS_RUNTIME_DIR", &squat);
    assert!(rds_core::ctl::search_dirs().is_empty());
    // A missing one is created 0755 by root.
    let fresh = top.path().join("fresh");
    std::env::set_var("RDS_RUNTIME_DIR", &fresh);
    assert_eq!(rds_core::ctl::ensure_runtime_dir().unwrap(), fresh);
    let mode = std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o755);
}

/// A node whose process died leaves its socket file; the next node of that name removes it
/// (nobody holds the lock), while a live node's socket is never taken over.
#[test]
fn stale_socket_files_are_replaced_live_ones_kept() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let n = node(dir.path(), "127.31.7.4", "stale");
    let path = n.ctl_path().unwrap();
    // A live node of the same name: refused, its socket untouched.
    let mut cfg = NodeConfig::new(["127.31.7.5".parse().unwrap()]);
    cfg.ctl = CtlMode::Named("stale".into());
    let e = Node::start(cfg).unwrap_err().to_string();
    assert!(e.contains("already serves"), "{e}");
    assert!(CtlClient::connect(&path).is_ok());
    n.shutdown();
    // A dead node's leftover: a socket file nobody serves (bound, then the listener gone).
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let n2 = node(dir.path(), "127.31.7.4", "stale");
    let mut c = CtlClient::connect(&path).unwrap();
    assert_eq!(c.hello.node, "stale");
    c.info().unwrap();
    n2.shutdown();
    assert!(!path.exists());
    assert!(!rds_core::ctl::lock_path(&path).exists());
}

/// The child side of [`squatted_tmp_fallback_is_refused`], which runs a copy of this test
/// executable with `--ignored` as uid 65534 without `XDG_RUNTIME_DIR` or `RDS_RUNTIME_DIR`, so
/// its runtime directory is `/tmp/rds-65534`; does nothing elsewhere.
#[test]
#[ignore = "the child of squatted_tmp_fallback_is_refused"]
fn squat_child() {
    if std::env::var_os("CTL_SECURITY_CHILD").is_none() {
        return;
    }
    let dir = rds_core::ctl::runtime_dir();
    let listed = rds_core::ctl::search_dirs();
    let daemon = rds_core::ctl::find_daemon().map(|e| e.path);
    let mut cfg = NodeConfig::new(["127.31.7.6".parse().unwrap()]);
    cfg.ctl = CtlMode::Named("squat".into());
    let err = Node::start(cfg).err().map(|e| e.to_string());
    println!(
        "CHILD {}",
        serde_json::json!({
            "dir": dir,
            "listed": listed,
            "daemon": daemon,
            "err": err,
        })
    );
}

/// Without `XDG_RUNTIME_DIR` a user's runtime directory is `/tmp/rds-<uid>`: one made by
/// another uid (here root, mode 0777, with a fake daemon socket in it) is neither served in
/// nor searched.
///
/// The child (a copy of this executable, in a directory uid 65534 can reach) runs in a mount
/// namespace of its own (`unshare --mount`) where `/tmp` is a fresh directory of this test:
/// the squatted `/tmp/rds-65534` exists only there, so nothing is made or left in the host's
/// `/tmp`, and whatever the host's `/tmp/rds-65534` holds neither disturbs nor skips the test.
/// That private `/tmp` goes when the test ends, also when it fails.
#[test]
fn squatted_tmp_fallback_is_refused() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    require_root("a child runs as uid 65534 in a mount namespace");
    // The child's /tmp: the copy of this executable in bin/, and the squatted directory.
    let tmp = Reachable::new();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let bin = tmp.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = std::env::current_exe().unwrap();
    let copy = bin.join(exe.file_name().unwrap());
    std::fs::copy(&exe, &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    let squat = tmp.path().join(format!("rds-{NOBODY}"));
    std::fs::create_dir(&squat).unwrap();
    std::fs::set_permissions(&squat, std::fs::Permissions::from_mode(0o777)).unwrap();
    let fake = std::os::unix::net::UnixListener::bind(squat.join("daemon.sock")).unwrap();
    // In the namespace: /tmp becomes `tmp`, then uid 65534 runs /tmp/bin/<copy>.
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg(format!(
            "mount --bind \"$0\" /tmp && exec setpriv --reuid={NOBODY} --regid={NOBODY} \
             --clear-groups -- \"$@\""
        ))
        .arg(tmp.path())
        .arg(Path::new("/tmp/bin").join(exe.file_name().unwrap()))
        .args([
            "--ignored",
            "--exact",
            "squat_child",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env_clear()
        .env("CTL_SECURITY_CHILD", "1")
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .current_dir("/")
        .output()
        .expect("running unshare (util-linux)");
    drop(fake);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("CHILD ").map(|(_, r)| r))
        .unwrap_or_else(|| {
            panic!(
                "no child report ({}):\n{stdout}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    println!("uid 65534 with a squatted /tmp/rds-65534: {v}");
    assert!(out.status.success(), "{}: {stdout}", out.status);
    assert_eq!(v["dir"], "/tmp/rds-65534");
    assert!(
        !v["listed"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d == "/tmp/rds-65534"),
        "{v}"
    );
    assert_ne!(v["daemon"], "/tmp/rds-65534/daemon.sock", "{v}");
    let err = v["err"].as_str().unwrap();
    assert!(
        err.starts_with("refusing the RDS runtime directory /tmp/rds-65534: it belongs to uid 0"),
        "{err}"
    );
    // The squat was the test's own: still there, unchanged, and nothing new beside it.
    assert!(squat.join("daemon.sock").exists());
    let mut left: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["bin", "rds-65534"]);
}
