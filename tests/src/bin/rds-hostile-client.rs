//! A hostile local client of the host daemon, for the abuse suite (`tests/tests/
//! hostile_client.rs`). Each command does what an attacker with a control connection can do,
//! prints one line saying what it did (`done ...`), then holds what it made open until its
//! standard input reaches end of file.
//!
//! ```text
//! rds-hostile-client freeze SOCK ADDR:PORT    a ring whose descriptors are made blocking and full
//! rds-hostile-client attach SOCK N            N attaches of one socket on one connection
//! rds-hostile-client bufs SOCK ADDR:PORT N SIZE   N sockets with SIZE-byte buffers, bound
//! rds-hostile-client bind SOCK ADDR:PORT      one bind (ports below 1024 need privilege)
//! rds-hostile-client hello SOCK               one hello (prints `done hello NODE`)
//! rds-hostile-client echo ADDR:PORT           a socket that sends back what it receives
//! ```
//!
//! `echo` is the victim's side rather than an attack: a socket opened as every program opens
//! one (through the daemon that `RDS_RUNTIME_DIR` names), answering each message with the same
//! bytes to its sender.
//!
//! `SOCK` is the daemon's control socket. Exit status 0 when the command ran (its result is in
//! the line), 1 with a message when it could not (bad arguments, no daemon).

use std::io::Read;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::process::ExitCode;

use rds_core::ctl::client::CtlClient;
use rds_core::ctl::{Reply, Request, SockOpt};
use rds_core::socket::ring::{RING_FDS, SEG_LEN, WANT_RX, WANT_TX, WANT_WORD};

type Res<T> = Result<T, String>;

fn connect(sock: &str) -> Res<CtlClient> {
    CtlClient::connect(Path::new(sock)).map_err(|e| format!("connecting to {sock}: {e}"))
}

fn call(c: &mut CtlClient, req: &Request) -> Res<Reply> {
    c.call(req, &[])
        .map(|(r, _)| r)
        .map_err(|e| format!("{req:?}: {e}"))
}

fn open(c: &mut CtlClient) -> Res<u64> {
    match call(c, &Request::SockOpen)? {
        Reply::Sock { sock } => Ok(sock),
        other => Err(format!("unexpected reply {other:?}")),
    }
}

fn bind(c: &mut CtlClient, sock: u64, addr: SocketAddr) -> Res<Reply> {
    call(
        c,
        &Request::SockBind {
            sock,
            addr,
            transport: None,
        },
    )
}

fn addr(s: &str) -> Res<SocketAddr> {
    s.parse().map_err(|_| format!("not an ADDR:PORT: {s}"))
}

/// Makes `fd`'s open file description blocking (what the daemon shares, it shares with us).
fn set_blocking(fd: &OwnedFd, blocking: bool) {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let flags = if blocking {
        OFlag::empty()
    } else {
        OFlag::O_NONBLOCK
    };
    let _ = fcntl(fd.as_raw_fd(), FcntlArg::F_SETFL(flags));
}

/// Writes to `fd` without blocking until it takes no more; returns the bytes written.
fn fill(fd: &OwnedFd) -> usize {
    set_blocking(fd, false);
    let chunk = [0xa5u8; 4096];
    let mut n = 0;
    for _ in 0..100_000 {
        match nix::unistd::write(fd, &chunk) {
            Ok(w) if w > 0 => n += w,
            _ => break,
        }
    }
    n
}

/// The freeze attack of issue 30: every descriptor of the ring made blocking (on the
/// description the daemon shares) and filled, both directions watched, the doorbell rung.
fn freeze(sock: &str, at: SocketAddr) -> Res<(CtlClient, Vec<OwnedFd>, String)> {
    let mut c = connect(sock)?;
    let s = open(&mut c)?;
    bind(&mut c, s, at)?;
    let (reply, _, fds) = c
        .call_fds(&Request::SockRing { sock: s })
        .map_err(|e| format!("SockRing: {e}"))?;
    if !matches!(reply, Reply::SockRing { seg_len } if seg_len == SEG_LEN) || fds.len() != RING_FDS
    {
        return Err(format!("no ring: {reply:?} with {} descriptors", fds.len()));
    }
    // The readiness descriptors filled to the brim (the doorbell is left room for the ring
    // below), then every descriptor made blocking.
    let mut filled = 0;
    for fd in &fds[2..] {
        filled += fill(fd);
    }
    for fd in &fds[1..] {
        set_blocking(fd, true);
    }
    // Both directions watched: the daemon now sets and clears both signals.
    let seg = std::fs::File::from(fds[0].try_clone().map_err(|e| e.to_string())?);
    std::os::unix::fs::FileExt::write_at(
        &seg,
        &(WANT_RX | WANT_TX).to_le_bytes(),
        WANT_WORD as u64,
    )
    .map_err(|e| format!("writing the want word: {e}"))?;
    // Ring (eight bytes: a count an eventfd would take too).
    nix::unistd::write(&fds[1], &1u64.to_le_bytes()).map_err(|e| format!("ringing: {e}"))?;
    let line = format!("done freeze {filled} bytes written into the ring's descriptors");
    Ok((c, fds, line))
}

