//! The control socket server of a node: one thread accepts, one thread serves each client
//! connection. Requests are handled against the node; see the module documentation of
//! [`super`] for the protocol and the privilege rules.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;

use super::{read_frame, write_frame, FdReader, FrameError, InfoSnapshot, Reply, Request, SockOpt};
use crate::node::tap::{self, TapBatch, TapChunk, TapFilter};
use crate::node::{Inner, Node, Owner};
use crate::proto::{Received, TransportKind};
use crate::socket::{RecvFlags, Socket};
use crate::sys;
use crate::trace::{Capture, CaptureFile, CaptureLink, TcpCaptureConfig, TraceError};
use crate::tunables::{TunableDef, TUNABLES};

/// Frames a trace session may hold before dropping (and counting) new ones. The queue's
/// bytes are bounded too ([`tap::MAX_QUEUED_BYTES`], 64 MiB); this many of the smallest
/// records (a bare header: 136 bytes) take about as much, so at any snap length the queue can
/// hold what the data path produces in the ~0.3 s a slow write to the file may take.
const TRACE_QUEUE: usize = 1 << 19;

/// A running control server; stopping it removes the socket file.
#[derive(Debug)]
pub struct CtlServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Ctx {
    inner: Arc<Inner>,
    owner: Weak<Owner>,
    owner_uid: u32,
    stop: Arc<AtomicBool>,
    socks: Mutex<HashMap<u64, Arc<Socket>>>,
    next_sock: AtomicU64,
}

impl Ctx {
    fn node(&self) -> Option<Node> {
        Node::from_parts(self.inner.clone(), self.owner.upgrade()?)
    }
}

