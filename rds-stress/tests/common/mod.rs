//! Helpers for the rds-stress tests: the binary, per-test addresses (127.50.x.y, this crate's
//! range), output format checks, and bounded process waits.
#![allow(dead_code)]

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use regex::Regex;

/// The rds-stress binary.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_rds-stress"))
}

/// A command with no daemon interference and its own runtime directory.
pub fn cmd(rt: &std::path::Path) -> Command {
    let mut c = Command::new(bin());
    c.env("RDS_RUNTIME_DIR", rt)
        .env("XDG_RUNTIME_DIR", rt)
        .env("RDS_NO_DAEMON", "1");
    c
}

/// Waits for a child with a deadline; kills it past the deadline and fails.
pub fn wait_output(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let out = collect(child);
                panic!(
                    "rds-stress did not finish in {limit:?}\nstdout:\n{}\nstderr:\n{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
    collect(child)
}

fn collect(mut child: Child) -> Output {
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    if let Some(mut s) = child.stdout.take() {
        let _ = s.read_to_end(&mut stdout);
    }
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_end(&mut stderr);
    }
    let status = child.wait().expect("wait");
    Output {
        status,
        stdout,
        stderr,
    }
}

/// Spawns with piped output.
pub fn spawn(mut c: Command) -> Child {
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    c.spawn().expect("spawn rds-stress")
}

/// The column header, exactly.
pub const HEADER: &str =
    "tsks   tx/s   rx/s  tx+rx K/s    mbi K/s    mbo K/s tx us/c   rtt us cpu %";

/// A per-second line (`%4u %6llu %6llu %10.2f %10.2f %10.2f %7.2f %8.2f %5.2f`).
pub fn interval_re() -> Regex {
    Regex::new(
        r"^[ \d]{3}\d [ \d]{5}\d [ \d]{5}\d [ \d]{6,}\d\.\d\d [ \d]{6,}\d\.\d\d [ \d]{6,}\d\.\d\d [ \d]{3,}\d\.\d\d [ \d]{4,}\d\.\d\d [ \d-]{1,}\d\.\d\d$",
    )
    .unwrap()
}

/// The first line of a `--loopback` run over RDS/TCP between `a` and `b`, naming both
/// embedded nodes (`embedded-PID`, `embedded-PID-N`).
pub fn loopback_line_re(a: &str, b: &str) -> Regex {
    Regex::new(&format!(
        r"^loopback: active side on {} \(node embedded-\d+(-\d+)?\), passive side on {} \(node embedded-\d+(-\d+)?\), over RDS/TCP$",
        regex::escape(a),
        regex::escape(b)
    ))
    .unwrap()
}

/// The average line.
pub fn average_re() -> Regex {
    Regex::new(
        r"^[ \d]{3}\d [ \d]{5}\d [ \d]{5}\d [ \d]{6,}\d\.\d\d [ \d]{6,}\d\.\d\d [ \d]{6,}\d\.\d\d [ \d]{3,}\d\.\d\d [ \d]{4,}\d\.\d\d [ \d-]{1,}\d\.\d\d  \(average\)$",
    )
    .unwrap()
}

/// The percentile line.
pub fn percentile_re() -> Regex {
    Regex::new(r"^rtt us percentiles: p50 \d+ p90 \d+ p99 \d+ p99\.9 \d+ max \d+$").unwrap()
}

/// Field `i` (0-based) of a per-second or average line.
pub fn field(line: &str, i: usize) -> f64 {
    line.split_whitespace()
        .nth(i)
        .and_then(|x| x.parse().ok())
        .unwrap_or_else(|| panic!("no field {i} in {line:?}"))
}