fn run(args: &[String]) -> Res<(Vec<CtlClient>, Vec<OwnedFd>, String)> {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match a.as_slice() {
        ["freeze", sock, at] => {
            let (c, fds, line) = freeze(sock, addr(at)?)?;
            Ok((vec![c], fds, line))
        }
        ["attach", sock, n] => {
            let n: usize = n.parse().map_err(|_| format!("not a count: {n}"))?;
            let mut owner = connect(sock)?;
            let s = open(&mut owner)?;
            let cap = match call(&mut owner, &Request::SockCap { sock: s })? {
                Reply::SockCap { cap } => cap,
                other => return Err(format!("unexpected reply {other:?}")),
            };
            let mut c = connect(sock)?;
            let mut ok = 0;
            let mut first_err = String::from("none");
            for _ in 0..n {
                match c.call(&Request::SockAttach { cap: cap.clone() }, &[]) {
                    Ok((Reply::Sock { .. }, _)) => ok += 1,
                    Ok((other, _)) => {
                        first_err = format!("{other:?}");
                        break;
                    }
                    Err(e) => {
                        first_err = e.to_string();
                        break;
                    }
                }
            }
            Ok((
                vec![owner, c],
                Vec::new(),
                format!("done attach {ok} of {n}; first error: {first_err}"),
            ))
        }
        ["bufs", sock, at, n, size] => {
            let at = addr(at)?;
            let n: u16 = n.parse().map_err(|_| format!("not a count: {n}"))?;
            let size: usize = size.parse().map_err(|_| format!("not a size: {size}"))?;
            let mut c = connect(sock)?;
            let mut got = Vec::new();
            for i in 0..n {
                let s = open(&mut c)?;
                for opt in [SockOpt::Sndbuf(size), SockOpt::Rcvbuf(size)] {
                    call(&mut c, &Request::SockSet { sock: s, opt })?;
                }
                match bind(&mut c, s, SocketAddr::new(at.ip(), at.port() + i))? {
                    Reply::SockState { sndbuf, rcvbuf, .. } => {
                        got.push(format!("{sndbuf}/{rcvbuf}"))
                    }
                    other => return Err(format!("unexpected reply {other:?}")),
                }
            }
            Ok((vec![c], Vec::new(), format!("done bufs {}", got.join(" "))))
        }
        ["bind", sock, at] => {
            let mut c = connect(sock)?;
            let s = open(&mut c)?;
            let line = match c.call(
                &Request::SockBind {
                    sock: s,
                    addr: addr(at)?,
                    transport: None,
                },
                &[],
            ) {
                Ok((Reply::SockState { bound: Some(b), .. }, _)) => format!("done bind ok {b}"),
                Ok((other, _)) => format!("done bind unexpected {other:?}"),
                Err(e) => format!(
                    "done bind error {}",
                    e.into_io().raw_os_error().unwrap_or(0)
                ),
            };
            Ok((vec![c], Vec::new(), line))
        }
        ["echo", at] => {
            let s = rds_core::Socket::new().map_err(|e| format!("socket: {e}"))?;
            let bound = s.bind(addr(at)?).map_err(|e| format!("bind {at}: {e}"))?;
            let how = if s.via_daemon() { "daemon" } else { "embedded" };
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 1 << 20];
                loop {
                    if let Ok((n, from)) = s.recv_from(&mut buf) {
                        let _ = s.send_to(&buf[..n], from);
                    }
                }
            });
            Ok((Vec::new(), Vec::new(), format!("done echo {bound} {how}")))
        }
        ["hello", sock] => {
            let mut c = connect(sock)?;
            match call(
                &mut c,
                &Request::Hello {
                    v: rds_core::ctl::PROTO_VERSION,
                },
            )? {
                Reply::Hello { node, .. } => {
                    Ok((vec![c], Vec::new(), format!("done hello {node}")))
                }
                other => Err(format!("unexpected reply {other:?}")),
            }
        }
        _ => Err("usage: rds-hostile-client freeze|attach|bufs|bind|hello SOCK ...".into()),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok((_conns, _fds, line)) => {
            println!("{line}");
            // Hold everything open until told to go.
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rds-hostile-client: {e}");
            ExitCode::FAILURE
        }
    }
}
