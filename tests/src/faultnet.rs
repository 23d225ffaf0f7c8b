//! A fault-injecting TCP relay for RDS/TCP (the host kernel has no netem): a node connects to
//! the proxy (see `rds_core::Node::set_peer_route`), which connects on to the real peer from the
//! client's own address and lane (source port ≡ client port mod 8), and forwards both
//! directions with faults drawn from a seeded generator:
//! - **segmentation**: every write is a random 1..=`max_chunk` bytes, so headers and payloads
//!   reach the receiver split at random byte offsets;
//! - **delays**: after a write, with probability 1/`delay_one_in`, a pause of up to `max_delay`;
//! - **cuts**: after a random number of forwarded bytes (uniform in 1..=2·`cut_mean`) the
//!   connection pair is aborted: both ends get a FIN and, for data they send afterwards, a
//!   reset; the proxy then closes with a reset. [`Proxy::cut_all`] cuts every pair at once.
//!
//! **Loss-free by construction.** RDS/TCP releases a message once TCP acknowledged its last
//! byte. Through a relay, the *relay's* kernel acknowledges, so a relay that simply dropped its
//! buffers on a cut would lose messages the sender already released, which no RDS/TCP
//! implementation (the kernel's included) could recover. This proxy behaves like the network
//! between two kernels instead: what it accepted is delivered. On a cut it freezes both
//! sockets (`shutdown(SHUT_RDWR)`: the kernel now resets rather than acknowledges new data),
//! reads what they had already accepted, and learns from `SIOCOUTQ` how much of what it wrote
//! the receiver's kernel acknowledged. Every *complete* frame after that point is kept and
//! written first on the next connection of the same lane (the same client address and
//! `port mod 8`), marked `RETRANSMITTED` (except congestion maps, which have no sequence
//! number), so that a receiver that did get it drops it as an old sequence number and one
//! that did not takes it, in order, before anything the sender retransmits itself. A partial
//! frame at the end is dropped: its last byte was never acknowledged, so its sender resends
//! it. A new connection of a lane waits until the previous one of that lane has finished.
//!
//! Every loop is bounded by the proxy's stop flag and deadlines; the proxy never panics on
//! network input.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{self as nsock, sockopt, AddressFamily, SockFlag, SockType};

const HDR: usize = 48;
const LEN_OFF: usize = 16;
const FLAGS_OFF: usize = 24;
const FLAG_CONG_BITMAP: u8 = 0x01;
const FLAG_RETRANSMITTED: u8 = 0x04;
/// Frames longer than this are not RDS; the proxy stops tracking boundaries (and keeps
/// nothing) for such a stream.
const MAX_FRAME: usize = HDR + (1 << 20);

/// The faults to inject.
#[derive(Debug, Clone)]
pub struct Faults {
    /// Seed of the fault generator (each connection pair gets its own stream from it).
    pub seed: u64,
    /// Mean bytes forwarded (both directions together) before a pair is cut; 0 = never.
    pub cut_mean: u64,
    /// Largest single write.
    pub max_chunk: usize,
    /// A pause after one write in this many (0 = never).
    pub delay_one_in: u32,
    /// Longest pause.
    pub max_delay: Duration,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            seed: 1,
            cut_mean: 0,
            max_chunk: 64 << 10,
            delay_one_in: 0,
            max_delay: Duration::ZERO,
        }
    }
}

/// What the proxy did.
#[derive(Debug, Default)]
pub struct ProxyStats {
    /// Connection pairs relayed.
    pub pairs: AtomicU64,
    /// Pairs cut by the proxy (random offset or [`Proxy::cut_all`]).
    pub cuts: AtomicU64,
    /// Bytes written to either end.
    pub bytes: AtomicU64,
    /// Frames kept at the end of a pair and written on the lane's next connection.
    pub replayed_frames: AtomicU64,
    /// Pauses injected.
    pub delays: AtomicU64,
    /// Pairs that could not reach the upstream peer.
    pub connect_failures: AtomicU64,
}

/// A running proxy; stops (and resets every relayed connection) on drop.
#[derive(Debug)]
pub struct Proxy {
    listen: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    upstream: SocketAddr,
    faults: Faults,
    stop: AtomicBool,
    /// Bumped by `cut_all`; pairs compare it with the value they started with.
    cut_gen: AtomicU64,
    stats: ProxyStats,
    lanes: Mutex<HashMap<(IpAddr, u16), Lane>>,
    lane_cv: Condvar,
    pairs: Mutex<Vec<JoinHandle<()>>>,
}

