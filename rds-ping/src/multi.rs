//! The several-destination form: every destination pinged in parallel from shared sockets
//! ([`crate::pool`]), each with the one-destination form's rules: a ping every `-i`, `-c`
//! pings, one ping at a time per slot (a slot whose ping is unanswered is skipped at its
//! turn), a ping lost after `-W`, and a destination given up on after
//! [`GIVE_UP_AFTER_LOST`] lost pings without any reply, or at once when its RDS/TCP
//! connection is refused (seen on an embedded node). `-w` and Ctrl-C end the whole run. No
//! reply line is printed; the caller prints one line per destination.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use rds_core::info::PathState;
use rds_core::RecvFlags;

use crate::opts::Opts;
use crate::ping::{
    announce, give_up_message, refused_count, refused_message, route_source, Fatal, Io,
    GIVE_UP_AFTER_LOST, MAX_WAIT,
};
use crate::pool::{Pool, SockId};
use crate::report::{self, Rtt, Summary};
use crate::targets::canonical;

/// Longest spread of the first pings over the destinations (less when `-i` is shorter), so
/// that a long list does not start with one burst of connections.
const START_SPREAD: Duration = Duration::from_millis(100);

/// One ping at a time of a destination, through one socket.
struct Slot {
    sock: SockId,
    pending: bool,
    sent_id: u64,
    sent_at: Instant,
    nreplies: u32,
}

struct Target {
    group: usize,
    addr: IpAddr,
    sum: Summary,
    rtts: Vec<u64>,
    /// Replies including duplicates (the original's `recv`, which `-c` counts).
    recv_all: u64,
    slots: Vec<Slot>,
    /// Sockets where one of its pings was lost (still open ones).
    burned: Vec<SockId>,
    next: usize,
    next_send: Instant,
    /// When pinging it ended.
    ended: Option<Instant>,
    told_error: bool,
}

impl Target {
    fn done(&self) -> bool {
        self.ended.is_some()
    }

    fn finish(&mut self, now: Instant, why: Option<&str>) {
        if self.ended.is_none() {
            self.ended = Some(now);
            self.sum.stopped = why.map(str::to_string);
        }
    }

    fn all_sent(&self, count: u64) -> bool {
        count > 0 && self.sum.transmitted >= count
    }
}

/// Descriptors an embedded node may take per destination: up to 8 TCP lanes, and room for a
/// reconnect's new lanes while old ones drain.
const FDS_PER_DEST: u64 = 16;
/// Descriptors besides the destinations' connections: sockets, the node's own, stdio.
const FDS_BASE: u64 = 256;

/// Raises the soft limit of open files towards the hard one when `dests` destinations may
/// need more (an embedded node opens up to 8 TCP connections to each peer, and the soft
/// limit is often 1024). Returns what they may need and the limit, when the limit stays
/// below.
fn raise_fd_limit(dests: usize) -> Option<(u64, u64)> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let want = FDS_BASE + FDS_PER_DEST * dests as u64;
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft >= want {
        return None;
    }
    let raised = want.min(hard);
    let now = match setrlimit(Resource::RLIMIT_NOFILE, raised, hard) {
        Ok(()) => raised,
        Err(_) => soft,
    };
    (now < want).then_some((want, now))
}

