//! Tasks: one thread per task, each with its own RDS socket bound to `local:(port+1+i)`,
//! sending requests to every remote task `peer:(port+1+j)` and acking theirs (the original's
//! children, as threads sharing one RDS node).
//!
//! Per flow (local task → remote task) the state is the original's: send/receive sequence
//! numbers, send/receive slot indexes, requests pending an ack and requests not yet acked,
//! and a congestion mark set by `ENOBUFS` and cleared by a congestion-update notification.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rds_core::message::{RdmaNotify, RdmaStatus, Received};
use rds_core::rdma::{LocalVec, MrFlags, RdmaArgs, RdmaMap, SendCtl};
use rds_core::{Node, RecvFlags, Socket};

use crate::control::{errno_suffix, WireOptions};
use crate::msg::{self, Bogus, Header, RdmaFields, OP_ACK, OP_REQ, RDMA_OP_READ, RDMA_OP_WRITE};
use crate::opts::Fatal;
use crate::rdma_mode::{self, Area};
use crate::stats::{Stat, TaskStats};

/// Most messages handled per receive round (keeps sending and receiving fair).
const DRAIN_MAX: usize = 4096;
/// Longest poll before the task looks at its control flags again.
const POLL_TIMEOUT: Duration = Duration::from_millis(100);

/// What one side's tasks need to know.
#[derive(Debug, Clone)]
pub struct Env {
    /// The effective options (after the exchange).
    pub w: WireOptions,
    /// Address the sockets bind to.
    pub local: IpAddr,
    /// Address of the remote tasks.
    pub peer: IpAddr,
    /// IPv6 headers.
    pub v6: bool,
    /// Active side (does work in one-way mode).
    pub active: bool,
    /// Serve sockets from this node (loopback mode); else [`Socket::new`].
    pub node: Option<Node>,
    /// `--show-outliers`.
    pub rtt_threshold: Option<u64>,
    /// `--cancel-sent-to`.
    pub cancel_sent_to: bool,
    /// `--transport`, pinned on each socket before bind (`SO_RDS_TRANSPORT`), so that an
    /// embedded node or the kernel serves an RDMA device's address over TCP when asked.
    pub transport: Option<rds_core::info::TransportKind>,
}

impl Env {
    /// The RDS port of task `i`.
    pub fn port(&self, i: u16) -> u16 {
        self.w.starting_port.wrapping_add(1).wrapping_add(i)
    }
}

/// Flags shared by the tasks of one side and the reporting thread.
#[derive(Debug, Default)]
pub struct Control {
    start_at: OnceLock<Instant>,
    /// Stop sending (drain only).
    pub stopping: AtomicBool,
    /// Leave the loop.
    pub exit: AtomicBool,
    /// Cancel everything sent to the peer (RDS_CANCEL_SENT_TO), report, and leave.
    pub cancel: AtomicBool,
    /// Tasks that finished their cancel report.
    pub cancelled: AtomicUsize,
    /// The node serving task 0's socket (for `--show-perfdata` counters).
    pub node: OnceLock<Node>,
    /// Task 0's socket goes through the daemon.
    pub via_daemon: AtomicBool,
    burst: [AtomicI64; 2],
    /// RDMA notifications received, by status code (0 = success ... 4 = other error).
    pub rdma_status: [AtomicU64; 5],
}

impl Control {
    /// Notifications received with a status other than success, by status code.
    pub fn rdma_failures(&self) -> [u64; 5] {
        let mut v: [u64; 5] = std::array::from_fn(|i| self.rdma_status[i].load(Relaxed));
        v[0] = 0;
        v
    }
}

impl Control {
    /// Lets the tasks start at `at`.
    pub fn release(&self, at: Instant) {
        let _ = self.start_at.set(at);
    }
}

/// The running tasks of one side.
#[derive(Debug)]
pub struct Tasks {
    /// Counters, one per task.
    pub stats: Vec<Arc<TaskStats>>,
    /// Shared flags.
    pub ctl: Arc<Control>,
    handles: Vec<JoinHandle<()>>,
}

