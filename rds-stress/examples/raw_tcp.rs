//! Raw TCP baseline for scripts/bench-stress.sh: the rds-stress traffic pattern (requests of
//! `req` bytes answered by acks of `ack` bytes, `depth` outstanding per flow, both directions,
//! `tasks`² flows) over plain TCP sockets on loopback, without RDS.
//!
//! Usage: raw_tcp REQ ACK DEPTH TASKS SECONDS; prints `tx_per_sec=<f> kib_per_sec=<f>` where
//! tx_per_sec counts requests sent by one side and kib_per_sec both sides' bytes, as
//! rds-stress's tx/s and tx+rx K/s columns.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const REQ: u8 = 1;
const ACK: u8 = 2;

#[derive(Default)]
struct Flow {
    state: Mutex<(u32, u32)>, // (pending requests, acks owed)
    cv: Condvar,
}

/// One end of a flow: a writer keeps `depth` requests outstanding and sends owed acks; a
/// reader answers requests and retires acks.
fn end(
    s: TcpStream,
    req: usize,
    ack: usize,
    depth: u32,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    bytes: Option<Arc<AtomicU64>>,
) {
    s.set_nodelay(true).unwrap();
    let f = Arc::new(Flow::default());
    let r = s.try_clone().unwrap();
    let (f2, stop2, bytes2) = (f.clone(), stop.clone(), bytes.clone());
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; req.max(ack)];
        r.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut r = std::io::BufReader::with_capacity(256 << 10, r);
        while !stop2.load(Relaxed) {
            if r.read_exact(&mut buf[..1]).is_err() {
                continue;
            }
            let n = if buf[0] == REQ { req } else { ack };
            if r.read_exact(&mut buf[1..n]).is_err() {
                return;
            }
            if let Some(b) = &bytes2 {
                b.fetch_add(n as u64, Relaxed);
            }
            let mut st = f2.state.lock().unwrap();
            if buf[0] == REQ {
                st.1 += 1;
            } else {
                st.0 -= 1;
            }
            f2.cv.notify_one();
        }
    });
    let mut w = s;
    let mut reqm = vec![0u8; req];
    reqm[0] = REQ;
    let mut ackm = vec![0u8; ack];
    ackm[0] = ACK;
    while !stop.load(Relaxed) {
        let (acks, reqs) = {
            let mut st = f.state.lock().unwrap();
            while st.1 == 0 && st.0 >= depth && !stop.load(Relaxed) {
                st = f.cv.wait_timeout(st, Duration::from_millis(100)).unwrap().0;
            }
            let acks = st.1;
            st.1 = 0;
            let reqs = depth - st.0;
            st.0 = depth;
            (acks, reqs)
        };
        // One write per batch, as a stack that coalesces queued messages would.
        let mut out = Vec::with_capacity(acks as usize * ack + reqs as usize * req);
        for _ in 0..acks {
            out.extend_from_slice(&ackm);
        }
        for _ in 0..reqs {
            out.extend_from_slice(&reqm);
        }
        if w.write_all(&out).is_err() {
            return;
        }
        if let Some(b) = &bytes {
            b.fetch_add(out.len() as u64, Relaxed);
        }
        sent.fetch_add(u64::from(reqs), Relaxed);
    }
    let _ = reader.join();
}

fn main() {
    let a: Vec<u64> = std::env::args()
        .skip(1)
        .map(|x| x.parse().expect("number"))
        .collect();
    let (req, ack, depth, tasks, secs) = (a[0] as usize, a[1] as usize, a[2] as u32, a[3], a[4]);
    let l = TcpListener::bind("127.0.0.2:0").unwrap();
    let addr = l.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let sent_a = Arc::new(AtomicU64::new(0));
    let sent_b = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    let mut hs = Vec::new();
    for _ in 0..tasks * tasks {
        let c = TcpStream::connect(addr).unwrap();
        let (s, _) = l.accept().unwrap();
        // Bytes are counted at the first end only (sent and received), as rds-stress's
        // tx+rx column counts one side.
        for (sock, sent, bytes) in [
            (c, sent_a.clone(), Some(bytes.clone())),
            (s, sent_b.clone(), None),
        ] {
            let stop = stop.clone();
            hs.push(std::thread::spawn(move || {
                end(sock, req, ack, depth, stop, sent, bytes)
            }));
        }
    }
    // Warm up one second, then measure.
    std::thread::sleep(Duration::from_secs(1));
    let (s0, b0, t0) = (sent_a.load(Relaxed), bytes.load(Relaxed), Instant::now());
    std::thread::sleep(Duration::from_secs(secs));
    let (s1, b1, el) = (
        sent_a.load(Relaxed),
        bytes.load(Relaxed),
        t0.elapsed().as_secs_f64(),
    );
    stop.store(true, Relaxed);
    println!(
        "tx_per_sec={:.1} kib_per_sec={:.1}",
        (s1 - s0) as f64 / el,
        (b1 - b0) as f64 / el / 1024.0
    );
    std::process::exit(0);
}
