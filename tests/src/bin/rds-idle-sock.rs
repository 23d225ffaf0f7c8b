//! An RDS socket that is bound and never read, for the abuse suite (`tests/tests/abuse.rs`).
//!
//! ```text
//! rds-idle-sock ADDR:PORT
//! rds-idle-sock --panic-in-thread
//! ```
//!
//! Binds one socket to `ADDR:PORT` (through the host daemon when one owns the address, found
//! as every tool finds it, e.g. through `RDS_RUNTIME_DIR`), prints `bound ADDR:PORT daemon` or
//! `bound ADDR:PORT embedded` on stdout, then waits until its standard input reaches end of
//! file, never receiving from the socket. Exit status 0, or 1 with a message when the
//! address is not an `ADDR:PORT` or the bind fails.
//!
//! `--panic-in-thread` checks the release profile's crash semantics: a spawned thread panics
//! while the main thread sleeps 10 s and then exits 0. Built with `panic = "abort"`, the
//! process dies of `SIGABRT` at the panic instead.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::process::ExitCode;

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some("--panic-in-thread") {
        let _ = std::thread::Builder::new()
            .name("doomed".into())
            .spawn(|| panic!("a thread's panic (on purpose)"));
        std::thread::sleep(std::time::Duration::from_secs(10));
        return ExitCode::SUCCESS;
    }
    let Some(addr) = std::env::args()
        .nth(1)
        .and_then(|a| a.parse::<SocketAddr>().ok())
    else {
        eprintln!("usage: rds-idle-sock ADDR:PORT");
        return ExitCode::FAILURE;
    };
    let sock = match rds_core::Socket::new() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("rds-idle-sock: socket: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = sock.bind(addr) {
        eprintln!("rds-idle-sock: bind {addr}: {e}");
        return ExitCode::FAILURE;
    }
    let how = if sock.via_daemon() {
        "daemon"
    } else {
        "embedded"
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "bound {addr} {how}");
    let _ = out.flush();
    drop(out);
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    drop(sock);
    ExitCode::SUCCESS
}