impl Tasks {
    /// Starts `nr_tasks` threads and waits until each has bound its socket.
    ///
    /// # Errors
    /// A task could not create or bind its socket (the original's messages).
    pub fn start(env: Env) -> Result<Tasks, Fatal> {
        let env = Arc::new(env);
        let ctl = Arc::new(Control::default());
        let n = env.w.nr_tasks;
        let (tx, rx) = mpsc::channel();
        let mut stats = Vec::new();
        let mut handles = Vec::new();
        for i in 0..n {
            let st = Arc::new(TaskStats::default());
            stats.push(st.clone());
            let (env, ctl, tx) = (env.clone(), ctl.clone(), tx.clone());
            let h = std::thread::Builder::new()
                .name(format!("task-{i}"))
                .spawn(move || match Task::new(i, &env, &ctl, st) {
                    Ok(mut t) => {
                        let _ = tx.send(Ok(()));
                        t.run();
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                })
                .map_err(|e| {
                    Fatal::new(format!("forking child nr {i} failed{}", errno_suffix(&e)))
                })?;
            handles.push(h);
        }
        drop(tx);
        let deadline = Instant::now() + Duration::from_secs(30);
        for i in 0..n {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    ctl.exit.store(true, Relaxed);
                    return Err(e);
                }
                Err(_) => {
                    ctl.exit.store(true, Relaxed);
                    return Err(Fatal::new(format!("child {i} did not become ready\n")));
                }
            }
        }
        Ok(Tasks {
            stats,
            ctl,
            handles,
        })
    }

    /// Asks the tasks to leave and waits for them (bounded).
    pub fn join(self) {
        self.ctl.exit.store(true, Relaxed);
        let deadline = Instant::now() + Duration::from_secs(5);
        for h in self.handles {
            while !h.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if h.is_finished() {
                let _ = h.join();
            }
        }
    }

    /// Has every task cancel its messages to the peer and report; waits (bounded).
    pub fn cancel_all(&self) {
        self.ctl.cancel.store(true, Relaxed);
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.ctl.cancelled.load(Relaxed) < self.handles.len() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Prints `out` on stdout and `err` on stderr, then exits 1 (the original's `die`).
pub fn die(out: &str, err: &str) -> ! {
    use std::io::Write;
    let mut so = std::io::stdout().lock();
    let _ = so.write_all(out.as_bytes());
    let _ = so.flush();
    eprint!("{err}");
    crate::nodes::shutdown_all();
    std::process::exit(1);
}

#[derive(Debug)]
struct Flow {
    nr: u16,
    dst: SocketAddr,
    send_seq: u32,
    recv_seq: u32,
    send_index: u32,
    recv_index: u32,
    pending: u32,
    unacked: u32,
    congested: bool,
    send_time: Vec<Instant>,
    /// RDMA: the op of the next request (toggled in mode 0).
    rdma_next_op: u8,
    /// RDMA: per send slot, a cookie from `RDS_GET_MR` not yet sent (or cached).
    req_key: Vec<u64>,
    /// RDMA: per receive slot, what the ack of that request must do.
    ack_rdma: Vec<Option<RdmaFields>>,
    /// RDMA: per slot, the op of an ack whose notification has not come yet.
    inflight: Vec<Option<Inflight>>,
    /// RDMA: an ack waits for a notification of its slot (the original's `EBADSLT`).
    drain_rdmas: bool,
}

/// An RDMA operation this side started with an ack.
#[derive(Debug, Clone, Copy)]
struct Inflight {
    op: u8,
    pattern: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Burst {
    Send = 0,
    Recv = 1,
}

struct Task {
    env: Arc<Env>,
    ctl: Arc<Control>,
    stats: Arc<TaskStats>,
    sock: Socket,
    local: SocketAddr,
    flows: Vec<Flow>,
    req_tpl: Vec<u8>,
    ack_tpl: Vec<u8>,
    pattern: Option<Vec<u8>>,
    depth: u32,
    do_work: bool,
    /// RDMA buffers (`-D`).
    area: Option<Area>,
    pid: u32,
}

fn os_err(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

impl Task {
    fn new(
        id: u16,
        env: &Arc<Env>,
        ctl: &Arc<Control>,
        stats: Arc<TaskStats>,
    ) -> Result<Task, Fatal> {
        let w = &env.w;
        let sock = match &env.node {
            Some(n) => Socket::with_node(n),
            None => Socket::new()
                .map_err(|e| Fatal::new(format!("socket(21, 5, 0) failed{}", errno_suffix(&e))))?,
        };
        let local = SocketAddr::new(env.local, env.port(id));
        if let Some(t) = env.transport {
            let _ = sock.set_transport(t);
        }
        sock.bind(local)
            .map_err(|e| Fatal::new(format!("bind() failed{}", errno_suffix(&e))))?;
        let bytes = u64::from(w.nr_tasks)
            * u64::from(w.req_depth)
            * (u64::from(w.req_size) + u64::from(w.ack_size))
            * 2;
        let bytes = bytes.min(i32::MAX as u64) as usize;
        sock.set_send_buffer_size(bytes);
        sock.set_recv_buffer_size(bytes);
        let warn = id == 0 || w.always_bursty != 0;
        let got = sock.send_buffer_size();
        if got / 2 < bytes && warn {
            eprintln!("getsockopt(SNDBUF) returned {got}, we wanted {bytes} * 2");
        }
        let got = sock.recv_buffer_size();
        if got / 2 < bytes && warn {
            eprintln!("getsockopt(RCVBUF) returned {got}, we need {bytes} * 2");
        }
        if w.use_cong_monitor != 0 {
            sock.set_cong_monitor(true);
        }
        sock.set_nonblocking(true);
        if id == 0 {
            if let Some(n) = sock.node() {
                let _ = ctl.node.set(n.clone());
            }
            ctl.via_daemon.store(sock.via_daemon(), Relaxed);
        }
        let hdr = msg::header_size(env.v6);
        let pattern = (w.verify != 0).then(|| msg::pattern(w.req_size.max(w.ack_size) as usize));
        let tpl = |size: u32| {
            let mut v = vec![0u8; size as usize];
            if let Some(p) = &pattern {
                let n = v.len() - hdr;
                v[hdr..].copy_from_slice(&p[..n]);
            }
            v
        };
        let now = Instant::now();
        let flows = (0..w.nr_tasks)
            .map(|j| Flow {
                nr: j,
                dst: SocketAddr::new(env.peer, env.port(j)),
                send_seq: 0,
                recv_seq: 0,
                send_index: 0,
                recv_index: 0,
                pending: 0,
                unacked: 0,
                congested: false,
                send_time: vec![now; w.req_depth as usize],
                rdma_next_op: if j & 1 == 1 {
                    RDMA_OP_READ
                } else {
                    RDMA_OP_WRITE
                },
                req_key: vec![0; w.req_depth as usize],
                ack_rdma: vec![None; w.req_depth as usize],
                inflight: vec![None; w.req_depth as usize],
                drain_rdmas: false,
            })
            .collect();
        let area = if w.rdma_size != 0 {
            Some(Area::new(w)?)
        } else {
            None
        };
        Ok(Task {
            env: env.clone(),
            ctl: ctl.clone(),
            stats,
            local,
            flows,
            req_tpl: tpl(w.req_size),
            ack_tpl: tpl(w.ack_size),
            pattern,
            depth: w.req_depth,
            do_work: w.simplex == 0 || env.active,
            sock,
            area,
            pid: std::process::id(),
        })
    }

    fn run(&mut self) {
        // Wait for the release, then for the start time.
        loop {
            if self.ctl.exit.load(Relaxed) {
                return;
            }
            if let Some(&at) = self.ctl.start_at.get() {
                let now = Instant::now();
                if at > now {
                    std::thread::sleep((at - now).min(POLL_TIMEOUT));
                    continue;
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // The original's children run at nice 5, with their I/O done by the kernel in their
        // own context. Here a node's I/O thread does part of it, at the process's priority:
        // a task below it was preempted by it at every hand-over (on one CPU, a context
        // switch each way per message: `--loopback -d 32` ran at two thirds of its rate at
        // 1.75x the CPU per request). Tasks keep the process's priority.

        // The socket's own wait serves every backend; the kernel's has no writability to
        // wait for (no send descriptor). The descriptors themselves are not asked for: a
        // socket whose descriptors were handed out has every readiness change written to them.
        let can_wait_out = !self.sock.via_kernel();
        let bursty = self.env.w.always_bursty != 0;
        let sync = self.env.w.sync_always_bursty != 0;
        let mut mode = if self.do_work {
            Burst::Send
        } else {
            Burst::Recv
        };
        if sync {
            self.ctl.burst[mode as usize].fetch_add(1, Relaxed);
        }
        let mut want_out = true;
        loop {
            if self.ctl.exit.load(Relaxed) {
                return;
            }
            if self.ctl.cancel.load(Relaxed) {
                if self.env.cancel_sent_to {
                    self.cancel_report();
                }
                self.ctl.cancelled.fetch_add(1, Relaxed);
                return;
            }
            let want_in = !bursty || mode == Burst::Recv;
            // The socket's own wait: on an embedded node this thread reads the transport
            // itself while it waits, so a reply wakes it directly.
            let ready = match self
                .sock
                .wait(want_in, want_out && can_wait_out, POLL_TIMEOUT)
            {
                Ok(r) => r,
                Err(e) => die("", &format!("poll failed{}", errno_suffix(&e))),
            };
            want_out = false;
            if ready.0 {
                self.drain();
            }
            if self.ctl.stopping.load(Relaxed) {
                continue;
            }
            let can_send = ready.1 || !can_wait_out;
            let work = self.do_work && (!bursty || mode == Burst::Send);
            let cong_monitor = self.env.w.use_cong_monitor != 0;
            for i in 0..self.flows.len() {
                if cong_monitor && self.flows[i].congested {
                    continue;
                }
                if self.flows[i].drain_rdmas {
                    continue;
                }
                if let Err(errno) = self.send_anything(i, can_send, work) {
                    want_out = true;
                    if errno == libc::ENOBUFS {
                        self.flows[i].congested = true;
                    } else if errno == libc::EBADSLT {
                        self.flows[i].drain_rdmas = true;
                    }
                }
            }
            if !bursty {
                continue;
            }
            let mut all_clear = true;
            let mut all_full = true;
            for f in &self.flows {
                if f.pending > 0 {
                    all_clear = false;
                }
                if f.pending < self.depth {
                    all_full = false;
                }
                if f.unacked > 0 {
                    all_clear = false;
                    all_full = false;
                }
            }
            let next = match mode {
                Burst::Send if all_full => Some(Burst::Recv),
                Burst::Recv if self.do_work && all_clear => Some(Burst::Send),
                _ => None,
            };
            if let Some(next) = next {
                if sync {
                    self.switch_sync(mode, next);
                }
                mode = next;
                if mode == Burst::Send {
                    want_out = true;
                }
            }
        }
    }

    /// The semaphore dance of --sync-always-bursty, among this side's tasks: leave the old
    /// mode, wait (bounded) until no task is in it, enter the new one.
    fn switch_sync(&self, old: Burst, new: Burst) {
        self.ctl.burst[old as usize].fetch_sub(1, Relaxed);
        let deadline = Instant::now() + Duration::from_secs(1);
        while self.ctl.burst[old as usize].load(Relaxed) > 0
            && Instant::now() < deadline
            && !self.ctl.exit.load(Relaxed)
        {
            std::thread::sleep(Duration::from_micros(200));
        }
        self.ctl.burst[new as usize].fetch_add(1, Relaxed);
    }

    fn cancel_report(&mut self) {
        let tid = nix::unistd::gettid().as_raw();
        for j in 0..self.flows.len() {
            let dst = self.flows[j].dst;
            let t0 = Instant::now();
            if let Err(e) = self.sock.cancel_sent_to(dst) {
                die(
                    "",
                    &format!("RDS_CANCEL_SENT_TO[{j}] failed{}", errno_suffix(&e)),
                );
            }
            let ms = t0.elapsed().as_millis();
            println!(
                "RDS_CANCEL_SENT_TO({}:{})[{tid}] took {ms} msec",
                dst.ip(),
                dst.port()
            );
        }
    }

    /// Pending acks, then requests while fewer than `depth` are outstanding. `Err(errno)` for
    /// EAGAIN/ENOBUFS (and for "cannot send now").
    fn send_anything(&mut self, i: usize, can_send: bool, do_work: bool) -> Result<(), i32> {
        while self.flows[i].unacked > 0 {
            if !can_send {
                return Err(libc::EAGAIN);
            }
            self.send_ack(i)?;
        }
        while do_work && self.flows[i].pending < self.depth {
            if !can_send {
                return Err(libc::EAGAIN);
            }
            self.send_req(i)?;
        }
        Ok(())
    }

    fn header(&self, f: &Flow, op: u8, index: u32) -> Header {
        Header {
            seq: f.send_seq,
            from: self.local,
            to: f.dst,
            index: index as u16,
            op,
            retry: 0,
        }
    }

    /// A message from the template: large ones in a buffer of rds-core's pool, which the
    /// library gives back when it is done with it (no allocation per message).
    fn message(&self, tpl: &[u8], h: &Header, rdma: Option<&RdmaFields>) -> Vec<u8> {
        let mut v = rds_core::buf::take(tpl.len());
        v.extend_from_slice(tpl);
        h.emit(&mut v, self.env.v6);
        if let Some(r) = rdma {
            r.emit(&mut v);
        }
        v
    }

    fn trace(&self, s: std::fmt::Arguments<'_>) {
        if self.env.w.tracing != 0 {
            eprintln!("{s}");
        }
    }

    fn send_result<T>(&self, r: io::Result<T>) -> Result<T, i32> {
        match r {
            Ok(n) => Ok(n),
            Err(e) => {
                let errno = os_err(&e);
                if errno == libc::EAGAIN || errno == libc::ENOBUFS {
                    Err(errno)
                } else {
                    die("", &format!("sendto() failed{}", errno_suffix(&e)))
                }
            }
        }
    }

    fn send(&self, m: Vec<u8>, dst: SocketAddr) -> Result<usize, i32> {
        self.send_result(
            self.sock
                .send_bytes(rds_core::buf::freeze(m), Some(dst), true),
        )
    }

    fn send_ctl(&self, m: &[u8], dst: SocketAddr, ctl: &SendCtl) -> Result<usize, i32> {
        self.send_result(self.sock.send_ctl(m, Some(dst), ctl))
            .map(|s| s.len)
    }

    /// The RDMA part of request `slot` of flow `i` (the original's `rdma_build_req`): a
    /// region cookie (`RDS_GET_MR` now, or `RDMA_MAP` at send), the op, the pattern, and the
    /// region filled for `-v`.
    fn build_rdma_req(&mut self, i: usize, slot: u32) -> (RdmaFields, SendCtl) {
        let w = &self.env.w;
        let Some(area) = self.area.as_ref() else {
            die("", "internal error: RDMA request without RDMA buffers\n");
        };
        let off = area.region(i, slot as usize);
        let flags = MrFlags {
            use_once: w.rdma_use_once != 0,
            invalidate: false,
        };
        let s = slot as usize;
        if w.rdma_use_get_mr != 0 && self.flows[i].req_key[s] == 0 {
            match self.sock.get_mr(&area.buf, off, area.len, flags) {
                Ok(c) => {
                    self.trace(format_args!("RDS get_rdma_key() = {c:x}"));
                    self.flows[i].req_key[s] = c;
                }
                Err(e) => die(
                    "",
                    &format!("setsockopt(RDS_GET_MR) failed{}", errno_suffix(&e)),
                ),
            }
        }
        let f = &mut self.flows[i];
        f.rdma_next_op = match w.rw_mode {
            0 => 3 - f.rdma_next_op,
            1 => RDMA_OP_READ,
            _ => RDMA_OP_WRITE,
        };
        let r = RdmaFields {
            op: f.rdma_next_op,
            addr: off as u64,
            phyaddr: 0,
            pattern: (u64::from(f.send_seq) << 32) | u64::from(self.pid),
            key: f.req_key[s],
            size: w.rdma_size,
            vector: w.rdma_vector,
            remote_err: 0,
        };
        if w.verify != 0 {
            let fill = if r.op == RDMA_OP_READ { r.pattern } else { 0 };
            if let Err(e) = area.fill(off, fill) {
                die("", &format!("filling the RDMA buffer failed: {e}\n"));
            }
        }
        self.trace(format_args!(
            "Requesting RDMA {} for pattern {:x} local offset {off}",
            if r.op == RDMA_OP_READ {
                "read"
            } else {
                "write"
            },
            r.pattern
        ));
        let ctl = if r.key != 0 {
            SendCtl {
                rdma_dest: Some(r.key),
                ..SendCtl::default()
            }
        } else {
            SendCtl {
                rdma_map: Some(RdmaMap {
                    buf: area.buf.clone(),
                    off,
                    len: area.len,
                    flags,
                }),
                ..SendCtl::default()
            }
        };
        (r, ctl)
    }

    fn send_req(&mut self, i: usize) -> Result<(), i32> {
        let f = &self.flows[i];
        let idx = f.send_index;
        let with_rdma = self.env.w.rdma_size != 0 && f.send_seq > 10;
        let h = self.header(f, OP_REQ, idx);
        let dst = f.dst;
        let rdma = with_rdma.then(|| self.build_rdma_req(i, idx));
        let m = self.message(&self.req_tpl, &h, rdma.as_ref().map(|r| &r.0));
        let t0 = Instant::now();
        let n = match &rdma {
            None => self.send(m, dst)?,
            Some((_, ctl)) => self.send_ctl(&m, dst, ctl)?,
        };
        let us = t0.elapsed().as_micros() as u64;
        self.stats.inc(Stat::ReqTx, n as u64);
        self.stats.inc(Stat::SendmsgUsecs, us);
        let depth = self.depth;
        let cache = self.env.w.rdma_cache_mrs != 0;
        let f = &mut self.flows[i];
        if rdma.is_some() && !cache {
            // The key went out with this request.
            f.req_key[idx as usize] = 0;
        }
        f.send_time[idx as usize] = t0;
        f.send_seq = f.send_seq.wrapping_add(1);
        f.send_index = (f.send_index + 1) % depth;
        f.pending += 1;
        Ok(())
    }

    fn send_ack(&mut self, i: usize) -> Result<(), i32> {
        let f = &self.flows[i];
        let depth = u64::from(self.depth);
        let q = ((u64::from(f.recv_index) + depth - u64::from(f.unacked) % depth) % depth) as u32;
        let qs = q as usize;
        let echo = f.ack_rdma[qs];
        let op = echo.filter(|r| r.op != 0 && r.remote_err == 0);
        if op.is_some() && f.inflight[qs].is_some() {
            // The previous RDMA of this slot has not completed: drain first.
            self.trace(format_args!(
                "Drain RDMA 0x{:x}",
                rdma_mode::user_token(
                    f.send_seq,
                    u32::from(f.nr),
                    self.depth,
                    q,
                    rdma_mode::TOKEN_RDMA
                )
            ));
            return Err(libc::EBADSLT);
        }
        let h = self.header(f, OP_ACK, q);
        let m = self.message(&self.ack_tpl, &h, echo.as_ref());
        let dst = f.dst;
        let w = &self.env.w;
        let n = match (op, self.area.as_ref()) {
            (Some(r), Some(area)) => {
                let token = rdma_mode::user_token(
                    h.seq,
                    u32::from(f.nr),
                    self.depth,
                    q,
                    rdma_mode::TOKEN_RDMA,
                );
                let local = area.local(i, qs);
                let write = r.op == RDMA_OP_WRITE;
                if write && w.verify != 0 {
                    if let Err(e) = area.fill(local, r.pattern) {
                        die("", &format!("filling the RDMA buffer failed: {e}\n"));
                    }
                }
                let size = w.rdma_size as usize;
                let args = RdmaArgs {
                    cookie: r.key,
                    remote_addr: r.phyaddr,
                    local: (0..w.rdma_vector as usize)
                        .map(|v| LocalVec {
                            buf: area.buf.clone(),
                            off: local + v * size,
                            len: size,
                        })
                        .collect(),
                    write,
                    fence: !write && w.rdma_use_fence != 0,
                    notify: true,
                    silent: false,
                    user_token: token,
                };
                self.trace(format_args!(
                    "RDS issuing rdma for token 0x{token:x} key 0x{:x} len {} vector {}",
                    r.key, w.rdma_size, w.rdma_vector
                ));
                let ctl = SendCtl {
                    rdma: Some(args),
                    ..SendCtl::default()
                };
                let n = self.send_ctl(&m, dst, &ctl)?;
                self.flows[i].inflight[qs] = Some(Inflight {
                    op: r.op,
                    pattern: r.pattern,
                });
                n
            }
            _ => self.send(m, dst)?,
        };
        if self.env.w.tracing != 0 {
            eprintln!(
                "ACK: task {} seq {} index {}",
                self.flows[i].nr, h.seq, h.index
            );
        }
        self.stats.inc(Stat::AckTx, n as u64);
        match op.map(|r| r.op) {
            Some(RDMA_OP_WRITE) => self
                .stats
                .inc(Stat::MbusOut, u64::from(self.env.w.rdma_size)),
            Some(RDMA_OP_READ) => self
                .stats
                .inc(Stat::MbusIn, u64::from(self.env.w.rdma_size)),
            _ => {}
        }
        let f = &mut self.flows[i];
        f.ack_rdma[qs] = None;
        f.send_seq = f.send_seq.wrapping_add(1);
        f.unacked -= 1;
        Ok(())
    }

    fn drain(&mut self) {
        let max = self.env.w.req_size.max(self.env.w.ack_size) as usize;
        let flags = RecvFlags {
            dontwait: true,
            ..Default::default()
        };
        for _ in 0..DRAIN_MAX {
            match self.sock.recv_bytes(max, flags) {
                Ok(Received::CongUpdate(mask)) => {
                    for f in &mut self.flows {
                        if mask & (1u64 << (f.dst.port() % 64)) != 0 {
                            f.congested = false;
                        }
                    }
                }
                Ok(Received::RdmaStatus(n)) => self.rdma_completed(n),
                // A zero-length message (a ping's pong) carries nothing for us, as in the
                // original, which skips empty receives.
                Ok(Received::Data { full_len: 0, .. }) => {}
                Ok(Received::Data { msg, full_len, .. }) => {
                    let now = Instant::now();
                    self.handle(&msg.payload, full_len, msg.from, now, msg.rdma_dest);
                }
                Err(_) => return,
            }
        }
    }

    /// An RDMA notification (the original's `rdma_mark_completed`): counts its status, frees
    /// the slot, and with `-v` checks what an RDMA read brought.
    fn rdma_completed(&mut self, n: RdmaNotify) {
        let code = n.status.code() as usize;
        if let Some(c) = self.ctl.rdma_status.get(code) {
            c.fetch_add(1, Relaxed);
        }
        self.trace(format_args!(
            "RDS rdma completion for token 0x{:x}",
            n.user_token
        ));
        let Some((_seq, flow, slot, kind)) = rdma_mode::parse_token(n.user_token, self.depth)
        else {
            return;
        };
        let (flow, slot) = (flow as usize, slot as usize);
        let Some(f) = self.flows.get_mut(flow) else {
            return;
        };
        if n.status != RdmaStatus::Success && self.env.w.tracing != 0 {
            eprintln!(
                "{}:{}: {} failed: {}",
                f.dst.ip(),
                f.dst.port(),
                if kind != 0 { "SEND" } else { "RDMA" },
                rdma_mode::status_text(n.status)
            );
        }
        let done = f.inflight.get_mut(slot).and_then(Option::take);
        f.drain_rdmas = false;
        let dst = f.dst;
        if n.status != RdmaStatus::Success || self.env.w.verify == 0 {
            return;
        }
        if let (Some(d), Some(area)) = (done, self.area.as_ref()) {
            if d.op == RDMA_OP_READ {
                self.check_rdma(area, area.local(flow, slot), d.pattern, "read from", dst);
            }
        }
    }

    /// Dies when the RDMA buffer at `off` does not hold `pattern` in every word.
    fn check_rdma(&self, area: &Area, off: usize, pattern: u64, what: &str, peer: SocketAddr) {
        match area.compare(off, pattern) {
            Ok(None) => {
                self.trace(format_args!("compare pass pattern {pattern:x}"));
            }
            Ok(Some((first, bad, words))) => die(
                &format!(
                    "The RDMA {what} {}:{} has a corrupted pattern at offset {first}; {bad} out \
                     of {words} words corrupted (pattern {pattern:x})\n",
                    peer.ip(),
                    peer.port()
                ),
                &format!(
                    "RDMA data from {}:{} to id {} bogus\n",
                    peer.ip(),
                    peer.port(),
                    self.local.port()
                ),
            ),
            Err(e) => die("", &format!("reading the RDMA buffer failed: {e}\n")),
        }
    }

    /// The requester's side of an ack with RDMA (the original's `rdma_process_ack`).
    fn rdma_ack(&mut self, flow: usize, slot: u32, r: &RdmaFields, from: SocketAddr) {
        let w = &self.env.w;
        self.trace(format_args!(
            "RDS rcvd rdma {} ACK for request key {:x} len {}",
            if r.op == RDMA_OP_WRITE {
                "write"
            } else {
                "read"
            },
            r.key,
            r.size
        ));
        if w.rdma_use_once == 0 && w.rdma_cache_mrs == 0 {
            self.trace(format_args!("RDS free_rdma_key({:x})", r.key));
            let _ = self.sock.free_mr(r.key, false);
        }
        match r.op {
            RDMA_OP_WRITE => {
                self.stats.inc(Stat::MbusIn, u64::from(r.size));
                if w.verify != 0 {
                    if let Some(area) = self.area.as_ref() {
                        let off = area.region(flow, slot as usize);
                        self.check_rdma(area, off, r.pattern, "write by", from);
                    }
                }
            }
            RDMA_OP_READ => self.stats.inc(Stat::MbusOut, u64::from(r.size)),
            _ => {}
        }
    }

    /// The responder's checks of a request's RDMA fields (the original's `rdma_validate`).
    fn rdma_validate(&self, r: &RdmaFields) {
        let w = &self.env.w;
        if r.size != w.rdma_size {
            die("", &format!("Unexpected RDMA size {} in request\n", r.size));
        }
        if r.vector != w.rdma_vector {
            die(
                "",
                &format!(
                    "Unexpected RDMA vector {} in request {} \n",
                    r.vector, w.rdma_vector
                ),
            );
        }
        if r.op != RDMA_OP_READ && r.op != RDMA_OP_WRITE {
            die("", &format!("Unexpected RDMA op {} in request\n", r.op));
        }
        self.trace(format_args!(
            "RDS received request to issue rdma {} len {} rva {:x} key {:x} pattern {:x}",
            if r.op == RDMA_OP_WRITE {
                "write to"
            } else {
                "read from"
            },
            r.size,
            r.addr,
            r.key,
            r.pattern
        ));
    }

    fn handle(
        &mut self,
        payload: &[u8],
        len: usize,
        from: SocketAddr,
        now: Instant,
        rdma_dest: Option<u64>,
    ) {
        let w = &self.env.w;
        let v6 = self.env.v6;
        if len < msg::header_size(v6) || payload.len() < msg::header_size(v6) {
            die("", &format!("recvmsg() returned short data: {len}"));
        }
        let task_index = i64::from(from.port()) - i64::from(w.starting_port) - 1;
        if task_index < 0 || task_index >= i64::from(w.nr_tasks) {
            die(
                "",
                &format!("received bad task index {}\n", task_index as u32),
            );
        }
        let ti = task_index as usize;
        let op = payload[18];
        let depth = self.depth;
        let expect = match op {
            OP_REQ => {
                self.stats.inc(Stat::ReqRx, len as u64);
                if len != w.req_size as usize {
                    die("", &format!("req size {len}, not {}\n", w.req_size));
                }
                self.flows[ti].recv_index
            }
            OP_ACK => {
                self.stats.inc(Stat::AckRx, len as u64);
                if len != w.ack_size as usize {
                    die("", &format!("ack size {len}, not {}\n", w.ack_size));
                }
                let f = &self.flows[ti];
                ((u64::from(f.send_index) + u64::from(depth) - u64::from(f.pending % depth.max(1)))
                    % u64::from(depth)) as u32
            }
            other => die("", &format!("unknown op {other}\n")),
        };
        let want = Header {
            seq: self.flows[ti].recv_seq,
            from,
            to: self.local,
            index: expect as u16,
            op,
            retry: 0,
        };
        if let Err(b) = msg::check(payload, &want, v6, self.pattern.as_deref()) {
            let block = match b {
                Bogus::Header(s) | Bogus::Payload(s) => s,
            };
            die(
                &block,
                &format!(
                    "header from {}:{} to id {} bogus\n",
                    from.ip(),
                    from.port(),
                    self.local.port()
                ),
            );
        }
        let mut r = RdmaFields::parse(payload);
        if op == OP_ACK {
            let f = &mut self.flows[ti];
            let rtt = now
                .saturating_duration_since(f.send_time[expect as usize])
                .as_micros() as u64;
            self.stats.inc(Stat::RttUsecs, rtt);
            self.stats.rtt(rtt);
            if self.env.rtt_threshold.is_some_and(|t| rtt > t) {
                eprintln!("Found RTT = 0x{rtt:x}");
            }
            if f.pending > 0 {
                f.pending -= 1;
            }
            if r.key != 0 {
                self.rdma_ack(ti, expect, &r, from);
            }
        } else {
            if let Some(c) = rdma_dest {
                r.key = c;
            }
            let slot = if r.key != 0 {
                self.rdma_validate(&r);
                Some(r)
            } else {
                None
            };
            let f = &mut self.flows[ti];
            f.ack_rdma[f.recv_index as usize] = slot;
            f.unacked = f.unacked.saturating_add(1);
            f.recv_index = (f.recv_index + 1) % depth;
        }
        let f = &mut self.flows[ti];
        f.recv_seq = f.recv_seq.wrapping_add(1);
    }
}