impl CtlServer {
    /// Serves `name.sock` in the runtime directory for the node.
    ///
    /// # Errors
    /// The directory or socket cannot be created (for example a live node of that name).
    pub(crate) fn start(
        inner: Arc<Inner>,
        owner: Weak<Owner>,
        name: &str,
    ) -> io::Result<CtlServer> {
        let dir = super::runtime_dir();
        std::fs::create_dir_all(&dir)?;
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755));
        let path = dir.join(format!("{name}.sock"));
        if UnixStream::connect(&path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("a node named '{name}' already serves {}", path.display()),
            ));
        }
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path)?;
        // Reading is open to local users; privileged requests are checked per request.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let ctx = Arc::new(Ctx {
            inner,
            owner,
            owner_uid: nix::unistd::geteuid().as_raw(),
            stop: stop.clone(),
            socks: Mutex::new(HashMap::new()),
            next_sock: AtomicU64::new(1),
        });
        let thread = std::thread::Builder::new()
            .name("rds-ctl".into())
            .spawn(move || accept_loop(listener, ctx))?;
        Ok(CtlServer {
            path,
            stop,
            thread: Some(thread),
        })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stops accepting and removes the socket file (connections being served end when their
    /// clients go away or the node stops).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = std::fs::remove_file(&self.path);
        if let Some(h) = self.thread.take() {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

impl Drop for CtlServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(listener: UnixListener, ctx: Arc<Ctx>) {
    while !ctx.stop.load(Ordering::SeqCst) {
        let _ = sys::wait_readable(listener.as_raw_fd(), Duration::from_millis(200));
        loop {
            match listener.accept() {
                Ok((stream, _)) => {
                    let c = ctx.clone();
                    let _ = std::thread::Builder::new()
                        .name("rds-ctl-conn".into())
                        .spawn(move || serve(stream, c));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
    }
}

fn error(errno: i32, message: impl Into<String>) -> Reply {
    Reply::Error {
        errno,
        message: message.into(),
    }
}

fn send(stream: &mut UnixStream, reply: &Reply, data: &[u8]) -> io::Result<()> {
    let json = serde_json::to_vec(reply).map_err(io::Error::other)?;
    write_frame(stream, &json, data)
}

fn serve(mut stream: UnixStream, ctx: Arc<Ctx>) {
    let _ = stream.set_nonblocking(false);
    let uid = nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
        .map(|c| c.uid())
        .unwrap_or(u32::MAX);
    let privileged = uid == 0 || uid == ctx.owner_uid;
    let mut mine: Vec<u64> = Vec::new();
    // Descriptors passed with requests (only TraceStart takes one; others are closed).
    let mut fds: Vec<OwnedFd> = Vec::new();
    loop {
        let read = {
            let mut r = FdReader::new(&stream);
            let f = read_frame(&mut r);
            fds.append(&mut r.fds);
            f
        };
        let (json, data) = match read {
            Ok(f) => f,
            Err(FrameError::TooLarge { json, data }) => {
                let _ = send(
                    &mut stream,
                    &error(
                        libc::EMSGSIZE,
                        format!("frame too large ({json} + {data} bytes)"),
                    ),
                    &[],
                );
                break;
            }
            Err(_) => break,
        };
        let req: Request = match serde_json::from_slice(&json) {
            Ok(r) => r,
            Err(e) => {
                if send(
                    &mut stream,
                    &error(libc::EINVAL, format!("malformed request: {e}")),
                    &[],
                )
                .is_err()
                {
                    break;
                }
                continue;
            }
        };
        let Some(node) = ctx.node() else {
            let _ = send(
                &mut stream,
                &error(libc::ENETDOWN, "the node is shutting down"),
                &[],
            );
            break;
        };
        // The capture file's descriptor comes with a TraceStart's bytes; any other is closed.
        let file = fds.pop();
        fds.clear();
        if let Request::TraceStart {
            snaplen,
            peer,
            port,
            output,
        } = req
        {
            if !privileged {
                let _ = send(&mut stream, &denied(), &[]);
                continue;
            }
            let output = output.map(|o| (o, file));
            // The session runs on a thread of its own at a lower priority ([`TRACE_NICE`],
            // then `SCHED_IDLE` while it captures; see `trace`).
            let filter = TapFilter { peer, port };
            let go_on = std::thread::scope(|sc| {
                std::thread::Builder::new()
                    .name("rds-trace-out".into())
                    .spawn_scoped(sc, || {
                        let _ = sys::set_thread_nice(TRACE_NICE);
                        trace(&mut stream, &node, snaplen, filter, output)
                    })
                    .map(|h| h.join().unwrap_or(false))
                    .unwrap_or(false)
            });
            if !go_on {
                break;
            }
            continue;
        }
        let shutdown = matches!(req, Request::Shutdown) && privileged;
        let (reply, out) = handle(&ctx, &node, req, &data, privileged, &mut mine);
        drop(node);
        if send(&mut stream, &reply, &out).is_err() {
            break;
        }
        if shutdown {
            let c = ctx.clone();
            std::thread::spawn(move || {
                if let Some(n) = c.node() {
                    n.shutdown();
                }
            });
        }
    }
    let mut socks = ctx.socks.lock().unwrap_or_else(|p| p.into_inner());
    for s in mine {
        socks.remove(&s);
    }
}

fn denied() -> Reply {
    error(
        libc::EPERM,
        "permission denied: this needs root or the node's owner",
    )
}

/// How long the trace loop waits for a full chunk of trace records before it sends what
/// there is (the latency of a live capture at low traffic).
const TRACE_BATCH_WAIT: Duration = Duration::from_millis(20);

// Every batch the tap hands out fits the data part of one control frame.
const _: () = assert!(tap::CHUNK_SIZE <= super::MAX_DATA && tap::MAX_RECORD <= super::MAX_DATA);

/// The nice value of a trace session's threads. The capture yields the CPU to the data path it
/// observes: the session thread, which turns the tap's records into pcap packets, and the
/// capture file's writer run under `SCHED_IDLE` while it captures (only on CPU time the
/// traffic leaves), back at this nice value to write out what was queued once the session
/// stops (when the node may leave `SCHED_IDLE`: root, `CAP_SYS_NICE` or `RLIMIT_NICE` ≥ 10).
/// At full load it drops, and counts, what it cannot keep up with rather than slow the
/// traffic (measured in `cargo bench -p rds-trace --bench capture_overhead`).
pub const TRACE_NICE: i32 = 10;

/// Where a trace session's frames go.
enum TraceSink {
    /// To the client, as [`Reply::TraceFrames`].
    Stream,
    /// Into the capture file the client passed (see [`super::TraceOutput`]).
    File(Box<Capture<CaptureFile>>),
}

/// Moves a capture file's writer thread to or from `SCHED_IDLE` with the session thread
/// (best effort, as for the session thread).
fn set_writer_idle(sink: &TraceSink, idle: bool) {
    if let TraceSink::File(c) = sink {
        if let Some(f) = c.get_ref() {
            let _ = f.set_idle(idle);
        }
    }
}

/// How often a capture file gets its held-back segments and gathered blocks written.
const FILE_FLUSH: Duration = Duration::from_secs(1);

/// The errno of a failed capture write.
fn trace_errno(e: &TraceError) -> i32 {
    e.io_error()
        .and_then(std::io::Error::raw_os_error)
        .unwrap_or(libc::EIO)
}

/// Opens the capture of a session that writes the file: the pcap header goes out now.
fn open_capture(
    node: &Node,
    out: &super::TraceOutput,
    file: Option<OwnedFd>,
) -> Result<Capture<CaptureFile>, Failed> {
    let file = file.ok_or_else(|| {
        Failed(
            libc::EBADF,
            "no capture file descriptor came with the request".into(),
        )
    })?;
    let link = out
        .link
        .unwrap_or_else(|| CaptureLink::default_for(&transports(node)));
    let cf = CaptureFile::new(std::fs::File::from(file)).map_err(|e| failed(&e))?;
    Capture::new(cf, link, out.count, TcpCaptureConfig::default())
        .map_err(|e| Failed(trace_errno(&e), format!("writing the capture: {e}")))
}

/// Runs a trace session until the client stops or leaves, or (writing a file) the count is
/// reached. Frames go to the client or into the file the client passed. Returns whether the
/// connection may continue.
fn trace(
    stream: &mut UnixStream,
    node: &Node,
    snaplen: u32,
    filter: TapFilter,
    output: Option<(super::TraceOutput, Option<OwnedFd>)>,
) -> bool {
    let mut sink = match output {
        None => TraceSink::Stream,
        Some((out, file)) => match open_capture(node, &out, file) {
            Ok(c) => TraceSink::File(Box::new(c)),
            Err(f) => return send(stream, &Reply::from(f), &[]).is_ok(),
        },
    };
    if let Err(e) = node
        .tap()
        .start(snaplen.max(48) as usize, TRACE_QUEUE, filter)
    {
        return send(stream, &error(libc::EBUSY, e.to_string()), &[]).is_ok();
    }
    // The session thread and the file's writer now only take CPU time the traffic leaves.
    let _ = sys::set_thread_idle(true);
    set_writer_idle(&sink, true);
    let started = Reply::TraceStarted {
        transports: transports(node),
        link: match &sink {
            TraceSink::Stream => None,
            TraceSink::File(c) => Some(c.link()),
        },
    };
    if send(stream, &started, &[]).is_err() {
        node.tap().stop();
        return false;
    }
    let mut alive = true;
    let mut write_error: Option<TraceError> = None;
    let mut last_flush = std::time::Instant::now();
    loop {
        // A TraceStop (or the client leaving) ends the session.
        if sys::wait_readable(stream.as_raw_fd(), Duration::ZERO).unwrap_or(false) {
            match read_frame(stream) {
                Ok((json, _)) => {
                    if matches!(serde_json::from_slice(&json), Ok(Request::TraceStop)) {
                        break;
                    }
                }
                Err(_) => {
                    alive = false;
                    break;
                }
            }
        }
        match &mut sink {
            TraceSink::Stream => {
                let Some(batches) = node.tap().take_batches(TRACE_BATCH_WAIT) else {
                    break;
                };
                if send_batches(stream, node, batches).is_err() {
                    alive = false;
                }
            }
            TraceSink::File(c) => {
                let Some(chunks) = node.tap().take_chunks(TRACE_BATCH_WAIT) else {
                    break;
                };
                write_chunks(c, node, chunks, &mut write_error);
                if write_error.is_none() && last_flush.elapsed() >= FILE_FLUSH {
                    last_flush = std::time::Instant::now();
                    write_error = c.flush().err();
                }
                if write_error.is_some() || c.full() {
                    break;
                }
            }
        }
        if !alive || !node.is_running() {
            break;
        }
    }
    let st = node.tap().stop();
    // What is queued is bounded: write it out at the nice value again (best effort).
    let _ = sys::set_thread_idle(false);
    set_writer_idle(&sink, false);
    // Deliver the frames captured before the stop (they are counted as captured), then end;
    // the queue is emptied either way so that the next session starts empty.
    loop {
        let more = match &mut sink {
            TraceSink::Stream => match node.tap().take_batches(Duration::ZERO) {
                Some(batches) if !batches.is_empty() => {
                    if alive && send_batches(stream, node, batches).is_err() {
                        alive = false;
                    }
                    true
                }
                _ => false,
            },
            TraceSink::File(c) => match node.tap().take_chunks(Duration::ZERO) {
                Some(chunks) if !chunks.is_empty() => {
                    write_chunks(c, node, chunks, &mut write_error);
                    true
                }
                _ => false,
            },
        };
        if !more {
            break;
        }
    }
    let written = match sink {
        TraceSink::Stream => None,
        TraceSink::File(c) => match c.finish() {
            Ok((cf, tally)) => match cf.finish() {
                Ok(_) => Some(tally),
                Err(e) => {
                    write_error.get_or_insert(TraceError::Io(e));
                    None
                }
            },
            Err(e) => {
                write_error.get_or_insert(e);
                None
            }
        },
    };
    if alive {
        let reply = match write_error {
            Some(e) => error(trace_errno(&e), format!("writing the capture: {e}")),
            None => Reply::TraceEnd {
                captured: st.captured,
                dropped: st.dropped,
                written,
            },
        };
        alive = send(stream, &reply, &[]).is_ok();
    }
    alive
}

/// Writes each chunk into the capture file, reading the records in place (nothing more after
/// the first write error), and gives the buffers back to the tap.
fn write_chunks(
    c: &mut Capture<CaptureFile>,
    node: &Node,
    chunks: Vec<TapChunk>,
    write_error: &mut Option<TraceError>,
) {
    for chunk in chunks {
        if write_error.is_none() {
            if let Err(e) = c.write_chunk(&chunk) {
                *write_error = Some(e);
            }
        }
        node.tap().recycle_chunk(chunk);
    }
}

/// Sends each batch of trace records unchanged as one [`Reply::TraceFrames`] (one write per
/// batch of up to a chunk), and gives the buffers back to the tap.
fn send_batches(stream: &mut UnixStream, node: &Node, batches: Vec<TapBatch>) -> io::Result<()> {
    let mut res = Ok(());
    for b in batches {
        if res.is_ok() {
            res = send(stream, &Reply::TraceFrames { frames: b.frames }, &b.data);
        }
        node.tap().recycle(b.data);
    }
    res
}

/// A failed request: errno and message (turned into [`Reply::Error`]).
struct Failed(i32, String);

impl From<Failed> for Reply {
    fn from(f: Failed) -> Reply {
        error(f.0, f.1)
    }
}

fn failed(e: &io::Error) -> Failed {
    Failed(e.raw_os_error().unwrap_or(libc::EIO), e.to_string())
}

fn sock(ctx: &Ctx, token: u64) -> Result<Arc<Socket>, Failed> {
    ctx.socks
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&token)
        .cloned()
        .ok_or_else(|| Failed(libc::EBADF, format!("no client socket {token}")))
}

fn ready(s: &Socket) -> (bool, bool) {
    (s.readable(), s.writable())
}

fn ms(t: Option<u64>) -> Option<Duration> {
    t.map(Duration::from_millis)
}

fn handle(
    ctx: &Ctx,
    node: &Node,
    req: Request,
    data: &[u8],
    privileged: bool,
    mine: &mut Vec<u64>,
) -> (Reply, Vec<u8>) {
    let r = |reply| (reply, Vec::new());
    let needs_priv = matches!(
        req,
        Request::StatsReset
            | Request::TunableSet { .. }
            | Request::TunableDefault { .. }
            | Request::ConnRestart { .. }
            | Request::ConnKill { .. }
            | Request::Shutdown
    );
    if needs_priv && !privileged {
        return r(denied());
    }
    match req {
        Request::Hello { v } => {
            if v != super::PROTO_VERSION {
                return r(error(
                    libc::EPROTONOSUPPORT,
                    format!(
                        "protocol version {v} not supported (this node speaks {})",
                        super::PROTO_VERSION
                    ),
                ));
            }
            r(Reply::Hello {
                v: super::PROTO_VERSION,
                node: node.name().to_string(),
                version: env!("CARGO_PKG_VERSION").into(),
                rds_protocol: "3.1".into(),
                pid: std::process::id(),
                owner_uid: ctx.owner_uid,
                addrs: node.addrs(),
            })
        }
        Request::Info => r(Reply::Info(Box::new(snapshot(node)))),
        Request::Stats => r(Reply::Stats {
            counters: counters(node),
        }),
        Request::StatsReset => {
            node.reset_stats();
            r(Reply::Ok)
        }
        Request::TunablesGet => {
            let t = node.tunables();
            r(Reply::Tunables {
                values: TUNABLES
                    .iter()
                    .map(|d| (d.name.to_string(), d.get(&t)))
                    .collect(),
            })
        }
        Request::TunableSet { name, value } => {
            let Some(def) = TunableDef::find(&name) else {
                return r(error(libc::ENOENT, format!("unknown tunable '{name}'")));
            };
            let mut t = node.tunables();
            match def.set(&mut t, value) {
                Ok(()) => {
                    node.set_tunables(t);
                    r(Reply::Ok)
                }
                Err(e) => r(error(libc::EINVAL, e.to_string())),
            }
        }
        Request::TunableDefault { name } => {
            let mut t = node.tunables();
            let defaults = crate::tunables::Tunables::default();
            let defs: Vec<&TunableDef> = match &name {
                Some(n) => match TunableDef::find(n) {
                    Some(d) => vec![d],
                    None => return r(error(libc::ENOENT, format!("unknown tunable '{n}'"))),
                },
                None => TUNABLES.iter().collect(),
            };
            if name.is_none() {
                t = defaults;
            } else {
                for d in defs {
                    if let Err(e) = d.set(&mut t, d.default_value()) {
                        return r(error(libc::EINVAL, e.to_string()));
                    }
                }
            }
            node.set_tunables(t);
            r(Reply::Ok)
        }
        Request::ConnRestart { laddr, faddr } => {
            if node.restart_conn(laddr, faddr) {
                r(Reply::Ok)
            } else {
                r(error(
                    libc::ENOENT,
                    format!("no connection {laddr} -> {faddr}"),
                ))
            }
        }
        Request::ConnKill { laddr, faddr } => match node.kill_conn(laddr, faddr) {
            Some(n) => r(Reply::Dropped { messages: n }),
            None => r(error(
                libc::ENOENT,
                format!("no connection {laddr} -> {faddr}"),
            )),
        },
        Request::Shutdown => r(Reply::Ok),
        Request::TraceStart { .. } | Request::TraceStop => {
            r(error(libc::EINVAL, "no trace runs on this connection"))
        }
        Request::SockOpen => {
            let token = ctx.next_sock.fetch_add(1, Ordering::Relaxed);
            ctx.socks
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(token, Arc::new(Socket::with_node(node)));
            mine.push(token);
            r(Reply::Sock { sock: token })
        }
        Request::SockClose { sock: token } => {
            ctx.socks
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&token);
            mine.retain(|&t| t != token);
            r(Reply::Ok)
        }
        other => match sock_request(ctx, other, data) {
            Ok(v) => v,
            Err(f) => r(f.into()),
        },
    }
}

fn sock_request(ctx: &Ctx, req: Request, data: &[u8]) -> Result<(Reply, Vec<u8>), Failed> {
    let ok = |reply| Ok((reply, Vec::new()));
    match req {
        Request::SockBind {
            sock: t,
            addr,
            transport,
        } => {
            let s = sock(ctx, t)?;
            if let Some(k) = transport {
                s.set_transport(k).map_err(|e| failed(&e))?;
            }
            s.bind(addr).map_err(|e| failed(&e))?;
            ok(state(&s))
        }
        Request::SockConnect { sock: t, addr } => {
            let s = sock(ctx, t)?;
            s.connect(addr).map_err(|e| failed(&e))?;
            ok(Reply::Ok)
        }
        Request::SockSet { sock: t, opt } => {
            let s = sock(ctx, t)?;
            match opt {
                SockOpt::Sndbuf(v) => s.set_send_buffer_size(v),
                SockOpt::Rcvbuf(v) => s.set_recv_buffer_size(v),
                SockOpt::CongMonitor(v) => s.set_cong_monitor(v),
                SockOpt::Recverr(v) => s.set_recverr(v),
                SockOpt::Timestamps(v) => s.set_timestamps(v),
            }
            ok(Reply::Ok)
        }
        Request::SockState { sock: t } => {
            let s = sock(ctx, t)?;
            ok(state(&s))
        }
        Request::SockSend {
            sock: t,
            dest,
            dontwait,
            timeout_ms,
        } => {
            let s = sock(ctx, t)?;
            s.set_write_timeout(ms(timeout_ms));
            let len = s
                .send_bytes(Bytes::copy_from_slice(data), dest, dontwait)
                .map_err(|e| failed(&e))?;
            let (readable, writable) = ready(&s);
            ok(Reply::Sent {
                len,
                readable,
                writable,
            })
        }
        Request::SockRecv {
            sock: t,
            max,
            peek,
            dontwait,
            timeout_ms,
        } => {
            let s = sock(ctx, t)?;
            s.set_read_timeout(ms(timeout_ms));
            let flags = RecvFlags {
                peek,
                trunc: false,
                dontwait,
            };
            let got = s
                .recv_bytes(max.min(crate::wire::MAX_MSG_SIZE), flags)
                .map_err(|e| failed(&e))?;
            let (readable, writable) = ready(&s);
            let node = s.node().cloned();
            match got {
                // Daemon sockets cannot start RDMA operations (EOPNOTSUPP), so they never
                // get their notifications.
                Received::RdmaStatus(_) => {
                    Err(failed(&io::Error::from_raw_os_error(libc::EOPNOTSUPP)))
                }
                Received::CongUpdate(mask) => ok(Reply::Recv {
                    full_len: 0,
                    from: None,
                    truncated: false,
                    cong_update: Some(mask),
                    rdma_dest: None,
                    ts_ns: None,
                    readable,
                    writable,
                }),
                Received::Data {
                    msg,
                    full_len,
                    truncated,
                } => Ok((
                    Reply::Recv {
                        full_len,
                        from: Some(msg.from),
                        truncated,
                        cong_update: None,
                        rdma_dest: msg.rdma_dest,
                        ts_ns: node.map(|n| n.wall_ns(msg.rx_time)),
                        readable,
                        writable,
                    },
                    msg.payload.to_vec(),
                )),
            }
        }
        Request::SockCancel { sock: t, dest } => {
            let s = sock(ctx, t)?;
            let n = s.cancel_sent_to(dest).map_err(|e| failed(&e))?;
            ok(Reply::Dropped { messages: n })
        }
        Request::SockWait {
            sock: t,
            rx,
            tx,
            timeout_ms,
        } => {
            let s = sock(ctx, t)?;
            let mut fds = Vec::new();
            if rx {
                fds.push(s.fd().map_err(|e| failed(&e))?);
            }
            if tx {
                fds.push(s.send_fd().map_err(|e| failed(&e))?);
            }
            let _ = sys::wait_any_readable(&fds, Duration::from_millis(timeout_ms.min(60_000)));
            let (readable, writable) = ready(&s);
            ok(Reply::Ready { readable, writable })
        }
        _ => Err(Failed(libc::EINVAL, "unexpected request".into())),
    }
}

fn state(s: &Socket) -> Reply {
    let bound: Option<SocketAddr> = s.local_addr().ok();
    let (readable, writable) = ready(s);
    Reply::SockState {
        bound,
        connected: s.peer_addr().ok(),
        sndbuf: s.send_buffer_size() / 2,
        rcvbuf: s.recv_buffer_size() / 2,
        transport: s.transport(),
        readable,
        writable,
    }
}

fn counters(node: &Node) -> Vec<(String, u64)> {
    node.stats()
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect()
}

/// The transports the node runs ("tcp", "ib").
fn transports(node: &Node) -> Vec<String> {
    [
        (node.tcp_running(), TransportKind::Tcp),
        (node.ib_running(), TransportKind::Ib),
    ]
    .into_iter()
    .filter(|(on, _)| *on)
    .map(|(_, k)| k.name().to_string())
    .collect()
}

/// The node's state for `rds-info`.
pub fn snapshot(node: &Node) -> InfoSnapshot {
    InfoSnapshot {
        connections: node.connections(),
        sockets: node.sockets(),
        send: node.send_queue(),
        retrans: node.retrans_queue(),
        recv: node.recv_queue(),
        tcp: node.tcp_sockets(),
        counters: counters(node),
        transports: transports(node),
        ib_unavailable: node.ib_unavailable(),
        ib_qps: node.ib_qps(),
    }
}
