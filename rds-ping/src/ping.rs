//! The ping loop of the original rds-ping, with a reply timeout, a deadline and a give-up.
//!
//! Each of N sockets is bound to the source address with a random port; a ping is a
//! zero-length message from one of them to port 0 of the destination, whose RDS stack answers
//! with a zero-length pong to that socket's port. A socket carries one ping at a time, so its
//! replies identify the ping. As in the original, a socket whose ping is unanswered is skipped
//! (nothing is sent that tick); unlike it, the ping counts as lost after the reply timeout and
//! the socket is replaced by a new one (a new port), so a late pong cannot be taken for the
//! answer to a later ping.

use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use rds_core::errno::strerror;
use rds_core::wire::RDS_TCP_PORT;
use rds_core::{RecvFlags, Socket};

use crate::opts::Opts;
use crate::report::{self, Reply, Rtt, Summary};

/// Without any reply, give up once this many pings timed out.
pub const GIVE_UP_AFTER_LOST: u64 = 3;
/// The node counter of outgoing RDS/TCP connections refused by the peer.
const REFUSED_COUNTER: &str = "tcp_connect_refused";
/// Longest single wait, so that a stop request is seen promptly.
pub const MAX_WAIT: Duration = Duration::from_millis(200);

/// A fatal error: the message to print (exit 1).
#[derive(Debug)]
pub struct Fatal(pub String);

/// `"msg, errno: N (text)"` as the original's `die_errno`; an error without an OS errno gives
/// `"msg: text"` with the error's own text.
pub fn die_errno(msg: &str, e: &io::Error) -> Fatal {
    match e.raw_os_error() {
        Some(n) => Fatal(format!("{msg}, errno: {n} ({})", strerror(n))),
        None => Fatal(format!("{msg}: {e}")),
    }
}

/// The source address the route to `dst` uses: connect a UDP socket to port 1 and read its
/// local address (no packet is sent).
///
/// # Errors
/// The original's messages.
pub fn route_source(dst: IpAddr) -> Result<IpAddr, Fatal> {
    let any: SocketAddr = if dst.is_ipv4() {
        "0.0.0.0:0".parse().expect("literal")
    } else {
        "[::]:0".parse().expect("literal")
    };
    let u = UdpSocket::bind(any).map_err(|e| die_errno("unable to create UDP socket", &e))?;
    u.connect(SocketAddr::new(dst, 1))
        .map_err(|e| die_errno(&format!("unable to connect to {dst}"), &e))?;
    u.local_addr()
        .map(|a| a.ip())
        .map_err(|e| die_errno("getsockname failed", &e))
}

struct Slot {
    sock: Socket,
    /// Its descriptor to poll, once asked for (-1 before): only with several sockets.
    fd: RawFd,
    pending: bool,
    sent_id: u64,
    sent_at: Instant,
    nreplies: u32,
}

impl Slot {
    /// What a receive on this socket reports, as the original's `report_packet`: the number
    /// of the ping last sent on it, the time since that send, `DUP!` when the ping already
    /// had a reply, and the source when it is not `dest` (a pong) or the error text. Either
    /// counts as a reply of this ping (a later one is a `DUP!`); only a pong frees the socket
    /// for the next ping.
    fn received(&mut self, outcome: Result<Option<IpAddr>, i32>, dest: IpAddr) -> Reply {
        let rtt = u64::try_from(self.sent_at.elapsed().as_micros()).unwrap_or(u64::MAX);
        let dup = self.nreplies > 0;
        self.nreplies += 1;
        match outcome {
            Ok(from) => {
                self.pending = false;
                Reply {
                    seq: self.sent_id,
                    rtt_us: Some(rtt),
                    from: from.filter(|&ip| ip != dest),
                    dup,
                    error: None,
                }
            }
            Err(errno) => Reply {
                rtt_us: Some(rtt),
                dup,
                ..Reply::error(self.sent_id, errno)
            },
        }
    }
}

/// An RDS socket bound to `src` with a random port, and the descriptor to poll for its
/// replies.
///
/// # Errors
/// The original's messages; an address held by another program or node is named.
pub fn open_socket(src: IpAddr) -> Result<(Socket, RawFd), Fatal> {
    let sock = bound_socket(src)?;
    let fd = poll_fd(&sock)?;
    Ok((sock, fd))
}

