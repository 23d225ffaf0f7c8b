//! The daemon backend of [`super::Socket`]: the socket lives in the daemon's node and every
//! call is a request on the daemon's control socket. Readiness descriptors are eventfds kept
//! up to date from each reply and, while the caller waits, by a watcher thread that asks the
//! daemon (on its own control connection) to report readiness changes. The daemon's socket
//! belongs to the control connection that opened it; a watcher reaches it through the
//! socket's capability ([`Request::SockCap`], [`Request::SockAttach`]).
//!
//! When the daemon offers it ([`Request::SockRing`]), sends and receives go through the
//! socket's shared-memory ring instead ([`RingClient`], [`super::ring`]): the payload is
//! copied into the ring once, nothing is encoded as JSON, the daemon's doorbell is rung only
//! while it sleeps, and the readiness descriptors are the ones the daemon keeps up to date
//! (no watcher threads). The control connection keeps setup and the rare operations. A send
//! to a destination the last waited-for send reached, within the send-buffer room the daemon
//! last reported, is posted without waiting for its result; a receive brings every whole
//! message queued (up to 32) and the client serves the next receives from them; while the
//! client watches its receive side, the daemon pushes messages into the ring as they arrive,
//! so that a receive usually finds its message there without asking. Before an
//! operation on the control connection that must follow the posted sends (options, connect,
//! cancel, close), the client waits until the daemon has taken them all. A blocking send to
//! a congested destination waits on the ring's congestion bell, which the daemon rings when a
//! congestion map changes or a path goes down.
//!
//! When the daemon goes away (stopped or crashed), every later call fails with `ECONNRESET`
//! and the first one also says so on stderr, naming the daemon's socket; the watchers end.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use super::answer::{data_from, io};
use super::preset::Preset;
use super::ring::client::RingClient;
use crate::ctl::client::CtlClient;
use crate::ctl::{NodeEndpoint, Reply, Request, SockOpt};
use crate::info::TransportKind;
use crate::message::Received;
use crate::sys;

#[derive(Debug, Default)]
struct Fds {
    rx: Option<(OwnedFd, bool)>,
    tx: Option<(OwnedFd, bool)>,
    watching_rx: bool,
    watching_tx: bool,
}

/// The readiness descriptors and a condition the watcher waits on while nothing is to be
/// watched (both descriptors signalled): a receive or send that clears one wakes it at once.
#[derive(Debug, Default)]
struct FdState {
    fds: Mutex<Fds>,
    cleared: Condvar,
}

