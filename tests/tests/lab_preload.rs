//! The preload library's errno transcript against the kernel's (issue 20): the C program
//! `tests/preload/rds_calls.c`, compiled statically, runs its `calls` mode in lab guest g1
//! against the kernel's RDS (`rds_tcp`, no `rds_rdma`, so a plain `bind` picks TCP as on a host
//! with our stack) and on the host over `librds_preload.so` (embedded node); the two
//! transcripts, with the addresses of A and B written `A:` and `B:`, must match line for line,
//! except the lines of [`ALLOWED`], each with its reason.
//!
//! Addresses. In the guest A is g1's own 198.18.0.2 and B a second address on `eth0`,
//! 198.18.0.6: the kernel binds a 127/8 address to its loopback transport
//! (`SO_RDS_TRANSPORT` 3, no TOS map: the TOS ioctls answer `ENOTTY`), which is not what a
//! program sees on a real address, while a real address binds RDS/TCP (the messages between
//! two local addresses still travel through the kernel's loopback connection, as every local
//! message does). On the host A and B are 127.21.9.1 and .2, which our stack serves with
//! RDS/TCP. The "nowhere" peer whose messages fill the send buffer is not local on either
//! side: 198.18.0.250 on the lab bridge (no host has it, RDS/TCP keeps trying to connect), and
//! 127.21.9.50 on the host (no node listens there).
//!
//! One boot of one guest (the run takes under a second). Needs root, `gcc` with a static
//! libc, and the release `librds_preload.so` (`cargo build --release -p rds-preload`); fails,
//! never skips, when the lab cannot boot.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rds_tests::lab::{Lab, LabOptions};

/// The host's A, B and nowhere.
const HOST: [&str; 3] = ["127.21.9.1", "127.21.9.2", "127.21.9.50"];
/// The guest's A, B (added to `eth0` by the test) and nowhere.
const GUEST: [&str; 3] = ["198.18.0.2", "198.18.0.6", "198.18.0.250"];

/// Transcript lines that differ on purpose: (the kernel's line, ours, why).
const ALLOWED: &[(&str, &str, &str)] = &[
    (
        "ioctl(FIONREAD): -1 ENOTTY",
        "ioctl(FIONREAD): ok 0",
        "the kernel's rds_ioctl has no FIONREAD; ours answers the next message's length, \
         what select/poll-driven programs written for other datagram sockets expect",
    ),
    (
        "ioctl(FIONREAD) value: -1",
        "ioctl(FIONREAD) value: 5",
        "the value FIONREAD wrote (the kernel wrote nothing, the program's -1 stays)",
    ),
    (
        "write(connected): -1 EOPNOTSUPP",
        "write(connected): ok 4",
        "the kernel's write/writev on a SOCK_SEQPACKET socket add MSG_EOR, which rds_sendmsg \
         refuses; issue 20 wants write to send to the connected peer, as send(fd, buf, n, 0)",
    ),
    (
        "writev(2 iovecs): -1 EOPNOTSUPP",
        "writev(2 iovecs): ok 7",
        "as write",
    ),
    (
        "writev(2 x 1 MiB): -1 EOPNOTSUPP",
        "writev(2 x 1 MiB): -1 EMSGSIZE",
        "as write: the kernel refuses MSG_EOR first (after the iovec import, whose EINVAL and \
         EFAULT both give), so it never reaches the size; ours sends and so answers the size, \
         what the kernel answers for the same iovecs through sendmsg (`sendmsg(2 x 1 MiB)`)",
    ),
];

/// `text` with `addr[0]:` written `A:` and `addr[1]:` written `B:`.
fn normalise(text: &str, addr: [&str; 3]) -> String {
    text.replace(&format!("{}:", addr[0]), "A:")
        .replace(&format!("{}:", addr[1]), "B:")
}

/// `rds_calls.c`, statically for the guest or dynamically for the host.
fn program(static_link: bool) -> PathBuf {
    rds_tests::build_c_program(
        "rds_calls",
        static_link,
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")),
    )
}

