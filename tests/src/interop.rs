//! Helpers for the kernel interop tests (`tests/tests/interop_tcp.rs`): our node inside the
//! lab's namespace, the payload pattern of the lab's `rdstool` (`tests/lab/README.md`,
//! "Payload pattern") with a per-source order and content checker, pattern senders and
//! receivers on our sockets, parsers for `rdstool` output, and our endpoint of the kernel
//! selftest traffic (a replica of `rdstool selftest-peer`, same schedule, digests and
//! control-message barrier).
//!
//! Every wait is bounded by a deadline; nothing here sends outside the lab namespace (our
//! sockets belong to a node whose I/O thread runs inside it).

use anyhow::{anyhow, bail, Context, Result};
use rds_core::{CtlMode, Node, NodeConfig, RecvFlags, Socket};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use crate::lab::Lab;

/// Largest RDS message.
pub const MAX_MSG: usize = 1 << 20;

// ---------------------------------------------------------------------------------------------
// Our node

/// Starts our node for `addr` on a thread inside the lab namespace (its I/O thread inherits
/// the namespace). No control socket; fixed seed, so that lane choices repeat run to run.
pub fn start_node(lab: &Lab, addr: Ipv4Addr, seed: u64) -> Result<Node> {
    let mut cfg = NodeConfig::new([IpAddr::V4(addr)]);
    cfg.ctl = CtlMode::Off;
    cfg.seed = Some(seed);
    cfg.name = format!("interop-{addr}");
    lab.in_netns(move || Node::start(cfg))?
        .with_context(|| format!("starting our node on {addr} inside the lab namespace"))
}

/// A socket of `node` bound to `addr`.
pub fn bound_socket(node: &Node, addr: SocketAddr) -> Result<Socket> {
    let s = Socket::with_node(node);
    s.bind(addr).with_context(|| format!("bind {addr}"))?;
    Ok(s)
}

// ---------------------------------------------------------------------------------------------
// The rdstool payload pattern

/// The pattern's mixing function (`mix64` in rdstool.c).
pub fn mix64(mut z: u64) -> u64 {
    z ^= z >> 30;
    z = z.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z ^= z >> 27;
    z = z.wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    z
}

/// The payload of the message with per-socket index `idx` and `size` bytes.
pub fn pattern(idx: u64, size: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(size);
    let mut hdr = [0u8; 16];
    hdr[..8].copy_from_slice(&idx.to_le_bytes());
    hdr[8..12].copy_from_slice(&(size as u32).to_le_bytes());
    hdr[12..].copy_from_slice(b"RDSt");
    v.extend_from_slice(&hdr[..size.min(16)]);
    let base = idx
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add((size as u64).wrapping_mul(0xD1B5_4A32_D192_ED03));
    let mut c = 0u64;
    while v.len() < size {
        let w = mix64(base.wrapping_add(c)).to_le_bytes();
        let n = (size - v.len()).min(8);
        v.extend_from_slice(&w[..n]);
        c += 1;
    }
    v
}

/// rdstool's size schedule for a list: message number `n` (global, over all sockets) has
/// `sizes[n % len]` bytes.
pub fn size_of(sizes: &[usize], n: u64) -> usize {
    sizes[(n % sizes.len() as u64) as usize]
}