/// The descriptor to poll for `sock`'s replies. Asked for only where several sockets are
/// polled together: once handed out, the node keeps it in step with every change.
fn poll_fd(sock: &Socket) -> Result<RawFd, Fatal> {
    sock.fd()
        .map_err(|e| die_errno("cannot poll the RDS socket", &e))
}

/// An RDS socket bound to `src` with a random port.
fn bound_socket(src: IpAddr) -> Result<Socket, Fatal> {
    let sock = Socket::new().map_err(|e| die_errno("socket(PF_RDS) failed", &e))?;
    sock.bind(SocketAddr::new(src, 0)).map_err(|e| {
        let mut f = die_errno(&format!("bind() to {src} failed"), &e);
        if e.raw_os_error() == Some(libc::EADDRINUSE) {
            f.0.push('\n');
            f.0.push_str(&rds_core::ctl::describe_addr_conflict(src));
        }
        f
    })?;
    Ok(sock)
}

/// Outgoing RDS/TCP connections the peers refused so far, on an embedded node (0 without
/// one: the daemon's and the kernel's are not seen from here).
pub fn refused_count(node: Option<&rds_core::Node>) -> u64 {
    node.map_or(0, |n| {
        n.stats()
            .iter()
            .find(|(name, _)| *name == REFUSED_COUNTER)
            .map_or(0, |&(_, v)| v)
    })
}

/// The `-v` line: which RDS node the pings go through.
pub fn announce(node: Option<&rds_core::Node>) {
    match node {
        Some(n) => {
            let addrs: Vec<String> = n.addrs().iter().map(ToString::to_string).collect();
            eprintln!(
                "rds-ping: embedded RDS node {} ({})",
                n.name(),
                addrs.join(" ")
            );
        }
        None => eprintln!("rds-ping: through the RDS daemon"),
    }
}

/// The message of a destination whose RDS/TCP connection was refused.
pub fn refused_message(dest: IpAddr) -> String {
    format!(
        "rds-ping: connection to {} refused: no RDS node there",
        SocketAddr::new(dest, RDS_TCP_PORT)
    )
}

/// The message of a destination given up on after `lost` pings without a reply.
pub fn give_up_message(dest: IpAddr, lost: u64, timeout: Duration) -> String {
    format!(
        "rds-ping: no reply from {dest}: {lost} pings unanswered after {:.3} s each, giving up",
        timeout.as_secs_f64()
    )
}

fn open_slot(src: IpAddr) -> Result<Slot, Fatal> {
    Ok(Slot {
        sock: bound_socket(src)?,
        fd: -1,
        pending: false,
        sent_id: 0,
        sent_at: Instant::now(),
        nreplies: 0,
    })
}

/// How often pings sent back to back (their interval shorter than a round trip, so that no
/// wait sleeps) look whether a stop was asked for (a read of the signal descriptor).
const STOP_LOOK_EVERY: Duration = Duration::from_millis(1);

/// Where the lines go, and how a stop is requested.
pub struct Io<'a> {
    /// Reply lines (not written in JSON mode).
    pub out: &'a mut dyn Write,
    /// Diagnostics.
    pub err: &'a mut dyn Write,
    /// Extra descriptor to poll (a signalfd); when readable, `stop` is asked.
    pub stop_fd: Option<RawFd>,
    /// Whether to stop now (Ctrl-C).
    pub stop: &'a mut dyn FnMut() -> bool,
}

