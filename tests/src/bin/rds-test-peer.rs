//! A second RDS node in its own process, for the multi-process and network-namespace tests
//! (`tests/tests/node_pairs.rs`, `tests/tests/netns.rs`).
//!
//! ```text
//! rds-test-peer echo   <bind ip:port> <count> [<expected sender ip:port>]
//! rds-test-peer client <bind ip:port> <server ip:port> <count>
//! ```
//!
//! `echo` starts a node on the bind address, prints `READY <addr>` and sends every message it
//! receives back to its sender, `count` times, then prints `ECHOED <count>`. `client` sends
//! `count` messages of the sizes in [`rds_tests::peer::SIZES`] (content from
//! [`rds_tests::peer::payload`]), receives the echoes and checks length, content, order and the
//! sender's address, then prints `OK <count>`. Every wait has a deadline (`RDS_PEER_TIMEOUT`
//! seconds, 30 by default). Exit status: 0 on success, 1 on a failed check or timeout, 2 on a
//! bad argument.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rds_core::{CtlMode, Node, NodeConfig, Socket};
use rds_tests::peer::{payload, size_of};

fn usage() -> ExitCode {
    eprintln!(
        "usage: rds-test-peer echo <bind ip:port> <count> [<sender ip:port>]\n       \
         rds-test-peer client <bind ip:port> <server ip:port> <count>"
    );
    ExitCode::from(2)
}

fn start(bind: SocketAddr, timeout: Duration) -> Result<(Node, Socket)> {
    let mut cfg = NodeConfig::new([bind.ip()]);
    cfg.ctl = CtlMode::Off;
    cfg.name = format!("peer-{bind}");
    let node = Node::start(cfg).with_context(|| format!("starting a node on {}", bind.ip()))?;
    let s = Socket::with_node(&node);
    s.set_send_buffer_size(8 << 20);
    s.set_recv_buffer_size(8 << 20);
    s.bind(bind).with_context(|| format!("bind {bind}"))?;
    s.set_read_timeout(Some(timeout));
    s.set_write_timeout(Some(timeout));
    Ok((node, s))
}

fn echo(bind: SocketAddr, count: u64, sender: Option<SocketAddr>, t: Duration) -> Result<()> {
    let (node, s) = start(bind, t)?;
    println!("READY {bind}");
    let deadline = Instant::now() + t;
    let mut buf = vec![0u8; 1 << 20];
    for i in 0..count {
        if Instant::now() > deadline {
            bail!("timed out after {i} of {count} messages");
        }
        let (n, from) = s
            .recv_from(&mut buf)
            .with_context(|| format!("receive {i}"))?;
        if let Some(want) = sender {
            if from != want {
                bail!("message {i} came from {from}, expected {want}");
            }
        }
        s.send_to(&buf[..n], from)
            .with_context(|| format!("echo {i} to {from}"))?;
    }
    println!("ECHOED {count}");
    // Let the last echoes be acknowledged before the node goes away.
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until
        && !(node.send_queue().is_empty() && node.retrans_queue().is_empty())
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    node.shutdown();
    Ok(())
}

fn client(bind: SocketAddr, server: SocketAddr, count: u64, t: Duration) -> Result<()> {
    let (node, s) = start(bind, t)?;
    let deadline = Instant::now() + t;
    let mut buf = vec![0u8; 1 << 20];
    std::thread::scope(|sc| -> Result<()> {
        let tx = sc.spawn(|| -> Result<()> {
            for i in 0..count {
                let m = payload(i, size_of(i));
                s.send_to(&m, server)
                    .with_context(|| format!("send {i} to {server}"))?;
            }
            Ok(())
        });
        for i in 0..count {
            if Instant::now() > deadline {
                bail!("timed out after {i} of {count} echoes");
            }
            let (n, from) = s
                .recv_from(&mut buf)
                .with_context(|| format!("receive echo {i}"))?;
            if from != server {
                bail!("echo {i} came from {from}, expected {server}");
            }
            let want = payload(i, size_of(i));
            if n != want.len() || buf[..n] != want[..] {
                bail!(
                    "echo {i}: {n} bytes, expected {} bytes of message {i} (lost, reordered or \
                     corrupted)",
                    want.len()
                );
            }
        }
        tx.join()
            .map_err(|_| anyhow::anyhow!("sender panicked"))??;
        Ok(())
    })?;
    println!("OK {count}");
    node.shutdown();
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let t = std::env::var("RDS_PEER_TIMEOUT")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(Duration::from_secs(30), Duration::from_secs);
    let addr = |s: &String| s.parse::<SocketAddr>();
    let r = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["echo", _, _] | ["echo", _, _, _] => {
            let (Ok(bind), Ok(count)) = (addr(&args[1]), args[2].parse()) else {
                return usage();
            };
            let sender = match args.get(3).map(addr) {
                None => None,
                Some(Ok(a)) => Some(a),
                Some(Err(_)) => return usage(),
            };
            echo(bind, count, sender, t)
        }
        ["client", _, _, _] => {
            let (Ok(bind), Ok(server), Ok(count)) =
                (addr(&args[1]), addr(&args[2]), args[3].parse())
            else {
                return usage();
            };
            client(bind, server, count, t)
        }
        _ => return usage(),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rds-test-peer: {e:#}");
            ExitCode::from(1)
        }
    }
}