impl FdState {
    fn lock(&self) -> std::sync::MutexGuard<'_, Fds> {
        self.fds.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A socket served by the daemon.
#[derive(Debug)]
pub(crate) struct Remote {
    client: Mutex<CtlClient>,
    endpoint: NodeEndpoint,
    token: u64,
    fds: Arc<FdState>,
    stop: Arc<AtomicBool>,
    ring: Option<Box<RingClient>>,
}

/// [`update`] for one direction only.
fn update_one(st: &FdState, rx: bool, ready: bool) {
    let mut guard = st.lock();
    let slot = if rx { &mut guard.rx } else { &mut guard.tx };
    if let Some((fd, sig)) = slot.as_mut() {
        if ready && !*sig {
            sys::eventfd_signal(fd.as_raw_fd());
            *sig = true;
        } else if !ready && *sig {
            sys::eventfd_clear(fd.as_raw_fd());
            *sig = false;
            st.cleared.notify_all();
        }
    }
}

fn update(st: &FdState, readable: bool, writable: bool) {
    let mut guard = st.lock();
    let f = &mut *guard;
    let mut cleared = false;
    for (slot, want) in [(&mut f.rx, readable), (&mut f.tx, writable)] {
        if let Some((fd, sig)) = slot.as_mut() {
            if want && !*sig {
                sys::eventfd_signal(fd.as_raw_fd());
                *sig = true;
            } else if !want && *sig {
                sys::eventfd_clear(fd.as_raw_fd());
                *sig = false;
                cleared = true;
            }
        }
    }
    if cleared {
        st.cleared.notify_all();
    }
}

impl Remote {
    /// Binds through the daemon, handing it the options set so far, if one runs and owns
    /// `addr`; `Ok(None)` when not.
    pub(super) fn bind_preset(
        addr: SocketAddr,
        p: &Preset,
        timestamps: bool,
    ) -> io::Result<Option<(Remote, SocketAddr)>> {
        let Some(ep) = crate::ctl::find_daemon() else {
            return Ok(None);
        };
        let mut opts = vec![
            SockOpt::CongMonitor(p.cong_monitor),
            SockOpt::Recverr(p.recverr),
            SockOpt::Timestamps(timestamps),
        ];
        opts.extend(p.sndbuf.map(SockOpt::Sndbuf));
        opts.extend(p.rcvbuf.map(SockOpt::Rcvbuf));
        match Remote::bind(&ep, addr, p.transport, &opts, p.connected) {
            Ok(r) => Ok(Some(r)),
            // The daemon does not own the address: an embedded node may.
            Err(e) if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Opens a client socket on the daemon at `endpoint` and binds it.
    fn bind(
        endpoint: &NodeEndpoint,
        addr: SocketAddr,
        transport: Option<TransportKind>,
        opts: &[SockOpt],
        connected: Option<SocketAddr>,
    ) -> io::Result<(Remote, SocketAddr)> {
        let mut client = CtlClient::connect(&endpoint.path).map_err(io)?;
        let token = match client.call(&Request::SockOpen, &[]).map_err(io)?.0 {
            Reply::Sock { sock } => sock,
            other => return Err(io::Error::other(format!("unexpected reply {other:?}"))),
        };
        for &opt in opts {
            client
                .call(&Request::SockSet { sock: token, opt }, &[])
                .map_err(io)?;
        }
        let bound = match client
            .call(
                &Request::SockBind {
                    sock: token,
                    addr,
                    transport,
                },
                &[],
            )
            .map_err(io)?
            .0
        {
            Reply::SockState { bound: Some(b), .. } => b,
            other => return Err(io::Error::other(format!("unexpected reply {other:?}"))),
        };
        if let Some(c) = connected {
            client
                .call(
                    &Request::SockConnect {
                        sock: token,
                        addr: c,
                    },
                    &[],
                )
                .map_err(io)?;
        }
        let ring = RingClient::setup(&mut client, token).map(Box::new);
        Ok((
            Remote {
                ring,
                client: Mutex::new(client),
                endpoint: endpoint.clone(),
                token,
                fds: Arc::new(FdState::default()),
                stop: Arc::new(AtomicBool::new(false)),
            },
            bound,
        ))
    }

    /// Whether sends and receives go through the shared-memory ring.
    pub(crate) fn has_ring(&self) -> bool {
        self.ring.is_some()
    }

    /// `(readable, writable)` when the shared ring alone shows a direction of `rx`/`tx`
    /// ready (no system call); `None` without a ring or when it does not (poll then).
    pub(crate) fn ready_now(&self, rx: bool, tx: bool) -> Option<(bool, bool)> {
        self.ring.as_ref()?.ready_now(rx, tx)
    }

    fn call(&self, req: &Request, data: &[u8]) -> io::Result<(Reply, Vec<u8>)> {
        self.client
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .call(req, data)
            .map_err(io)
    }

    fn state(&self) -> io::Result<Reply> {
        Ok(self.call(&Request::SockState { sock: self.token }, &[])?.0)
    }

    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        match self.state()? {
            Reply::SockState { bound: Some(b), .. } => Ok(b),
            _ => Err(crate::errno::err(libc::ENOTCONN)),
        }
    }

    pub(crate) fn peer_addr(&self) -> io::Result<SocketAddr> {
        match self.state()? {
            Reply::SockState {
                connected: Some(c), ..
            } => Ok(c),
            _ => Err(crate::errno::err(libc::ENOTCONN)),
        }
    }

    pub(crate) fn bufs(&self) -> (usize, usize) {
        match self.state() {
            Ok(Reply::SockState { sndbuf, rcvbuf, .. }) => (sndbuf, rcvbuf),
            _ => (0, 0),
        }
    }

    pub(crate) fn transport(&self) -> Option<TransportKind> {
        match self.state() {
            Ok(Reply::SockState { transport, .. }) => transport,
            _ => None,
        }
    }

    pub(crate) fn readiness(&self) -> (bool, bool) {
        // Messages the daemon handed are readable here, whatever the socket says.
        let held = self.ring.as_ref().is_some_and(|r| r.holds());
        match self.state() {
            Ok(Reply::SockState {
                readable, writable, ..
            }) => (readable || held, writable),
            _ => (held, false),
        }
    }

    /// Before a call on the control connection that must follow every posted send.
    fn sync_ring(&self, reset: bool) -> io::Result<()> {
        self.ring.as_ref().map_or(Ok(()), |r| r.sync(reset))
    }

    pub(crate) fn connect(&self, addr: SocketAddr) -> io::Result<()> {
        self.sync_ring(true)?;
        self.call(
            &Request::SockConnect {
                sock: self.token,
                addr,
            },
            &[],
        )
        .map(drop)
    }

    pub(crate) fn set(&self, opt: SockOpt) -> io::Result<()> {
        self.sync_ring(true)?;
        self.call(
            &Request::SockSet {
                sock: self.token,
                opt,
            },
            &[],
        )
        .map(drop)
    }

    pub(crate) fn send(
        &self,
        msg: &Bytes,
        dest: Option<SocketAddr>,
        dontwait: bool,
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        if let Some(r) = &self.ring {
            return r.send(msg, dest, dontwait, timeout);
        }
        let (reply, _) = self.call(
            &Request::SockSend {
                sock: self.token,
                dest,
                dontwait,
                timeout_ms: timeout.map(|t| t.as_millis() as u64),
            },
            msg,
        )?;
        match reply {
            Reply::Sent {
                len,
                readable,
                writable,
            } => {
                update(&self.fds, readable, writable);
                Ok(len)
            }
            other => Err(io::Error::other(format!("unexpected reply {other:?}"))),
        }
    }

    pub(crate) fn recv(
        &self,
        max: usize,
        peek: bool,
        dontwait: bool,
        timeout: Option<Duration>,
    ) -> io::Result<(Received, Option<SystemTime>)> {
        if let Some(r) = &self.ring {
            return r.recv(max, peek, dontwait, timeout);
        }
        let r = self.call(
            &Request::SockRecv {
                sock: self.token,
                max,
                peek,
                dontwait,
                timeout_ms: timeout.map(|t| t.as_millis() as u64),
            },
            &[],
        );
        let (reply, data) = match r {
            Ok(v) => v,
            Err(e) => {
                if e.raw_os_error() == Some(libc::EAGAIN) {
                    update(&self.fds, false, true);
                }
                return Err(e);
            }
        };
        match reply {
            Reply::Recv {
                full_len,
                from,
                truncated,
                cong_update,
                rdma_dest,
                ts_ns,
                readable,
                writable,
            } => {
                update(&self.fds, readable, writable);
                let ts = ts_ns.map(|n| UNIX_EPOCH + Duration::from_nanos(n));
                Ok(match (cong_update, from) {
                    (Some(mask), _) => (Received::CongUpdate(mask), None),
                    (None, Some(from)) => {
                        (data_from(from, data, rdma_dest, full_len, truncated), ts)
                    }
                    (None, None) => return Err(io::Error::other("receive reply without a sender")),
                })
            }
            other => Err(io::Error::other(format!("unexpected reply {other:?}"))),
        }
    }

    /// [`super::Socket::wait_uncongested`]: through the ring's congestion bell (`EINTR` when
    /// a signal handler runs); `EOPNOTSUPP` without a ring.
    pub(crate) fn wait_uncongested(
        &self,
        dest: Option<SocketAddr>,
        deadline: Option<std::time::Instant>,
    ) -> io::Result<bool> {
        match &self.ring {
            Some(r) => r.wait_uncongested(dest, deadline, true),
            None => Err(crate::errno::err(libc::EOPNOTSUPP)),
        }
    }

    pub(crate) fn cancel(&self, dest: SocketAddr) -> io::Result<usize> {
        self.sync_ring(false)?;
        match self
            .call(
                &Request::SockCancel {
                    sock: self.token,
                    dest,
                },
                &[],
            )?
            .0
        {
            Reply::Dropped { messages } => Ok(messages),
            other => Err(io::Error::other(format!("unexpected reply {other:?}"))),
        }
    }

    /// A readiness descriptor (POLLIN when `rx`, POLLOUT otherwise).
    pub(crate) fn fd(&self, rx: bool) -> io::Result<RawFd> {
        if let Some(r) = &self.ring {
            return Ok(r.watch(rx));
        }
        let fd = {
            let mut f = self.fds.lock();
            let slot = if rx { &mut f.rx } else { &mut f.tx };
            if slot.is_none() {
                *slot = Some((sys::eventfd()?, false));
            }
            let fd = slot.as_ref().map(|(f, _)| f.as_raw_fd()).expect("just set");
            let watching = if rx {
                &mut f.watching_rx
            } else {
                &mut f.watching_tx
            };
            if !*watching {
                *watching = true;
                self.start_watcher(rx)?;
            }
            fd
        };
        let (r, w) = self.readiness();
        update(&self.fds, r, w);
        Ok(fd)
    }

    /// Starts the thread that keeps one readiness descriptor (`rx`: POLLIN, else POLLOUT)
    /// signalled: while it is clear, it waits on the daemon for the socket to become ready;
    /// while it is signalled, it waits for the application to clear it (a receive or send
    /// that found nothing to do). One thread per direction, so that clearing one never waits
    /// behind a wait for the other.
    fn start_watcher(&self, rx: bool) -> io::Result<()> {
        let cap = match self.call(&Request::SockCap { sock: self.token }, &[])?.0 {
            Reply::SockCap { cap } => cap,
            other => return Err(io::Error::other(format!("unexpected reply {other:?}"))),
        };
        let mut client = CtlClient::connect(&self.endpoint.path).map_err(io)?;
        let token = match client
            .call(&Request::SockAttach { cap }, &[])
            .map_err(io)?
            .0
        {
            Reply::Sock { sock } => sock,
            other => return Err(io::Error::other(format!("unexpected reply {other:?}"))),
        };
        let fds = self.fds.clone();
        let stop = self.stop.clone();
        let signalled = move |f: &Fds| {
            let slot = if rx { &f.rx } else { &f.tx };
            slot.as_ref().is_some_and(|x| x.1)
        };
        std::thread::Builder::new()
            .name("rds-sock-watch".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    {
                        // Signalled: wait until the application clears it (bounded, to
                        // notice a stop).
                        let g = fds.lock();
                        let (g, _) = fds
                            .cleared
                            .wait_timeout_while(g, Duration::from_millis(200), |f| {
                                !stop.load(Ordering::Relaxed) && signalled(f)
                            })
                            .unwrap_or_else(|p| p.into_inner());
                        if signalled(&g) {
                            continue;
                        }
                    }
                    let req = Request::SockWait {
                        sock: token,
                        rx,
                        tx: !rx,
                        timeout_ms: 200,
                    };
                    match client.call(&req, &[]) {
                        Ok((Reply::Ready { readable, writable }, _)) => {
                            update_one(&fds, rx, if rx { readable } else { writable });
                        }
                        _ => break,
                    }
                }
            })?;
        Ok(())
    }

    pub(crate) fn close(&self) {
        self.stop.store(true, Ordering::Relaxed);
        // Posted sends are the application's sent messages: the daemon takes them first.
        let _ = self.sync_ring(false);
        let _ = self.call(&Request::SockClose { sock: self.token }, &[]);
    }
}