/// Per-lane state: whether a pair runs, and the frames owed to each side.
#[derive(Debug, Default)]
struct Lane {
    busy: bool,
    /// Complete frames owed to the upstream peer / to the client.
    to_upstream: Vec<u8>,
    to_client: Vec<u8>,
}

impl Proxy {
    /// Listens on `listen` and relays every connection to `upstream`.
    ///
    /// # Errors
    /// The listener cannot be bound.
    pub fn start(listen: SocketAddr, upstream: SocketAddr, faults: Faults) -> io::Result<Proxy> {
        let l = TcpListener::bind(listen)?;
        l.set_nonblocking(true)?;
        let shared = Arc::new(Shared {
            upstream,
            faults,
            stop: AtomicBool::new(false),
            cut_gen: AtomicU64::new(0),
            stats: ProxyStats::default(),
            lanes: Mutex::new(HashMap::new()),
            lane_cv: Condvar::new(),
            pairs: Mutex::new(Vec::new()),
        });
        let sh = shared.clone();
        let acceptor = std::thread::Builder::new()
            .name("faultnet-accept".into())
            .spawn(move || accept_loop(&l, &sh))?;
        Ok(Proxy {
            listen,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.listen
    }

    /// Counters.
    pub fn stats(&self) -> &ProxyStats {
        &self.shared.stats
    }

    /// Cuts every relayed connection pair now.
    pub fn cut_all(&self) {
        self.shared.cut_gen.fetch_add(1, Ordering::SeqCst);
    }

    /// Frames still owed to some lane (0 once everything was delivered).
    pub fn owed_bytes(&self) -> usize {
        lock(&self.shared.lanes)
            .values()
            .map(|l| l.to_upstream.len() + l.to_client.len())
            .sum()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.lane_cv.notify_all();
        if let Some(h) = self.acceptor.take() {
            let _ = h.join();
        }
        let pairs = std::mem::take(&mut *lock(&self.shared.pairs));
        for h in pairs {
            let _ = h.join();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// splitmix64: a small seeded generator.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `1..=n` (`n >= 1`).
    fn upto(&mut self, n: u64) -> u64 {
        1 + self.next() % n.max(1)
    }
}

fn accept_loop(l: &TcpListener, sh: &Arc<Shared>) {
    let mut n = 0u64;
    while !sh.stop.load(Ordering::SeqCst) {
        match l.accept() {
            Ok((client, peer)) => {
                n += 1;
                sh.stats.pairs.fetch_add(1, Ordering::Relaxed);
                let sh2 = sh.clone();
                let seed = sh.faults.seed ^ n.wrapping_mul(0xa076_1d64_78bd_642f);
                let h = std::thread::Builder::new()
                    .name("faultnet-pair".into())
                    .spawn(move || run_pair(&sh2, client, peer, seed));
                if let Ok(h) = h {
                    let mut pairs = lock(&sh.pairs);
                    pairs.retain(|h| !h.is_finished());
                    pairs.push(h);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

/// Connects to `upstream` from `src_ip` with a source port ≡ `lane` (mod 8).
fn connect_upstream(
    src_ip: IpAddr,
    lane: u16,
    upstream: SocketAddr,
    rng: &mut Rng,
) -> io::Result<TcpStream> {
    let fam = if upstream.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    let mut last = io::Error::from(io::ErrorKind::AddrInUse);
    for _ in 0..64 {
        let fd: OwnedFd = nsock::socket(fam, SockType::Stream, SockFlag::empty(), None)?;
        nsock::setsockopt(&fd, sockopt::ReuseAddr, &true)?;
        let port = 32768 + (rng.next() % ((61000 - 32768) / 8)) as u16 * 8 + lane;
        let src = SocketAddr::new(src_ip, port);
        let r = match src {
            SocketAddr::V4(a) => nsock::bind(fd.as_raw_fd(), &nsock::SockaddrIn::from(a)),
            SocketAddr::V6(a) => nsock::bind(fd.as_raw_fd(), &nsock::SockaddrIn6::from(a)),
        };
        if let Err(e) = r {
            last = io::Error::from(e);
            continue;
        }
        let r = match upstream {
            SocketAddr::V4(a) => nsock::connect(fd.as_raw_fd(), &nsock::SockaddrIn::from(a)),
            SocketAddr::V6(a) => nsock::connect(fd.as_raw_fd(), &nsock::SockaddrIn6::from(a)),
        };
        match r {
            Ok(()) => return Ok(TcpStream::from(fd)),
            Err(nix::errno::Errno::EADDRINUSE | nix::errno::Errno::EADDRNOTAVAIL) => {
                last = io::Error::from(io::ErrorKind::AddrInUse);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(last)
}

/// Bytes not yet acknowledged by the peer of `s` (`SIOCOUTQ`).
fn outq(s: &TcpStream) -> Option<u64> {
    let mut v: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (== TIOCOUTQ) writes one c_int through the pointer, which is valid for
    // the duration of the call; the descriptor is open (owned by `s`).
    let r = unsafe { libc::ioctl(s.as_raw_fd(), libc::TIOCOUTQ, &mut v as *mut libc::c_int) };
    (r == 0).then_some(v.max(0) as u64)
}

/// One direction of a pair: bytes accepted from the source, held from the start of the first
/// frame the destination's kernel has not acknowledged completely.
#[derive(Debug, Default)]
struct Dir {
    hold: VecDeque<u8>,
    /// Stream offset of `hold[0]` (a frame boundary, unless `untracked`).
    base: u64,
    /// Bytes written to the destination.
    written: u64,
    /// Bytes the destination's kernel acknowledged (as last seen).
    acked: u64,
    src_eof: bool,
    fin_sent: bool,
    /// The stream stopped looking like RDS frames: nothing is kept on a cut.
    untracked: bool,
}

impl Dir {
    fn end(&self) -> u64 {
        self.base + self.hold.len() as u64
    }

    fn pending(&self) -> usize {
        (self.end() - self.written) as usize
    }

    fn frame_len_at(&self, idx: usize) -> Option<usize> {
        if idx + HDR > self.hold.len() {
            return None;
        }
        let b = |i| self.hold[idx + LEN_OFF + i];
        let len = u32::from_be_bytes([b(0), b(1), b(2), b(3)]) as usize;
        Some(HDR + len)
    }

    /// Drops complete frames the destination acknowledged.
    fn trim(&mut self) {
        if self.untracked {
            let n = (self.acked - self.base) as usize;
            self.hold.drain(..n);
            self.base = self.acked;
            return;
        }
        while let Some(flen) = self.frame_len_at(0) {
            if flen > MAX_FRAME {
                self.untracked = true;
                break;
            }
            if self.base + flen as u64 > self.acked {
                break;
            }
            self.hold.drain(..flen);
            self.base += flen as u64;
        }
    }

    /// Complete frames not acknowledged by the destination, as owed bytes (RETRANSMITTED set).
    fn owed(&mut self) -> (Vec<u8>, u64) {
        self.trim();
        if self.untracked {
            return (Vec::new(), 0);
        }
        let mut out = Vec::new();
        let mut frames = 0;
        let mut idx = 0usize;
        while let Some(flen) = self.frame_len_at(idx) {
            if flen > MAX_FRAME || idx + flen > self.hold.len() {
                break;
            }
            let start = out.len();
            out.extend(self.hold.range(idx..idx + flen));
            if out[start + FLAGS_OFF] != FLAG_CONG_BITMAP {
                out[start + FLAGS_OFF] |= FLAG_RETRANSMITTED;
            }
            frames += 1;
            idx += flen;
        }
        (out, frames)
    }

    /// The next contiguous pending bytes, at most `max`.
    fn next_chunk(&self, max: usize) -> &[u8] {
        let pos = (self.written - self.base) as usize;
        let (a, b) = self.hold.as_slices();
        let s = if pos < a.len() {
            &a[pos..]
        } else {
            &b[pos - a.len()..]
        };
        &s[..s.len().min(max)]
    }
}

enum End {
    /// Both directions finished (FIN passed both ways).
    Clean,
    /// Cut by the proxy, or a socket failed.
    Abort,
}

fn run_pair(sh: &Arc<Shared>, client: TcpStream, peer: SocketAddr, seed: u64) {
    let mut rng = Rng(seed);
    let lane = peer.port() % 8;
    let key = (peer.ip(), lane);
    // Wait for the lane's previous pair to finish, so that owed frames go first.
    let (to_up, to_client) = {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut lanes = lock(&sh.lanes);
        while lanes.get(&key).is_some_and(|l| l.busy)
            && Instant::now() < deadline
            && !sh.stop.load(Ordering::SeqCst)
        {
            lanes = sh
                .lane_cv
                .wait_timeout(lanes, Duration::from_millis(10))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let l = lanes.entry(key).or_default();
        l.busy = true;
        (
            std::mem::take(&mut l.to_upstream),
            std::mem::take(&mut l.to_client),
        )
    };
    let mut dirs = [Dir::default(), Dir::default()]; // 0: client -> upstream, 1: back
    dirs[0].hold.extend(to_up);
    dirs[1].hold.extend(to_client);
    let upstream = match connect_upstream(peer.ip(), lane, sh.upstream, &mut rng) {
        Ok(u) => Some(u),
        Err(_) => {
            sh.stats.connect_failures.fetch_add(1, Ordering::Relaxed);
            None
        }
    };
    let end = match &upstream {
        Some(up) => relay(sh, &client, up, &mut dirs, &mut rng),
        None => End::Abort,
    };
    // Freeze, collect what the kernels accepted, and work out what is owed.
    let socks: [Option<&TcpStream>; 2] = [Some(&client), upstream.as_ref()];
    if matches!(end, End::Abort) {
        for s in socks.iter().flatten() {
            let _ = s.shutdown(Shutdown::Both);
        }
        for (i, s) in socks.iter().enumerate() {
            if let Some(s) = s {
                drain_into(s, &mut dirs[i]);
            }
        }
    }
    if matches!(end, End::Clean) {
        // Let the last bytes be acknowledged, so that nothing delivered is owed again.
        let deadline = Instant::now() + Duration::from_secs(1);
        while Instant::now() < deadline
            && socks
                .iter()
                .flatten()
                .any(|s| outq(s).is_some_and(|q| q > 0))
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    // Direction i writes to socks[1 - i].
    for (i, d) in dirs.iter_mut().enumerate() {
        if let Some(dst) = socks[1 - i] {
            if let Some(q) = outq(dst) {
                d.acked = d.acked.max(d.written.saturating_sub(q));
            }
        }
    }
    let (up_owed, up_frames) = dirs[0].owed();
    let (cl_owed, cl_frames) = dirs[1].owed();
    sh.stats
        .replayed_frames
        .fetch_add(up_frames + cl_frames, Ordering::Relaxed);
    if matches!(end, End::Abort) {
        for s in socks.iter().flatten() {
            let _ = nsock::setsockopt(
                &s.as_fd(),
                sockopt::Linger,
                &libc::linger {
                    l_onoff: 1,
                    l_linger: 0,
                },
            );
        }
    }
    drop(upstream);
    drop(client);
    let mut lanes = lock(&sh.lanes);
    let l = lanes.entry(key).or_default();
    l.to_upstream = up_owed;
    l.to_client = cl_owed;
    l.busy = false;
    drop(lanes);
    sh.lane_cv.notify_all();
}

/// Reads what `s` still has (after `shutdown`): data the kernel accepted, then end or error.
fn drain_into(mut s: &TcpStream, d: &mut Dir) {
    let _ = s.set_nonblocking(true);
    let mut buf = [0u8; 65536];
    for _ in 0..4096 {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => d.hold.extend(&buf[..n]),
        }
    }
}

fn relay(
    sh: &Shared,
    client: &TcpStream,
    upstream: &TcpStream,
    dirs: &mut [Dir; 2],
    rng: &mut Rng,
) -> End {
    let socks = [client, upstream];
    for s in socks {
        if s.set_nonblocking(true).is_err() || s.set_nodelay(true).is_err() {
            return End::Abort;
        }
    }
    let f = &sh.faults;
    let cut_at = if f.cut_mean == 0 {
        u64::MAX
    } else {
        rng.upto(2 * f.cut_mean)
    };
    let gen0 = sh.cut_gen.load(Ordering::SeqCst);
    let mut forwarded = 0u64;
    let mut buf = vec![0u8; 64 << 10];
    loop {
        if sh.stop.load(Ordering::SeqCst) {
            return End::Abort;
        }
        if sh.cut_gen.load(Ordering::SeqCst) != gen0 || forwarded >= cut_at {
            sh.stats.cuts.fetch_add(1, Ordering::Relaxed);
            return End::Abort;
        }
        // Wait for input (or output room while bytes are pending).
        {
            let mut fds: Vec<PollFd<'_>> = socks
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let mut ev = PollFlags::empty();
                    if !dirs[i].src_eof {
                        ev |= PollFlags::POLLIN;
                    }
                    if dirs[1 - i].pending() > 0 {
                        ev |= PollFlags::POLLOUT;
                    }
                    PollFd::new(s.as_fd(), ev)
                })
                .collect();
            let _ = poll(&mut fds, PollTimeout::from(5u16));
        }
        // Read what is there.
        for i in 0..2 {
            let d = &mut dirs[i];
            let mut src = socks[i];
            while !d.src_eof && d.pending() < (4 << 20) {
                match src.read(&mut buf) {
                    Ok(0) => d.src_eof = true,
                    Ok(n) => d.hold.extend(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return End::Abort,
                }
            }
        }
        // Write, in random pieces, with the odd pause.
        for i in 0..2 {
            let mut dst = socks[1 - i];
            loop {
                let d = &mut dirs[i];
                if d.pending() == 0 {
                    break;
                }
                let max = rng.upto(f.max_chunk as u64) as usize;
                let chunk = d.next_chunk(max);
                match dst.write(chunk) {
                    Ok(0) => return End::Abort,
                    Ok(n) => {
                        d.written += n as u64;
                        forwarded += n as u64;
                        sh.stats.bytes.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return End::Abort,
                }
                if f.delay_one_in > 0 && rng.upto(u64::from(f.delay_one_in)) == 1 {
                    sh.stats.delays.fetch_add(1, Ordering::Relaxed);
                    let us = rng.upto(f.max_delay.as_micros().max(1) as u64);
                    std::thread::sleep(Duration::from_micros(us));
                    break;
                }
                if forwarded >= cut_at {
                    break;
                }
            }
            let d = &mut dirs[i];
            if let Some(q) = outq(dst) {
                d.acked = d.acked.max(d.written.saturating_sub(q));
                d.trim();
            }
            // Pass an end of stream on once everything before it is written.
            if d.src_eof && d.pending() == 0 && !d.fin_sent {
                d.fin_sent = true;
                let _ = dst.shutdown(Shutdown::Write);
            }
        }
        if dirs.iter().all(|d| d.fin_sent) {
            // Both sides closed their sending halves and everything was passed on.
            return End::Clean;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(seq: u8, flags: u8, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; HDR + len];
        v[7] = seq;
        v[LEN_OFF..LEN_OFF + 4].copy_from_slice(&(len as u32).to_be_bytes());
        v[FLAGS_OFF] = flags;
        v
    }

    #[test]
    fn owed_frames_are_the_unacknowledged_complete_ones() {
        let mut d = Dir::default();
        let (f1, f2, f3, map) = (
            frame(1, 0, 10),
            frame(2, 0, 0),
            frame(3, 0, 100),
            frame(0, FLAG_CONG_BITMAP, 20),
        );
        for f in [&f1, &f2, &map, &f3] {
            d.hold.extend(f.iter());
        }
        // A partial fourth frame.
        d.hold.extend(&frame(4, 0, 50)[..30]);
        d.written = d.end();
        // The receiver acknowledged f1 and half of f2.
        d.acked = (f1.len() + 20) as u64;
        let (owed, n) = d.owed();
        assert_eq!(n, 3);
        assert_eq!(d.base, f1.len() as u64);
        let mut want: Vec<u8> = Vec::new();
        for f in [&f2, &map, &f3] {
            want.extend(f.iter());
        }
        want[FLAGS_OFF] |= FLAG_RETRANSMITTED;
        let f3_at = f2.len() + map.len();
        want[f3_at + FLAGS_OFF] |= FLAG_RETRANSMITTED;
        assert_eq!(owed, want);
    }

    #[test]
    fn chunks_follow_the_hold_buffer() {
        let mut d = Dir::default();
        d.hold.extend(0..=255u8);
        d.written = 10;
        assert_eq!(d.next_chunk(3), &[10, 11, 12]);
        d.acked = 0;
        d.untracked = true;
        d.acked = 5;
        d.trim();
        assert_eq!(d.base, 5);
        assert_eq!(d.next_chunk(2), &[10, 11]);
    }
}
