//! TCP ping-pong at rds-ping's spacing, for scripts/bench-app-path.sh: what one round trip
//! costs this machine when both ends sleep between pings, as rds-ping's pings 1 ms apart
//! find them. A second process (this program, `serve`) echoes 48-byte pings (the size of an
//! RDS ping and pong on the wire) over loopback with `TCP_NODELAY`; the client sends one,
//! waits for its echo, then sleeps until the next is due.
//!
//! Usage: tcp_ping COUNT INTERVAL_US; prints `p50_us=<n> count=<n>` (the median round trip
//! in whole microseconds, as rds-ping prints its replies). Loopback only (127.0.0.1); the
//! server exits when the client closes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Bytes of one ping and of its echo (an RDS header, as rds-ping's zero-length message).
const PING: usize = 48;

fn serve() -> Result<(), String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    let port = l.local_addr().map_err(|e| e.to_string())?.port();
    println!("{port}");
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    let (mut s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut buf = [0u8; PING];
    while s.read_exact(&mut buf).is_ok() {
        if s.write_all(&buf).is_err() {
            break;
        }
    }
    Ok(())
}

fn ping(count: usize, interval: Duration) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut server = Command::new(exe)
        .arg("serve")
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting the server: {e}"))?;
    let mut line = String::new();
    let out = server.stdout.take().ok_or("no server output")?;
    BufReader::new(out)
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    let port: u16 = line
        .trim()
        .parse()
        .map_err(|_| format!("the server said {line:?}, not a port"))?;
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut rtts = Vec::with_capacity(count);
    let mut buf = [0u8; PING];
    let mut next = Instant::now();
    for _ in 0..count {
        let t0 = Instant::now();
        s.write_all(&buf).map_err(|e| format!("write: {e}"))?;
        s.read_exact(&mut buf).map_err(|e| format!("read: {e}"))?;
        rtts.push(t0.elapsed().as_micros());
        next += interval;
        if let Some(d) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        } else {
            next = Instant::now();
        }
    }
    drop(s);
    let _ = server.wait();
    rtts.sort_unstable();
    let p50 = rtts
        .get(rtts.len().saturating_sub(1) / 2)
        .copied()
        .unwrap_or(0);
    println!("p50_us={p50} count={}", rtts.len());
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let r = match args.as_slice() {
        [s] if s == "serve" => serve(),
        [n, iv] => match (n.parse::<usize>(), iv.parse::<u64>()) {
            (Ok(n), Ok(iv)) if n > 0 => ping(n, Duration::from_micros(iv)),
            _ => Err(format!(
                "COUNT and INTERVAL_US are whole numbers, got {n:?} {iv:?}"
            )),
        },
        _ => Err("usage: tcp_ping COUNT INTERVAL_US".to_string()),
    };
    if let Err(e) = r {
        eprintln!("tcp_ping: {e}");
        std::process::exit(1);
    }
}