/// Runs the pings and returns the totals.
///
/// # Errors
/// Socket setup failures (the original's messages).
pub fn run(opts: &Opts, io: &mut Io<'_>) -> Result<Summary, Fatal> {
    let dest = opts.dest().addr;
    let src = match opts.source {
        Some(s) => s,
        None => route_source(dest)?,
    };
    let mut slots = (0..opts.sockets)
        .map(|_| open_slot(src))
        .collect::<Result<Vec<_>, _>>()?;
    let dst = SocketAddr::new(dest, 0);
    let mut sum = Summary {
        destination: opts.dest().name.clone(),
        address: dest.to_string(),
        source: src.to_string(),
        ..Summary::default()
    };
    let mut rtts = Vec::new();
    let mut recv_all = 0u64; // replies including duplicates (the original's `recv`)
    let mut hinted = false;
    let mut next = 0usize;
    let start = Instant::now();
    let mut next_send = start;
    let end = opts.deadline.map(|d| start + d);
    // An embedded node counts the connections the destination refused: with no reply yet,
    // one more refusal means no RDS node listens there, and waiting is pointless.
    let node = slots[0].sock.node().cloned();
    let refused = |n: &Option<rds_core::Node>| refused_count(n.as_ref());
    let refused_before = refused(&node);
    if opts.verbose {
        announce(node.as_ref());
    }
    let emit = |sum: &mut Summary, r: Reply, io: &mut Io<'_>| {
        if !opts.json {
            let _ = writeln!(io.out, "{}", report::line(&r));
            let _ = io.out.flush();
        }
        sum.replies.push(r);
    };
    // Whether a stop may have been asked for since the last look (asking costs a system
    // call: it is skipped after a wait that a reply or its own timeout ended, and after waits
    // that did not sleep at all it is made at most every STOP_LOOK_EVERY).
    let mut maybe_stop = true;
    let mut stop_looked = Instant::now();
    'run: loop {
        if maybe_stop {
            stop_looked = Instant::now();
            if (io.stop)() {
                sum.stopped = Some("interrupted".into());
                break;
            }
        }
        let now = Instant::now();
        if end.is_some_and(|e| now >= e) {
            sum.stopped = Some("deadline".into());
            break;
        }
        if opts.count > 0 && recv_all >= opts.count {
            break;
        }
        for slot in &mut slots {
            if slot.pending && now.duration_since(slot.sent_at) >= opts.timeout {
                sum.timed_out += 1;
                slot.pending = false;
                if opts.count == 0 || sum.transmitted < opts.count {
                    *slot = open_slot(src)?;
                }
                if recv_all == 0 && sum.timed_out >= GIVE_UP_AFTER_LOST {
                    let _ = writeln!(
                        io.err,
                        "{}",
                        give_up_message(dest, sum.timed_out, opts.timeout)
                    );
                    sum.stopped = Some("no reply".into());
                    break 'run;
                }
            }
        }
        if recv_all == 0 && sum.transmitted > 0 && refused(&node) > refused_before {
            let _ = writeln!(io.err, "{}", refused_message(dest));
            sum.timed_out += slots.iter().filter(|s| s.pending).count() as u64;
            sum.stopped = Some("refused".into());
            break 'run;
        }
        // Once the count is sent, wait for the outstanding replies (each until its timeout);
        // the original stopped one interval after the last send, dropping late replies.
        let all_sent = opts.count > 0 && sum.transmitted >= opts.count;
        if all_sent && !slots.iter().any(|s| s.pending) {
            break;
        }
        if !all_sent && now >= next_send {
            next_send = now + opts.interval;
            let s = &mut slots[next];
            if !s.pending {
                sum.transmitted += 1;
                s.sent_id = sum.transmitted;
                s.sent_at = Instant::now();
                s.nreplies = 0;
                match s.sock.send_to(&[], dst) {
                    Ok(_) => s.pending = true,
                    Err(e) => {
                        let n = e.raw_os_error().unwrap_or(libc::EIO);
                        sum.errors += 1;
                        emit(&mut sum, Reply::error(s.sent_id, n), io);
                        if n == libc::EINVAL && !hinted && !opts.json {
                            hinted = true;
                            let _ = writeln!(io.out, "{}", report::EINVAL_HINT);
                        }
                    }
                }
                next = (next + 1) % slots.len();
            }
        }
        // Wait for replies until the next send, a timeout, the deadline or a stop check.
        let now = Instant::now();
        let mut until = if all_sent { now + MAX_WAIT } else { next_send };
        if let Some(e) = end {
            until = until.min(e);
        }
        for s in slots.iter().filter(|s| s.pending) {
            until = until.min(s.sent_at + opts.timeout);
        }
        let wait = until.saturating_duration_since(now).min(MAX_WAIT);
        let waited = Instant::now();
        let ready = if let [one] = &slots[..] {
            // One socket: its own wait, which on an embedded node reads the reply itself.
            let (r, _) = one
                .sock
                .wait_or(true, false, io.stop_fd, wait)
                .map_err(|e| die_errno("poll() failed", &e))?;
            vec![r]
        } else {
            let mut fds = Vec::with_capacity(slots.len() + 1);
            for s in slots.iter_mut() {
                if s.fd < 0 {
                    s.fd = poll_fd(&s.sock)?;
                }
                fds.push(s.fd);
            }
            fds.extend(io.stop_fd);
            rds_core::poll_readable(&fds, wait)
                .map_err(|e| die_errno("poll() failed", &e))?
                .to_vec()
        };
        // A signal ends a wait early with no reply; a signal that came as a reply did is seen
        // by the next wait, which it ends at once.
        // (With several sockets the stop descriptor's own answer follows theirs.)
        let n = slots.len();
        maybe_stop = io.stop_fd.is_none()
            || (wait.is_zero() && stop_looked.elapsed() >= STOP_LOOK_EVERY)
            || ready.get(n).copied().unwrap_or(false)
            || (!ready[..n].iter().any(|&r| r) && waited.elapsed() < wait);
        for (i, s) in slots.iter_mut().enumerate() {
            if !ready[i] {
                continue;
            }
            loop {
                let flags = RecvFlags {
                    dontwait: true,
                    ..RecvFlags::default()
                };
                match s.sock.recv_msg(&mut [], flags) {
                    Ok(m) => {
                        let r = s.received(Ok(m.from.map(|f| f.ip())), dest);
                        recv_all += 1;
                        if r.dup {
                            sum.duplicates += 1;
                        } else {
                            sum.received += 1;
                            rtts.extend(r.rtt_us);
                        }
                        emit(&mut sum, r, io);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        // With its time, as a reply of the ping; not a pong (the ping stays
                        // pending, as in the original).
                        sum.errors += 1;
                        let n = e.raw_os_error().unwrap_or(libc::EIO);
                        emit(&mut sum, s.received(Err(n), dest), io);
                        break;
                    }
                }
            }
        }
    }
    sum.time_ms = report::millis(start.elapsed());
    sum.loss_percent = report::loss_percent(sum.transmitted, sum.received);
    sum.rtt_us = Rtt::of(&rtts);
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(seq: u64, ago: Duration) -> Slot {
        Slot {
            sock: Socket::new().unwrap(),
            fd: -1,
            pending: true,
            sent_id: seq,
            sent_at: Instant::now() - ago,
            nreplies: 0,
        }
    }

    /// A receive error is reported as the original does: with the time since the ping, as a
    /// reply of that ping (the next one is a DUP!), and the ping stays pending.
    #[test]
    fn a_receive_error_is_a_timed_reply() {
        let dest: IpAddr = "127.6.9.2".parse().unwrap();
        let mut s = slot(3, Duration::from_millis(150));
        let e = s.received(Err(libc::ECONNRESET), dest);
        let rtt = e.rtt_us.expect("a receive error has its time");
        assert!((150_000..10_000_000).contains(&rtt), "{rtt}");
        assert_eq!(
            report::line(&e),
            format!("   3: {rtt} usec ERROR: Connection reset by peer")
        );
        assert!(s.pending, "an error does not answer the ping");
        assert_eq!(s.nreplies, 1);
        let again = s.received(Err(libc::EIO), dest);
        assert!(again.dup);
        assert_eq!(
            report::line(&again),
            format!(
                "   3: {} usec DUP! ERROR: Input/output error",
                again.rtt_us.unwrap()
            )
        );
        // The pong that follows is a duplicate of the error's reply, and frees the socket.
        let pong = s.received(Ok(Some(dest)), dest);
        assert!(pong.dup && pong.error.is_none() && pong.from.is_none());
        assert!(!s.pending);
        assert_eq!(s.nreplies, 3);
        // From another address: shown.
        let mut s = slot(4, Duration::ZERO);
        let other: IpAddr = "127.6.9.3".parse().unwrap();
        let r = s.received(Ok(Some(other)), dest);
        assert_eq!(
            report::line(&r),
            format!("   4: {} usec (127.6.9.3)", r.rtt_us.unwrap())
        );
    }
}