/// The transcript of `prog calls A B NOWHERE` (the [`HOST`] addresses) on the host over the
/// preload library, an embedded node in the process.
fn host_transcript(prog: &PathBuf) -> String {
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(prog)
        .arg("calls")
        .args(HOST)
        .env("LD_PRELOAD", rds_tests::preload_library())
        .env("RDS_RUNTIME_DIR", dir.path().join("run"))
        .env("RDS_NO_DAEMON", "1")
        .env_remove("RDS_PRELOAD_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rds_calls");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let o = match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(o) => o.expect("wait"),
        Err(_) => {
            // Past its deadline: kill the child by its pid (it is ours).
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            panic!("rds_calls on the host did not finish within 120 s");
        }
    };
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "rds_calls on the host: exit {}\n{out}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// The differences between the kernel's transcript and ours that [`ALLOWED`] does not
/// explain, plus the allow-list entries that no longer occur (a stale entry hides nothing).
fn unexplained(kernel: &str, ours: &str) -> Vec<String> {
    let k: Vec<&str> = kernel.lines().collect();
    let o: Vec<&str> = ours.lines().collect();
    let mut bad = Vec::new();
    let mut used = vec![false; ALLOWED.len()];
    if k.len() != o.len() {
        bad.push(format!(
            "line counts differ: kernel {}, ours {}",
            k.len(),
            o.len()
        ));
    }
    for (i, (kl, ol)) in k.iter().zip(&o).enumerate() {
        if kl == ol {
            continue;
        }
        match ALLOWED.iter().position(|(ka, oa, _)| ka == kl && oa == ol) {
            Some(p) => used[p] = true,
            None => bad.push(format!("line {}:\n  kernel: {kl}\n  ours:   {ol}", i + 1)),
        }
    }
    for (u, (ka, oa, _)) in used.iter().zip(ALLOWED) {
        if !u {
            bad.push(format!(
                "allowed difference not seen: kernel `{ka}`, ours `{oa}`"
            ));
        }
    }
    bad
}

#[test]
fn allow_list_logic() {
    let k: String = ALLOWED.iter().map(|(k, _, _)| format!("{k}\n")).collect();
    let o: String = ALLOWED.iter().map(|(_, o, _)| format!("{o}\n")).collect();
    assert!(unexplained(&format!("a: ok 0\n{k}"), &format!("a: ok 0\n{o}")).is_empty());
    // One unexplained line, one missing line, every allowed difference unseen.
    let bad = unexplained(&format!("a: ok 0\n{k}"), "a: ok 1\n");
    assert_eq!(bad.len(), 2 + ALLOWED.len(), "{bad:?}");
    assert_eq!(
        normalise("x 198.18.0.2:4000 198.18.0.6:4001 198.18.0.25", GUEST),
        "x A:4000 B:4001 198.18.0.25"
    );
}

#[test]
fn errno_transcript_matches_the_kernel() {
    let t0 = Instant::now();
    let ours = normalise(&host_transcript(&program(false)), HOST);
    let bytes = std::fs::read(program(true)).unwrap();

    let lab = Lab::start(
        1,
        LabOptions {
            ib: false,
            ..LabOptions::default()
        },
    )
    .expect("the kernel lab must boot");
    let booted = t0.elapsed();
    let path = lab.write_share(1, "rds_calls", &bytes).unwrap();
    let kernel = lab
        .exec_ok(
            1,
            &format!(
                "ip addr add {}/24 dev eth0 && {path} calls {} {} {}",
                GUEST[1], GUEST[0], GUEST[1], GUEST[2]
            ),
            Duration::from_secs(60),
        )
        .expect("rds_calls against the kernel")
        .stdout;
    let kernel = normalise(&kernel, GUEST);
    lab.stop().unwrap();
    eprintln!(
        "lab_preload: boot {:.1} s, total {:.1} s",
        booted.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );

    let bad = unexplained(&kernel, &ours);
    assert!(
        bad.is_empty(),
        "the transcripts differ:\n{}\n--- kernel ---\n{kernel}--- ours ---\n{ours}",
        bad.join("\n")
    );
}