/// Pings every destination of `opts` and returns their totals, in the order given.
///
/// # Errors
/// Route lookups and socket setup (the original's messages), `poll` failures.
pub fn run(opts: &Opts, io: &mut Io<'_>) -> Result<Vec<Summary>, Fatal> {
    if let Some((want, limit)) = raise_fd_limit(opts.dests.len()) {
        let _ = writeln!(
            io.err,
            "rds-ping: {} destinations may need up to {want} open files, more than the limit \
             of {limit} (ulimit -n): some may not connect",
            opts.dests.len()
        );
    }
    // Sources: -I, else each destination's route; one group of sockets per source.
    let mut srcs: Vec<IpAddr> = Vec::new();
    let mut group_of = Vec::with_capacity(opts.dests.len());
    for d in &opts.dests {
        let src = match opts.source {
            Some(s) => s,
            None => route_source(d.addr)?,
        };
        let g = match srcs.iter().position(|&s| s == src) {
            Some(g) => g,
            None => {
                srcs.push(src);
                srcs.len() - 1
            }
        };
        group_of.push(g);
    }
    let (mut pool, initial) = Pool::open(&srcs, opts.sockets)?;
    let start = Instant::now();
    let n = opts.dests.len() as u32;
    let spread = START_SPREAD.min(opts.interval);
    let mut targets: Vec<Target> = Vec::with_capacity(opts.dests.len());
    let mut by_addr: HashMap<IpAddr, usize> = HashMap::new();
    for (i, (d, &g)) in opts.dests.iter().zip(&group_of).enumerate() {
        let slots = initial[g]
            .iter()
            .map(|&sock| {
                pool.hold(sock);
                Slot {
                    sock,
                    pending: false,
                    sent_id: 0,
                    sent_at: start,
                    nreplies: 0,
                }
            })
            .collect();
        by_addr.insert(d.addr, i);
        by_addr.insert(canonical(d.addr), i);
        targets.push(Target {
            group: g,
            addr: d.addr,
            sum: Summary {
                destination: d.name.clone(),
                address: d.addr.to_string(),
                source: srcs[g].to_string(),
                ..Summary::default()
            },
            rtts: Vec::new(),
            recv_all: 0,
            slots,
            burned: Vec::new(),
            next: 0,
            next_send: start + spread * (i as u32) / n,
            ended: None,
            told_error: false,
        });
    }
    let node = pool
        .fds()
        .first()
        .and_then(|&(id, _)| pool.get(id))
        .and_then(|s| s.node().cloned());
    if opts.verbose {
        announce(node.as_ref());
    }
    let mut refused_seen = refused_count(node.as_ref());
    let mut hinted = false;
    let mut recv_failed = false;
    let end = opts.deadline.map(|d| start + d);
    loop {
        let now = Instant::now();
        if (io.stop)() {
            targets
                .iter_mut()
                .for_each(|t| t.finish(now, Some("interrupted")));
            break;
        }
        if end.is_some_and(|e| now >= e) {
            targets
                .iter_mut()
                .for_each(|t| t.finish(now, Some("deadline")));
            break;
        }
        for t in targets.iter_mut().filter(|t| !t.done()) {
            expire(opts, &mut pool, t, now, io)?;
        }
        // A refused connection: the destinations that never answered and whose connection
        // never came up and is waiting to reconnect.
        let refused = refused_count(node.as_ref());
        if refused > refused_seen {
            refused_seen = refused;
            if let Some(n) = &node {
                let conns = n.connections();
                for t in targets.iter_mut().filter(|t| !t.done()) {
                    let src: IpAddr = srcs[t.group];
                    if t.recv_all == 0 && t.sum.transmitted > 0 && never_up(&conns, src, t.addr) {
                        let _ = writeln!(io.err, "{}", refused_message(t.addr));
                        t.sum.timed_out += t.slots.iter().filter(|s| s.pending).count() as u64;
                        t.slots.iter_mut().for_each(|s| s.pending = false);
                        t.finish(now, Some("refused"));
                        cancel(&pool, t);
                    }
                }
            }
        }
        if targets.iter().all(Target::done) {
            break;
        }
        for t in targets.iter_mut().filter(|t| !t.done()) {
            if t.all_sent(opts.count) || now < t.next_send {
                continue;
            }
            t.next_send = now + opts.interval;
            let slot = &mut t.slots[t.next];
            if slot.pending {
                continue;
            }
            t.sum.transmitted += 1;
            slot.sent_id = t.sum.transmitted;
            slot.sent_at = Instant::now();
            slot.nreplies = 0;
            let sent = match pool.get(slot.sock) {
                Some(s) => s.send_to(&[], SocketAddr::new(t.addr, 0)),
                None => Err(io::Error::from_raw_os_error(libc::EBADF)),
            };
            match sent {
                Ok(_) => slot.pending = true,
                Err(e) => {
                    let errno = e.raw_os_error().unwrap_or(libc::EIO);
                    t.sum.errors += 1;
                    if !t.told_error {
                        t.told_error = true;
                        let _ = writeln!(
                            io.err,
                            "rds-ping: {}: ping {}: ERROR: {}",
                            t.sum.destination,
                            slot.sent_id,
                            rds_core::errno::strerror(errno)
                        );
                    }
                    if errno == libc::EINVAL && !hinted {
                        hinted = true;
                        let _ = writeln!(io.err, "{}", report::EINVAL_HINT);
                    }
                }
            }
            t.next = (t.next + 1) % t.slots.len();
        }
        // Wait for replies until the next send, a timeout, the deadline or a stop check.
        let now = Instant::now();
        let mut until = now + MAX_WAIT;
        if let Some(e) = end {
            until = until.min(e);
        }
        for t in targets.iter().filter(|t| !t.done()) {
            if !t.all_sent(opts.count) {
                until = until.min(t.next_send);
            }
            for s in t.slots.iter().filter(|s| s.pending) {
                until = until.min(s.sent_at + opts.timeout);
            }
        }
        let socks = pool.fds();
        let mut fds: Vec<_> = socks.iter().map(|&(_, fd)| fd).collect();
        fds.extend(io.stop_fd);
        let ready = rds_core::poll_readable(&fds, until.saturating_duration_since(now))
            .map_err(|e| crate::ping::die_errno("poll() failed", &e))?;
        for (&(id, _), _) in socks.iter().zip(&ready).filter(|(_, &r)| r) {
            let Some(sock) = pool.get(id) else { continue };
            loop {
                let flags = RecvFlags {
                    dontwait: true,
                    ..RecvFlags::default()
                };
                match sock.recv_msg(&mut [], flags) {
                    Ok(m) => {
                        let from = m.from.map(|f| canonical(f.ip()));
                        if let Some(t) =
                            from.and_then(|a| by_addr.get(&a)).map(|&i| &mut targets[i])
                        {
                            pong(t, id);
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        // Not a reply of one destination: an error of each that waits for a
                        // pong on this socket.
                        let errno = e.raw_os_error().unwrap_or(libc::EIO);
                        if !recv_failed {
                            recv_failed = true;
                            let _ = writeln!(
                                io.err,
                                "rds-ping: receive failed: {}",
                                rds_core::errno::strerror(errno)
                            );
                        }
                        for t in targets.iter_mut().filter(|t| !t.done()) {
                            if t.slots.iter().any(|s| s.sock == id && s.pending) {
                                t.sum.errors += 1;
                            }
                        }
                        break;
                    }
                }
            }
        }
    }
    Ok(targets
        .into_iter()
        .map(|t| {
            let mut sum = t.sum;
            sum.time_ms = report::millis(t.ended.unwrap_or_else(Instant::now) - start);
            sum.loss_percent = report::loss_percent(sum.transmitted, sum.received);
            sum.rtt_us = Rtt::of(&t.rtts);
            sum
        })
        .collect())
}

/// A pong from `t` on socket `id`: the reply of the ping its slot on that socket sent last
/// (a second one is a duplicate). None of its slots is on that socket when the ping it
/// answers was lost: ignored, as is anything once `t` is done.
fn pong(t: &mut Target, id: SockId) {
    if t.done() {
        return;
    }
    let Some(s) = t.slots.iter_mut().find(|s| s.sock == id) else {
        return;
    };
    if s.sent_id == 0 {
        return;
    }
    let rtt = u64::try_from(s.sent_at.elapsed().as_micros()).unwrap_or(u64::MAX);
    let dup = s.nreplies > 0;
    s.nreplies += 1;
    s.pending = false;
    t.recv_all += 1;
    if dup {
        t.sum.duplicates += 1;
    } else {
        t.sum.received += 1;
        t.rtts.push(rtt);
    }
}

/// Lost pings of `t` (no reply within `-W`): counted, their slots moved to other sockets
/// while more pings are to be sent; the give-up; the end of its count.
fn expire(
    opts: &Opts,
    pool: &mut Pool,
    t: &mut Target,
    now: Instant,
    io: &mut Io<'_>,
) -> Result<(), Fatal> {
    if opts.count > 0 && t.recv_all >= opts.count {
        t.finish(now, None);
        return Ok(());
    }
    for k in 0..t.slots.len() {
        let s = &t.slots[k];
        if !s.pending || now.duration_since(s.sent_at) < opts.timeout {
            continue;
        }
        t.sum.timed_out += 1;
        t.slots[k].pending = false;
        if opts.count == 0 || t.sum.transmitted < opts.count {
            let old = t.slots[k].sock;
            t.burned.push(old);
            t.burned.retain(|&b| pool.is_open(b));
            let mut avoid: Vec<SockId> = t.slots.iter().map(|s| s.sock).collect();
            avoid.extend(&t.burned);
            let new = pool.replace(t.group, old, &avoid)?;
            t.slots[k].sock = new;
            t.slots[k].sent_id = 0;
            t.burned.retain(|&b| pool.is_open(b));
        }
        if t.recv_all == 0 && t.sum.timed_out >= GIVE_UP_AFTER_LOST {
            let _ = writeln!(
                io.err,
                "{}",
                give_up_message(t.addr, t.sum.timed_out, opts.timeout)
            );
            t.finish(now, Some("no reply"));
            cancel(pool, t);
            return Ok(());
        }
    }
    if t.all_sent(opts.count) && !t.slots.iter().any(|s| s.pending) {
        t.finish(now, None);
    }
    Ok(())
}

/// Drops the pings of `t` still queued (a peer given up on is not redialled for them).
fn cancel(pool: &Pool, t: &Target) {
    for s in pool.of_group(t.group) {
        let _ = s.cancel_sent_to(SocketAddr::new(t.addr, 0));
    }
}

/// Whether the node's connection from `src` to `dst` never came up and is waiting to
/// reconnect (what a refused connection leaves; a connection still trying is not counted).
fn never_up(conns: &[rds_core::info::ConnInfo], src: IpAddr, dst: IpAddr) -> bool {
    let (src, dst) = (canonical(src), canonical(dst));
    let mine: Vec<_> = conns
        .iter()
        .filter(|c| canonical(c.laddr) == src && canonical(c.faddr) == dst)
        .collect();
    !mine.is_empty()
        && mine.iter().all(|c| {
            c.paths.iter().all(|p| p.ups == 0)
                && c.paths
                    .first()
                    .is_some_and(|p| p.state == PathState::Down && p.reconnect_pending)
        })
}