/// The size list in rdstool's `-s` syntax (`0,1,4k,...`).
pub fn sizes_arg(sizes: &[usize]) -> String {
    sizes
        .iter()
        .map(|&s| {
            if s >= 1 << 20 && s % (1 << 20) == 0 {
                format!("{}m", s >> 20)
            } else if s >= 1024 && s % 1024 == 0 {
                format!("{}k", s >> 10)
            } else {
                s.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Total payload bytes of messages `0..count` with a size list.
pub fn pattern_bytes(sizes: &[usize], count: u64) -> u64 {
    (0..count).map(|n| size_of(sizes, n) as u64).sum()
}

/// Per-source state of a [`StreamCheck`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceStats {
    /// Next expected per-socket index.
    pub next: u64,
    /// Messages seen.
    pub msgs: u64,
    /// Payload bytes seen.
    pub bytes: u64,
}

/// Checks received pattern messages: per source (address, port) the indexes must run
/// 0, 1, 2, … with exactly the pattern's content; with a size rule also the exact size.
#[derive(Debug, Default)]
pub struct StreamCheck {
    /// Per source.
    pub sources: BTreeMap<SocketAddr, SourceStats>,
    /// Messages seen.
    pub received: u64,
    /// Payload bytes seen.
    pub bytes: u64,
    /// Messages that did not match.
    pub errors: u64,
    /// The first mismatch, described.
    pub first_error: Option<String>,
    /// The expected size of (source port, per-socket index), if checked.
    size_rule: Option<SizeRule>,
}

/// How the sender chose sizes: rdstool `send --sockets K -s LIST` from ports `base..base+K`
/// (message `i` goes out on socket `i % K` as its index `i / K` with size `LIST[i % len]`).
#[derive(Debug, Clone)]
pub struct SizeRule {
    /// First source port.
    pub base_port: u16,
    /// Number of sending sockets.
    pub sockets: u64,
    /// The size list.
    pub sizes: Vec<usize>,
}

impl SizeRule {
    fn size(&self, port: u16, idx: u64) -> Option<usize> {
        let k = u64::from(port.checked_sub(self.base_port)?);
        (k < self.sockets).then(|| size_of(&self.sizes, idx * self.sockets + k))
    }
}

impl StreamCheck {
    /// A checker that also checks sizes.
    pub fn with_sizes(rule: SizeRule) -> Self {
        StreamCheck {
            size_rule: Some(rule),
            ..StreamCheck::default()
        }
    }

    /// Checks one message.
    pub fn push(&mut self, from: SocketAddr, data: &[u8], truncated: bool) {
        let s = self.sources.entry(from).or_default();
        let idx = s.next;
        let why = if truncated {
            Some(format!("truncated message of {} bytes", data.len()))
        } else if let Some(want) = self
            .size_rule
            .as_ref()
            .map(|r| r.size(from.port(), idx))
            .filter(|w| *w != Some(data.len()))
        {
            Some(format!(
                "index {idx}: {} bytes, expected {:?}",
                data.len(),
                want
            ))
        } else if pattern(idx, data.len()) != data {
            let hdr_idx =
                (data.len() >= 8).then(|| u64::from_le_bytes(data[..8].try_into().unwrap()));
            Some(format!(
                "index {idx} ({} bytes): content mismatch, header index {hdr_idx:?}",
                data.len()
            ))
        } else {
            None
        };
        if let Some(w) = why {
            self.errors += 1;
            if self.first_error.is_none() {
                self.first_error = Some(format!("from {from} message #{}: {w}", s.msgs));
            }
            // resynchronise on the index in the header, as rdstool does
            if data.len() >= 8 {
                s.next = u64::from_le_bytes(data[..8].try_into().unwrap());
            }
        }
        s.next += 1;
        s.msgs += 1;
        s.bytes += data.len() as u64;
        self.received += 1;
        self.bytes += data.len() as u64;
    }

    /// One line for reports.
    pub fn summary(&self) -> String {
        format!(
            "received={} bytes={} sources={} errors={}{}",
            self.received,
            self.bytes,
            self.sources.len(),
            self.errors,
            self.first_error
                .as_ref()
                .map(|e| format!(" first_error={e}"))
                .unwrap_or_default()
        )
    }
}

/// `raw_os_error` of an I/O error, or 0.
pub fn errno_of(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

/// Receives `count` messages on `sock` into `check` (blocking, bounded by `deadline`).
/// Congestion notifications are skipped. Fails at the deadline.
pub fn recv_into(
    sock: &Socket,
    check: &mut StreamCheck,
    count: u64,
    deadline: Instant,
) -> Result<()> {
    let mut buf = vec![0u8; MAX_MSG + 1];
    let start = check.received;
    while check.received - start < count {
        let now = Instant::now();
        if now >= deadline {
            bail!(
                "time limit: received {} of {count} messages ({})",
                check.received - start,
                check.summary()
            );
        }
        sock.set_read_timeout(Some((deadline - now).min(Duration::from_millis(500))));
        match sock.recv_msg(&mut buf, RecvFlags::default()) {
            Ok(m) => {
                if let Some(from) = m.from {
                    check.push(from, &buf[..m.len], m.truncated);
                }
            }
            Err(e) if matches!(errno_of(&e), libc::EAGAIN | libc::ETIMEDOUT | libc::EINTR) => {}
            Err(e) => return Err(e).context("recv"),
        }
    }
    Ok(())
}

/// Counts messages arriving on `sock` within `window` (duplicate detection after a stream).
pub fn count_extra(sock: &Socket, window: Duration) -> Result<Vec<(SocketAddr, usize)>> {
    let deadline = Instant::now() + window;
    let mut buf = vec![0u8; MAX_MSG + 1];
    let mut extra = Vec::new();
    for _ in 0..100_000 {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        sock.set_read_timeout(Some(deadline - now));
        match sock.recv_msg(&mut buf, RecvFlags::default()) {
            Ok(m) => {
                if let Some(from) = m.from {
                    extra.push((from, m.len));
                }
            }
            Err(e) if matches!(errno_of(&e), libc::EAGAIN | libc::ETIMEDOUT | libc::EINTR) => {}
            Err(e) => return Err(e).context("recv"),
        }
    }
    Ok(extra)
}

/// What a pattern sender saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SendReport {
    /// Messages sent.
    pub sent: u64,
    /// Payload bytes sent.
    pub bytes: u64,
    /// EAGAIN answers (send buffer full).
    pub eagain: u64,
    /// ENOBUFS answers (destination port congested).
    pub enobufs: u64,
    /// Congestion-update notifications received (with `cong_monitor`).
    pub cong_updates: u64,
    /// Time to send everything.
    pub elapsed: Duration,
}

/// How [`send_pattern`] sends.
#[derive(Debug, Clone)]
pub struct SendPlan {
    /// Destination.
    pub dest: SocketAddr,
    /// Messages in all (message `i` on socket `i % K` as its index `i / K`).
    pub count: u64,
    /// Size list, cycled by message number.
    pub sizes: Vec<usize>,
    /// Non-blocking sends: EAGAIN waits for send room, ENOBUFS waits for a congestion
    /// notification (the sockets must have `cong_monitor` on) and retries.
    pub nonblock: bool,
    /// Pause after every message (pacing, so that reconnects happen mid-stream).
    pub gap: Duration,
    /// Lets another thread hold the sender between two messages.
    pub pause: Option<std::sync::Arc<Pause>>,
}

/// Holds a [`send_pattern`] between two messages: set `want`, wait for `idle`.
#[derive(Debug, Default)]
pub struct Pause {
    /// Requested by the controller.
    pub want: std::sync::atomic::AtomicBool,
    /// The sender is holding.
    pub idle: std::sync::atomic::AtomicBool,
}

impl Pause {
    /// Asks the sender to hold and waits until it does (or finished, or `deadline`).
    pub fn hold(&self, done: &std::sync::atomic::AtomicBool, deadline: Instant) -> Result<()> {
        use std::sync::atomic::Ordering::SeqCst;
        self.want.store(true, SeqCst);
        while !self.idle.load(SeqCst) && !done.load(SeqCst) {
            if Instant::now() >= deadline {
                bail!("the sender did not pause");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    /// Lets the sender go on.
    pub fn release(&self) {
        self.want.store(false, std::sync::atomic::Ordering::SeqCst);
    }

    fn check(&self, deadline: Instant) {
        use std::sync::atomic::Ordering::SeqCst;
        if self.want.load(SeqCst) {
            self.idle.store(true, SeqCst);
            while self.want.load(SeqCst) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            self.idle.store(false, SeqCst);
        }
    }
}

/// Sends rdstool's pattern (the same as `rdstool send --sockets K`) from `socks`.
pub fn send_pattern(socks: &[Socket], plan: &SendPlan, deadline: Instant) -> Result<SendReport> {
    send_pattern_from(socks, plan, 0, deadline)
}

/// [`send_pattern`] from message `first` on (messages `first..plan.count`): the rest of a
/// stream whose first part went out earlier, e.g. with other options.
pub fn send_pattern_from(
    socks: &[Socket],
    plan: &SendPlan,
    first: u64,
    deadline: Instant,
) -> Result<SendReport> {
    let t0 = Instant::now();
    let k = socks.len() as u64;
    let mut r = SendReport::default();
    let mut rbuf = vec![0u8; 64];
    for i in first..plan.count {
        if let Some(p) = &plan.pause {
            p.check(deadline);
        }
        let sock = &socks[(i % k) as usize];
        let size = size_of(&plan.sizes, i);
        let msg = pattern(i / k, size);
        let mut attempts = 0u64;
        loop {
            attempts += 1;
            let now = Instant::now();
            if now >= deadline || attempts > 1_000_000 {
                bail!(
                    "time limit: sent {} of {} messages ({r:?})",
                    r.sent,
                    plan.count
                );
            }
            if !plan.nonblock {
                sock.set_write_timeout(Some(deadline - now));
            }
            let res = if plan.nonblock {
                sock.send_bytes(bytes::Bytes::from(msg.clone()), Some(plan.dest), true)
            } else {
                sock.send_to(&msg, plan.dest)
            };
            match res {
                Ok(n) if n == size => break,
                Ok(n) => bail!("short send: {n} of {size} bytes"),
                Err(e) if plan.nonblock && errno_of(&e) == libc::EAGAIN => {
                    r.eagain += 1;
                    wait_fd(sock.send_fd()?, Duration::from_millis(100));
                }
                Err(e) if plan.nonblock && errno_of(&e) == libc::ENOBUFS => {
                    r.enobufs += 1;
                    // Wait for the congestion-update notification (a 0-byte receive).
                    let wait_until = deadline.min(Instant::now() + Duration::from_secs(30));
                    loop {
                        let now = Instant::now();
                        if now >= wait_until {
                            bail!(
                                "no congestion-update notification within 30 s after ENOBUFS \
                                 (message {i}, {r:?})"
                            );
                        }
                        sock.set_read_timeout(Some(wait_until - now));
                        match sock.recv_msg(&mut rbuf, RecvFlags::default()) {
                            Ok(m) if m.cong_update.is_some() => {
                                r.cong_updates += 1;
                                break;
                            }
                            Ok(m) => bail!(
                                "unexpected {} bytes from {:?} on a sending socket",
                                m.len,
                                m.from
                            ),
                            Err(e) if matches!(errno_of(&e), libc::EAGAIN | libc::ETIMEDOUT) => {}
                            Err(e) => return Err(e).context("waiting for a congestion update"),
                        }
                    }
                }
                Err(e) if !plan.nonblock && errno_of(&e) == libc::ETIMEDOUT => {}
                Err(e) => {
                    return Err(e).with_context(|| format!("sendto {} message {i}", plan.dest))
                }
            }
        }
        r.sent += 1;
        r.bytes += size as u64;
        if !plan.gap.is_zero() {
            std::thread::sleep(plan.gap);
        }
    }
    r.elapsed = t0.elapsed();
    Ok(r)
}

/// Waits until `fd` is readable or `timeout` passes.
pub fn wait_fd(fd: i32, timeout: Duration) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe {
        libc::poll(&mut p, 1, timeout.as_millis().min(60_000) as i32);
    }
}

/// Waits until `node` holds none of the messages of local `port` on `addr` in its send and
/// retransmit queues (TCP-acknowledged, like rdstool's drain wait). Fails at `deadline`.
pub fn drain_wait(node: &Node, addr: SocketAddr, deadline: Instant) -> Result<Duration> {
    let t0 = Instant::now();
    loop {
        let mine = |q: Vec<rds_core::proto::QueuedMsgInfo>| {
            q.iter()
                .filter(|m| m.lport == addr.port() && m.laddr == addr.ip())
                .count()
        };
        let n = mine(node.send_queue()) + mine(node.retrans_queue());
        if n == 0 {
            return Ok(t0.elapsed());
        }
        if Instant::now() >= deadline {
            bail!("{n} messages of {addr} still queued at the time limit");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until `node`'s send queue holds none of the messages of `addr` (transmitted; on
/// RDS/IB acknowledgements may take until the peer sends something). Fails at `deadline`.
pub fn send_queue_wait(node: &Node, addr: SocketAddr, deadline: Instant) -> Result<Duration> {
    let t0 = Instant::now();
    loop {
        let n = node
            .send_queue()
            .iter()
            .filter(|m| m.lport == addr.port() && m.laddr == addr.ip())
            .count();
        if n == 0 {
            return Ok(t0.elapsed());
        }
        if Instant::now() >= deadline {
            bail!("{n} messages of {addr} still in the send queue at the time limit");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

// ---------------------------------------------------------------------------------------------
// rdstool output

/// The `key=value` fields of a line.
pub fn fields(line: &str) -> BTreeMap<String, String> {
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The summary line `CMD: ok …` of an rdstool command's output; an error if it is missing or
/// says FAIL.
pub fn ok_line<'a>(out: &'a str, cmd: &str) -> Result<&'a str> {
    let ok = format!("{cmd}: ok");
    let fail = format!("{cmd}: FAIL");
    if let Some(l) = out.lines().find(|l| l.starts_with(&fail)) {
        bail!("rdstool {cmd} failed: {l}\n{out}");
    }
    out.lines()
        .find(|l| l.starts_with(&ok))
        .ok_or_else(|| anyhow!("no '{ok}' line in:\n{out}"))
}

/// A numeric field of a line.
pub fn field_u64(line: &str, key: &str) -> Result<u64> {
    fields(line)
        .get(key)
        .ok_or_else(|| anyhow!("no {key}= in {line:?}"))?
        .parse()
        .with_context(|| format!("{key}= in {line:?}"))
}

/// `rdstool info counters` output as a map.
pub fn parse_counters(out: &str) -> BTreeMap<String, u64> {
    out.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let (n, v) = (w.next()?, w.next()?);
            Some((n.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// One line of `rdstool info conns`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelConn {
    /// Local address.
    pub laddr: Ipv4Addr,
    /// Peer address.
    pub faddr: Ipv4Addr,
    /// Next sequence number to send (path 0).
    pub next_tx: u64,
    /// Next sequence number expected (path 0).
    pub next_rx: u64,
    /// Transport name.
    pub transport: String,
    /// Flags: 0x01 sending, 0x02 connecting, 0x04 connected.
    pub flags: u8,
}

/// `rdstool info conns` output.
pub fn parse_conns(out: &str) -> Vec<KernelConn> {
    out.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            if w.len() < 6 {
                return None;
            }
            Some(KernelConn {
                laddr: w[0].parse().ok()?,
                faddr: w[1].parse().ok()?,
                next_tx: w[2].parse().ok()?,
                next_rx: w[3].parse().ok()?,
                transport: w[4].to_string(),
                flags: u8::from_str_radix(w[5].trim_start_matches("0x"), 16).ok()?,
            })
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The kernel selftest traffic: our endpoint (replica of `rdstool selftest-peer`)

/// Sender endpoint of message `n`.
pub fn st_sender(n: u64) -> usize {
    (n % 2) as usize
}

/// Receiver endpoint of message `n`.
pub fn st_receiver(n: u64) -> usize {
    1 - ((n % 3) % 2) as usize
}

/// Payload of message `n`: the 64 ASCII hex characters of `sha256("packet n")`.
pub fn st_payload(n: u64) -> [u8; 64] {
    let d = Sha256::digest(format!("packet {n}").as_bytes());
    let mut out = [0u8; 64];
    out.copy_from_slice(hex(&d).as_bytes());
    out
}

/// Lower-case hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn st_hash(h: &mut Sha256, data: &[u8]) {
    // test.py hashes f"<{data}>" of the bytes object: "<b'HEX'>"
    h.update(b"<b'");
    h.update(data);
    h.update(b"'>");
}

fn st_next_for(mut n: u64, me: usize, total: u64) -> u64 {
    loop {
        n += 2;
        if n >= total || st_receiver(n) == me {
            return n;
        }
    }
}

/// Options of our selftest endpoint; the same meaning as `rdstool selftest-peer`'s.
#[derive(Debug, Clone)]
pub struct SelftestConfig {
    /// Our endpoint (0 or 1).
    pub me: usize,
    /// Both endpoints.
    pub ep: [SocketAddr; 2],
    /// Messages in all.
    pub total: u64,
    /// Barrier (and reset by the leader) after every this many messages; 0 = none.
    pub reset_every: u64,
    /// Leader role; `None`: the endpoint with the larger address (then port) leads.
    pub leader: Option<bool>,
    /// Values the leader's resets alternate between.
    pub reset_values: [u32; 2],
    /// Time limit.
    pub timeout: Duration,
}

/// A digest line: message count and SHA-256 hex.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Digest64 {
    /// Messages hashed.
    pub count: u64,
    /// Hex digest.
    pub hex: String,
}

/// What our endpoint reports (the same lines as rdstool's).
#[derive(Debug, Clone, Default)]
pub struct SelftestReport {
    /// `send me r`: what we sent to endpoint r.
    pub send: [Digest64; 2],
    /// `recv s me`: what we received from endpoint s.
    pub recv: [Digest64; 2],
    /// `expect s me`: what we must receive from endpoint s.
    pub expect: [Digest64; 2],
    /// Out-of-order, duplicate, missing or foreign messages.
    pub errors: u64,
    /// Duplicates / gaps / missing / foreign per sender.
    pub diag: [[u64; 4]; 2],
    /// Resets we performed.
    pub resets: u64,
    /// Rounds completed.
    pub rounds: u64,
    /// EAGAIN answers.
    pub eagain: u64,
    /// ENOBUFS answers.
    pub enobufs: u64,
    /// Control messages seen again.
    pub ctl_dups: u64,
    /// Pongs received.
    pub pongs: u64,
    /// Time from start to finish.
    pub elapsed: Duration,
    /// Time spent in barriers.
    pub barrier: Duration,
    /// Whether the traffic ran to its end (every message sent, every expected one seen).
    pub complete: bool,
    /// Whether our send and retransmit queues emptied at the end.
    pub drained: bool,
    /// Whether everything passed.
    pub ok: bool,
    /// Why not.
    pub reason: String,
}

impl SelftestReport {
    /// rdstool-style output lines.
    pub fn lines(&self, me: usize) -> String {
        let mut s = String::new();
        for r in 0..2 {
            s += &format!(
                "send {me} {r} {} {}\n",
                self.send[r].count, self.send[r].hex
            );
        }
        for x in 0..2 {
            s += &format!(
                "recv {x} {me} {} {}\n",
                self.recv[x].count, self.recv[x].hex
            );
        }
        for x in 0..2 {
            s += &format!(
                "expect {x} {me} {} {}\n",
                self.expect[x].count, self.expect[x].hex
            );
        }
        s += &format!(
            "selftest-peer(ours): {} me={me} errors={} resets={} rounds={} eagain={} enobufs={} \
             ctl_dups={} pongs={} elapsed_ms={} barrier_ms={}{}\n",
            if self.ok { "ok" } else { "FAIL" },
            self.errors,
            self.resets,
            self.rounds,
            self.eagain,
            self.enobufs,
            self.ctl_dups,
            self.pongs,
            self.elapsed.as_millis(),
            self.barrier.as_millis(),
            if self.reason.is_empty() {
                String::new()
            } else {
                format!(" reason={}", self.reason)
            }
        );
        s
    }
}

/// Parses rdstool's `send S R COUNT HEX` / `recv S R COUNT HEX` / `expect S R COUNT HEX`.
pub fn parse_digest(out: &str, kind: &str, s: usize, r: usize) -> Option<Digest64> {
    let prefix = format!("{kind} {s} {r} ");
    out.lines().find_map(|l| {
        let rest = l.strip_prefix(&prefix)?;
        let (c, h) = rest.split_once(' ')?;
        Some(Digest64 {
            count: c.parse().ok()?,
            hex: h.trim().to_string(),
        })
    })
}

#[derive(Default)]
struct Ctl {
    got_hello: bool,
    got_hello_ack: bool,
    got_ready: i64,
    got_go: i64,
    got_go_ack: i64,
    acked_go: i64,
    dups: u64,
    pongs: u64,
}

#[derive(PartialEq, Eq, Clone, Copy, Debug)]
enum Phase {
    Hello,
    Run,
    Drain,
    WaitReady,
    WaitGo,
    Settle,
    Finish,
}

/// Runs our endpoint of the selftest traffic on `sock` (bound to `cfg.ep[cfg.me]`, served by
/// `node`). `reset(value)` is the leader's reset (it must drop every RDS/TCP connection of
/// our node). Follows `rdstool selftest-peer`'s schedule and barrier exactly.
pub fn selftest_peer(
    node: &Node,
    sock: &Socket,
    cfg: &SelftestConfig,
    reset: &mut dyn FnMut(u32),
) -> SelftestReport {
    let me = cfg.me;
    let peer = 1 - me;
    let ep = cfg.ep;
    let total = cfg.total;
    let leader = cfg.leader.unwrap_or_else(|| {
        let key = |a: SocketAddr| match a.ip() {
            IpAddr::V4(v) => (u32::from(v), a.port()),
            IpAddr::V6(_) => (0, a.port()),
        };
        (key(ep[1]) > key(ep[0])) == (me == 1)
    });
    let round_size = if cfg.reset_every > 0 {
        cfg.reset_every
    } else {
        total
    };
    sock.set_nonblocking(true);
    let t0 = Instant::now();
    let deadline = t0 + cfg.timeout;
    let mut rep = SelftestReport::default();

    // digests
    let mut h_send = [Sha256::new(), Sha256::new()];
    let mut h_recv = [Sha256::new(), Sha256::new()];
    let mut h_expect = [Sha256::new(), Sha256::new()];
    let mut table: HashMap<[u8; 64], u64> = HashMap::with_capacity(total as usize);
    for n in 0..total {
        let p = st_payload(n);
        table.insert(p, n);
        if st_receiver(n) == me {
            let s = st_sender(n);
            st_hash(&mut h_expect[s], &p);
            rep.expect[s].count += 1;
        }
    }
    let mut next_send = me as u64;
    let mut exp_next = [0u64; 2];
    for (s, e) in exp_next.iter_mut().enumerate() {
        *e = s as u64;
        if st_receiver(*e) != me {
            *e = st_next_for(*e, me, total);
        }
    }
    let mut ctl = Ctl {
        got_ready: -1,
        got_go: -1,
        got_go_ack: -1,
        acked_go: -1,
        ..Ctl::default()
    };
    let send_ctl = |kind: &str, round: i64| -> bool {
        let m = if round >= 0 {
            format!("ctl:{kind}:{round}")
        } else {
            format!("ctl:{kind}")
        };
        sock.send_to(m.as_bytes(), ep[peer]).is_ok()
    };
    let ping = || {
        let _ = sock.send_to(&[], SocketAddr::new(ep[peer].ip(), 0));
    };
    let mut phase = Phase::Hello;
    let mut round: u64 = 0;
    let mut hello_next = t0;
    let mut ping_next = t0;
    let mut go_next = t0;
    let mut go_pending: i64 = -1;
    let mut settle_pongs = 0u64;
    let mut t_barrier = t0;
    let mut fatal = false;
    let mut drained_ok = true;
    let mut first_err = String::new();
    let mut sent_total = 0u64;
    let mut recv_total = 0u64;
    let mut rbuf = vec![0u8; 2048];
    let rx_fd = sock.fd().ok();
    let tx_fd = sock.send_fd().ok();

    for _loop in 0..1_000_000_000u64 {
        if phase == Phase::Finish {
            break;
        }
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        let lo = round * round_size;
        let hi = (lo + round_size).min(total);
        let mut want_out = false;
        let mut block = 0;

        if phase == Phase::Hello {
            if (leader && ctl.got_hello_ack) || (!leader && ctl.got_hello) {
                phase = Phase::Run;
            } else if leader && now >= hello_next {
                send_ctl("hello", -1);
                hello_next = now + Duration::from_millis(300);
            }
        }
        if phase == Phase::Run {
            while next_send < hi {
                let n = next_send;
                let r = st_receiver(n);
                let p = st_payload(n);
                match sock.send_to(&p, ep[r]) {
                    Ok(64) => {
                        st_hash(&mut h_send[r], &p);
                        rep.send[r].count += 1;
                        sent_total += 1;
                        next_send += 2;
                    }
                    Ok(w) => {
                        first_err = format!("short send of packet {n}: {w}");
                        fatal = true;
                        break;
                    }
                    Err(e) => {
                        match errno_of(&e) {
                            libc::EAGAIN | libc::ECONNRESET | libc::EPIPE | libc::EINTR => {
                                if errno_of(&e) == libc::EAGAIN {
                                    rep.eagain += 1;
                                }
                                want_out = true;
                                block = 1;
                            }
                            libc::ENOBUFS => {
                                rep.enobufs += 1;
                                block = 2;
                            }
                            _ => {
                                first_err = format!("sendto packet {n}: {e}");
                                fatal = true;
                            }
                        }
                        break;
                    }
                }
            }
            if fatal {
                break;
            }
            if next_send >= hi && exp_next[0] >= hi && exp_next[1] >= hi {
                if hi >= total {
                    if go_pending < 0 {
                        phase = Phase::Finish;
                        break;
                    }
                } else {
                    phase = Phase::Drain;
                    t_barrier = Instant::now();
                }
            }
        }
        if phase == Phase::Drain {
            if drain_wait(node, ep[me], deadline).is_err() {
                drained_ok = false;
                break;
            }
            if leader {
                phase = Phase::WaitReady;
            } else if !send_ctl("ready", round as i64) {
                std::thread::sleep(Duration::from_millis(2));
                continue;
            } else {
                phase = Phase::WaitGo;
            }
        }
        if phase == Phase::WaitReady && ctl.got_ready >= round as i64 {
            if cfg.reset_every > 0 {
                reset(cfg.reset_values[(rep.resets % 2) as usize]);
                rep.resets += 1;
            }
            phase = Phase::Settle;
            settle_pongs = ctl.pongs;
            ping_next = Instant::now();
        }
        if phase == Phase::WaitGo && ctl.got_go >= round as i64 {
            phase = Phase::Settle;
            settle_pongs = ctl.pongs;
            ping_next = Instant::now();
        }
        if phase == Phase::Settle {
            if ctl.pongs > settle_pongs {
                if leader {
                    go_pending = round as i64;
                    go_next = Instant::now();
                } else {
                    send_ctl("go-ack", round as i64);
                    ctl.acked_go = round as i64;
                }
                rep.barrier += t_barrier.elapsed();
                round += 1;
                phase = Phase::Run;
                continue;
            }
            if Instant::now() >= ping_next {
                ping();
                ping_next = Instant::now() + Duration::from_millis(200);
            }
        }
        if go_pending >= 0 {
            if ctl.got_go_ack >= go_pending {
                go_pending = -1;
            } else if Instant::now() >= go_next {
                send_ctl("go", go_pending);
                go_next = Instant::now() + Duration::from_millis(300);
            }
        }

        // wait for input (or send room)
        let mut wait_ms = if block == 2 {
            5
        } else if phase == Phase::Run && next_send < hi && block == 0 {
            0
        } else {
            50
        };
        if phase == Phase::Hello || phase == Phase::Settle || go_pending >= 0 {
            wait_ms = 20;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let wait = Duration::from_millis(wait_ms).min(left);
        if !wait.is_zero() {
            let mut pfds = Vec::with_capacity(2);
            if let Some(fd) = rx_fd {
                pfds.push(libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
            if want_out {
                if let Some(fd) = tx_fd {
                    pfds.push(libc::pollfd {
                        fd,
                        events: libc::POLLIN,
                        revents: 0,
                    });
                }
            }
            // SAFETY: valid pollfd array for the duration of the call.
            unsafe {
                libc::poll(
                    pfds.as_mut_ptr(),
                    pfds.len() as libc::nfds_t,
                    wait.as_millis() as i32,
                );
            }
        }

        for _ in 0..100_000 {
            let m = match sock.recv_msg(
                &mut rbuf,
                RecvFlags {
                    dontwait: true,
                    ..RecvFlags::default()
                },
            ) {
                Ok(m) => m,
                Err(_) => break,
            };
            let Some(from) = m.from else { continue };
            let data = &rbuf[..m.len];
            if m.len == 0 && from.port() == 0 && from.ip() == ep[peer].ip() {
                ctl.pongs += 1;
                continue;
            }
            let Some(s) = (0..2).find(|&i| ep[i] == from) else {
                rep.errors += 1;
                if first_err.is_empty() {
                    first_err = format!("message from unknown source {from}");
                }
                continue;
            };
            if m.len < 64 && m.len >= 4 && data.starts_with(b"ctl:") {
                on_ctl(&mut ctl, data, &send_ctl);
                continue;
            }
            st_hash(&mut h_recv[s], data);
            rep.recv[s].count += 1;
            recv_total += 1;
            if exp_next[s] < total
                && m.len == 64
                && !m.truncated
                && st_payload(exp_next[s])[..] == *data
            {
                exp_next[s] = st_next_for(exp_next[s], me, total);
                continue;
            }
            let expected = exp_next[s];
            rep.errors += 1;
            let x = if m.len == 64 {
                table.get(<&[u8; 64]>::try_from(data).unwrap()).copied()
            } else {
                None
            };
            let what = match x {
                None => {
                    rep.diag[s][3] += 1;
                    format!("{} bytes that are no packet of this test", m.len)
                }
                Some(x) if st_sender(x) != s || st_receiver(x) != me => {
                    rep.diag[s][3] += 1;
                    format!(
                        "packet {x} (sender {}, receiver {})",
                        st_sender(x),
                        st_receiver(x)
                    )
                }
                Some(x) if x < exp_next[s] => {
                    rep.diag[s][0] += 1;
                    format!("packet {x} again (duplicate or late)")
                }
                Some(x) => {
                    let mut miss = 0;
                    let mut n = exp_next[s];
                    while n < x {
                        miss += 1;
                        n = st_next_for(n, me, total);
                    }
                    rep.diag[s][1] += 1;
                    rep.diag[s][2] += miss;
                    exp_next[s] = st_next_for(x, me, total);
                    format!("packet {x} ({miss} skipped)")
                }
            };
            if first_err.is_empty() {
                first_err = format!(
                    "from endpoint {s}, its message #{}: expected packet {expected}, got {what}",
                    rep.recv[s].count - 1
                );
            }
        }
    }
    if !fatal && drained_ok && sent_total > 0 {
        let dl = deadline + Duration::from_secs(10);
        // On RDS/IB the retransmit queue empties only when the peer happens to acknowledge
        // (it acknowledges ACK_REQUIRED messages only, or piggybacks on its own traffic), so
        // there, as rdstool does, only the send queue is waited for.
        drained_ok = if sock.transport() == Some(rds_core::proto::TransportKind::Ib) {
            send_queue_wait(node, ep[me], dl).is_ok()
        } else {
            drain_wait(node, ep[me], dl).is_ok()
        };
    }
    let fin = |h: &Sha256| hex(&h.clone().finalize());
    for i in 0..2 {
        rep.send[i].hex = fin(&h_send[i]);
        rep.recv[i].hex = fin(&h_recv[i]);
        rep.expect[i].hex = fin(&h_expect[i]);
    }
    let complete = phase == Phase::Finish;
    let digests_ok = (0..2).all(|s| rep.recv[s] == rep.expect[s]);
    rep.ok = !fatal && complete && rep.errors == 0 && digests_ok && drained_ok;
    rep.complete = !fatal && complete;
    rep.drained = drained_ok;
    rep.rounds = round + u64::from(complete);
    rep.ctl_dups = ctl.dups;
    rep.pongs = ctl.pongs;
    rep.elapsed = t0.elapsed();
    if first_err.is_empty() && !complete {
        first_err = format!(
            "time limit in {phase:?} (round {round}): sent {sent_total} of {}, received \
             {recv_total} of {}",
            (total + 1 - me as u64) / 2,
            rep.expect[0].count + rep.expect[1].count
        );
    }
    if first_err.is_empty() && !drained_ok {
        first_err = "send queue not drained".into();
    }
    if first_err.is_empty() && !digests_ok {
        first_err = "digest mismatch".into();
    }
    rep.reason = first_err;
    rep
}

fn on_ctl(c: &mut Ctl, data: &[u8], send_ctl: &dyn Fn(&str, i64) -> bool) {
    let m = String::from_utf8_lossy(data);
    let num = |p: &str| m.strip_prefix(p).and_then(|v| v.parse::<i64>().ok());
    if m == "ctl:hello" {
        if c.got_hello {
            c.dups += 1;
        }
        c.got_hello = true;
        send_ctl("hello-ack", -1);
    } else if m == "ctl:hello-ack" {
        c.got_hello_ack = true;
    } else if let Some(v) = num("ctl:ready:") {
        if v <= c.got_ready {
            c.dups += 1;
        } else {
            c.got_ready = v;
        }
    } else if let Some(v) = num("ctl:go-ack:") {
        if v <= c.got_go_ack {
            c.dups += 1;
        } else {
            c.got_go_ack = v;
        }
    } else if let Some(v) = num("ctl:go:") {
        if v <= c.got_go {
            c.dups += 1;
            if v <= c.acked_go {
                send_ctl("go-ack", v);
            }
        } else {
            c.got_go = v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_matches_rdstool() {
        // `rdstool pattern 3 40`
        assert_eq!(
            hex(&pattern(3, 40)),
            "0300000000000000280000005244537441785aeae247486b229836e331564b8dbb8ed829fabf5d2f"
        );
        // `rdstool pattern 7 100`
        assert_eq!(
            hex(&pattern(7, 100)),
            "07000000000000006400000052445374cc23647962420d20fa9c0bcc67e813b2bc0932df3a081575\
             23be4e537d9c824d59cde5bcaea186afe43a57d11df7248ef19cf4a849b123caecd75591986bbdad\
             bd4e85d4ebd531bd817d3410c5b032d458c692d0"
        );
        assert_eq!(pattern(0, 0), Vec::<u8>::new());
        assert_eq!(pattern(9, 1), vec![9]);
    }

    #[test]
    fn selftest_schedule_and_payload() {
        // test.py: 0->1, 1->0, 0->1, 1->1, 0->0, 1->1
        let pairs: Vec<(usize, usize)> = (0..6).map(|n| (st_sender(n), st_receiver(n))).collect();
        assert_eq!(pairs, [(0, 1), (1, 0), (0, 1), (1, 1), (0, 0), (1, 1)]);
        // `rdstool sha256 "packet 0"`
        assert_eq!(
            &st_payload(0),
            b"afdbfae291e4d8ba25853e610ecb1901b7200f875c8dff550c4a8c2dc366a8aa"
        );
        assert_eq!(sizes_arg(&[0, 1, 4096, 65536, 1 << 20]), "0,1,4k,64k,1m");
    }

    #[test]
    fn stream_check_detects_gaps_and_duplicates() {
        let from: SocketAddr = "198.18.0.2:4000".parse().unwrap();
        let mut c = StreamCheck::with_sizes(SizeRule {
            base_port: 4000,
            sockets: 1,
            sizes: vec![20, 30],
        });
        c.push(from, &pattern(0, 20), false);
        c.push(from, &pattern(1, 30), false);
        assert_eq!(c.errors, 0);
        c.push(from, &pattern(1, 30), false); // duplicate
        assert_eq!(c.errors, 1);
        c.push(from, &pattern(3, 30), false); // resynchronised at 2: gap
        assert_eq!(c.errors, 2);
        assert_eq!(c.received, 4);
    }

    #[test]
    fn parsers() {
        let out = "recv: bound 198.18.0.2:4000 transport=tcp\nsource 198.18.0.1:4001 msgs=3 \
                   bytes=7\nrecv: ok received=3 bytes=7 sources=1 errors=0 extra=0\n";
        let l = ok_line(out, "recv").unwrap();
        assert_eq!(field_u64(l, "received").unwrap(), 3);
        assert!(ok_line("send: FAIL sent=1 reason=x", "send").is_err());
        let c = parse_conns("198.18.0.2 198.18.0.1 12 7 tcp 0x04 0\n");
        assert_eq!(c[0].faddr, Ipv4Addr::new(198, 18, 0, 1));
        assert_eq!((c[0].next_tx, c[0].next_rx, c[0].flags), (12, 7, 4));
        let k = parse_counters("conn_reset 3\nrecv_drop_bad_checksum 0\n");
        assert_eq!(k["conn_reset"], 3);
        let d = parse_digest("send 1 0 5 abcd\n", "send", 1, 0).unwrap();
        assert_eq!((d.count, d.hex.as_str()), (5, "abcd"));
    }
}
