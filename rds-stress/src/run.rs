//! The two roles and the loopback mode: the control connection, starting the tasks, the
//! per-second report loop and the summary. SIGINT and SIGTERM are taken by a thread of their
//! own: once the tasks are released they end the report loop, which prints the summary (and
//! the JSON document) and returns 128 + the signal number.

use std::io::{IsTerminal, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicI32};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use rds_core::errno::strerror;
use rds_core::{CtlMode, Node, NodeConfig};

use crate::control::{
    self, errno_suffix, missing_json_keys, read_options, recv_byte, recv_json, send_all, send_json,
    CtlError, WireOptions, JSON_FLAG_OFFSET, JSON_IDENTIFIER,
};
use crate::msg::header_size;
use crate::opts::{check_limits, set_addr, Args, Fatal, Resolved};
use crate::output::{self, JsonInterval, JsonSummary, ProcStat};
use crate::plot;
use crate::rdma_mode;
use crate::stats::{self, Counter, Snapshotter, Soakers, Stat, NR_STATS};
use crate::task::{Control, Env, Tasks};

/// Where human output goes: stdout, or stderr with `--json` (stdout then carries only the
/// JSON document); above the progress bar when one is shown.
#[derive(Debug, Default)]
pub struct Printer {
    json: bool,
    bar: Mutex<Option<ProgressBar>>,
}

impl Printer {
    /// Prints `s` (no newline added).
    pub fn out(&self, s: &str) {
        let bar = self.bar.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = bar.as_ref() {
            let to_term = if self.json {
                true
            } else {
                std::io::stdout().is_terminal()
            };
            if to_term {
                b.println(s.trim_end_matches('\n'));
                return;
            }
        }
        if self.json {
            eprint!("{s}");
        } else {
            let mut o = std::io::stdout().lock();
            let _ = o.write_all(s.as_bytes());
            let _ = o.flush();
        }
    }
}

/// Tasks that the signal and abort handlers can reach.
/// A side's control flags and its number of tasks.
type Live = (Arc<Control>, usize);

static LIVE: OnceLock<Mutex<Vec<Live>>> = OnceLock::new();

fn live() -> &'static Mutex<Vec<Live>> {
    LIVE.get_or_init(|| Mutex::new(Vec::new()))
}

fn register(t: &Tasks) {
    live()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((t.ctl.clone(), t.stats.len()));
}

/// The run is interrupted (SIGINT with --cancel-sent-to, or --abort-after): every task
/// cancels what it sent to the peer and reports (when asked), then the process exits.
fn interrupt(code: i32) -> ! {
    let l = live().lock().unwrap_or_else(|p| p.into_inner()).clone();
    for (c, _) in &l {
        c.cancel.store(true, Relaxed);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    for (c, n) in &l {
        while c.cancelled.load(Relaxed) < *n && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let _ = std::io::stdout().flush();
    crate::nodes::shutdown_all();
    std::process::exit(code);
}

const NO_ASYNC: &str = "option --async needs UEK's RDS_CMSG_ASYNC_SEND, which this RDS stack \
does not have\n";

/// Runs rds-stress with parsed arguments; returns the exit code.
///
/// # Errors
/// A fatal error with the original's message.
pub fn run(args: &Args) -> Result<i32, Fatal> {
    let r = args.resolve()?;
    rds_cli::apply_stack("rds-stress", args.stack).map_err(|m| Fatal::new(format!("{m}\n")))?;
    watch_signals(args.cancel_sent_to);
    let soak = r.report_cpu.then(|| {
        let s = Soakers::start();
        println!("started {} cycle soaking processes", s.len());
        s
    });
    if r.wire.async_send != 0 {
        return Err(Fatal::new(NO_ASYNC));
    }
    let printer = Printer {
        json: r.json,
        ..Default::default()
    };
    if r.reset {
        return reset(&r);
    }
    if r.loopback {
        return run_loopback(&r, &printer, soak.as_ref());
    }
    if r.send_addr.is_some() {
        run_active(&r, &printer, soak.as_ref())
    } else {
        run_passive(&r, &printer, soak.as_ref())
    }
}

/// The signal (SIGINT or SIGTERM) that asked the measurement to stop, or 0.
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);
/// Whether the tasks are released: a signal then ends the run with its summary.
static MEASURING: AtomicBool = AtomicBool::new(false);

/// The signal that ended the measurement, if one did.
fn stop_signal() -> Option<i32> {
    match STOP_SIGNAL.load(Relaxed) {
        0 => None,
        n => Some(n),
    }
}

/// Takes SIGINT and SIGTERM on a thread of their own ([`rds_cli::StopSignals`]: blocked in
/// every other thread, so this must run before any thread starts). Once the tasks are released, the first signal ends the
/// measurement: the run prints its summary and exits with 128 + the signal number (130, 143).
/// Before that, or at a second signal, the process exits at once with that status. With
/// `--cancel-sent-to`, SIGINT cancels what the tasks sent and exits 130 ([`interrupt`]).
fn watch_signals(cancel_sent_to: bool) {
    use nix::sys::signal::Signal;
    let Ok(stop) = rds_cli::StopSignals::block() else {
        return;
    };
    let _ = stop.spawn("signals", move |sig| {
        let n = sig as i32;
        if sig == Signal::SIGINT && cancel_sent_to {
            interrupt(128 + n);
        }
        if MEASURING.load(Relaxed) && STOP_SIGNAL.load(Relaxed) == 0 {
            STOP_SIGNAL.store(n, Relaxed);
            return true;
        }
        let _ = std::io::stdout().flush();
        crate::nodes::shutdown_all();
        std::process::exit(128 + n);
    });
}

/// How often a waiting report loop looks for a stop signal.
const STOP_POLL: Duration = Duration::from_millis(100);

/// Waits `d`, or less when a stop signal comes; returns whether one came.
fn pause(d: Duration) -> bool {
    let until = Instant::now() + d;
    loop {
        if stop_signal().is_some() {
            return true;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        std::thread::sleep(left.min(STOP_POLL));
    }
}

/// Waits one report interval (1 s). With a control connection, also ends when the peer sends
/// something or closes it: returns true then (the peer is gone). A stop signal ends the wait
/// early (see [`stop_signal`]).
fn wait_interval(stream: Option<&mut TcpStream>) -> bool {
    let Some(s) = stream else {
        pause(Duration::from_secs(1));
        return false;
    };
    let until = Instant::now() + Duration::from_secs(1);
    let mut b = [0u8; 1];
    loop {
        if stop_signal().is_some() {
            return false;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        if s.set_read_timeout(Some(left.min(STOP_POLL))).is_err() {
            return true;
        }
        match s.read(&mut b) {
            Ok(_) => return true,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                // A read that returned early does not shorten the interval: wait on.
            }
            Err(_) => return true,
        }
    }
}

fn reset(r: &Resolved) -> Result<i32, Fatal> {
    use rds_core::ctl::{client::CtlClient, find_daemon, Request};
    let Some(faddr) = r.send_addr.map(|a| a.ip()) else {
        return Err(Fatal::new("--reset needs the peer address (-s)\n"));
    };
    let Some(laddr) = r.recv_addr.map(|a| a.ip()) else {
        return Err(Fatal::new("--reset needs the local address (-r)\n"));
    };
    let Some(ep) = find_daemon() else {
        return Err(Fatal::new(
            "setsockopt RDS_CONN_RESET failed: no RDS daemon runs here (rds-ctrl load), so \
             there is no connection to reset\n",
        ));
    };
    let res = CtlClient::connect(&ep.path)
        .and_then(|mut c| c.call_ok(&Request::ConnRestart { laddr, faddr }));
    match res {
        Ok(()) => Ok(0),
        Err(e) => {
            let n = e.errno();
            Err(Fatal::new(format!(
                "setsockopt RDS_CONN_RESET failed, errno: {n} ({})\n",
                strerror(n)
            )))
        }
    }
}

fn ctl_fatal(e: CtlError) -> Fatal {
    Fatal::new(e.to_string())
}

fn unspecified(v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    } else {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    }
}

fn fmt_scoped(a: &SocketAddr) -> String {
    match a {
        SocketAddr::V4(a) => format!("{}", a.ip()),
        SocketAddr::V6(a) if a.scope_id() != 0 => format!("{}%{}", a.ip(), a.scope_id()),
        SocketAddr::V6(a) => format!("{}", a.ip()),
    }
}

/// TCP connect from `local:0` to `peer`, printing the original's "connecting to" line.
fn connect(local: IpAddr, peer: SocketAddr, retries: u32, p: &Printer) -> Result<TcpStream, Fatal> {
    use nix::sys::socket::{
        bind, connect as nconnect, setsockopt, socket, sockopt, AddressFamily, SockFlag, SockType,
        SockaddrIn, SockaddrIn6,
    };
    let fam = if peer.is_ipv6() {
        AddressFamily::Inet6
    } else {
        AddressFamily::Inet
    };
    let sys = |what: &str, e: nix::errno::Errno| {
        Fatal::new(format!("{what}{}", errno_suffix(&std::io::Error::from(e))))
    };
    let fd = socket(fam, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)
        .map_err(|e| sys("socket() failed", e))?;
    setsockopt(&fd, sockopt::ReuseAddr, &true)
        .map_err(|e| sys("setsockopt(SO_REUSEADDR) failed", e))?;
    let bound = match (local, peer) {
        (IpAddr::V4(l), SocketAddr::V4(_)) => bind(
            fd.as_raw_fd(),
            &SockaddrIn::from(std::net::SocketAddrV4::new(l, 0)),
        ),
        (IpAddr::V6(l), SocketAddr::V6(pv)) => bind(
            fd.as_raw_fd(),
            &SockaddrIn6::from(std::net::SocketAddrV6::new(l, 0, 0, pv.scope_id())),
        ),
        _ => Err(nix::errno::Errno::EAFNOSUPPORT),
    };
    bound.map_err(|e| sys("bind() failed", e))?;
    p.out(&format!(
        "connecting to {}:{}",
        fmt_scoped(&peer),
        peer.port()
    ));
    let mut tries = 0u32;
    loop {
        let r = match peer {
            SocketAddr::V4(a) => nconnect(fd.as_raw_fd(), &SockaddrIn::from(a)),
            SocketAddr::V6(a) => nconnect(fd.as_raw_fd(), &SockaddrIn6::from(a)),
        };
        let Err(e) = r else { break };
        if tries == 0 {
            p.out(&format!(": {}", strerror(e as i32)));
        }
        use nix::errno::Errno;
        if matches!(
            e,
            Errno::ECONNREFUSED | Errno::EHOSTUNREACH | Errno::ENETUNREACH
        ) && tries < retries
        {
            if tries == 0 {
                p.out(" - retrying");
            }
            tries += 1;
            p.out(".");
            std::thread::sleep(Duration::from_secs(1));
            continue;
        }
        p.out("\n");
        return Err(Fatal::new(format!("connect({}) failed\n", peer.ip())));
    }
    p.out("\n");
    Ok(TcpStream::from(fd))
}

fn env_for(
    r: &Resolved,
    w: &WireOptions,
    local: IpAddr,
    peer: IpAddr,
    active: bool,
    node: Option<Node>,
) -> Env {
    Env {
        w: w.clone(),
        local,
        peer,
        v6: local.is_ipv6(),
        active,
        node,
        rtt_threshold: r.rtt_threshold,
        cancel_sent_to: r.cancel_sent_to,
        transport: r.transport_ib.map(|ib| {
            if ib {
                rds_core::info::TransportKind::Ib
            } else {
                rds_core::info::TransportKind::Tcp
            }
        }),
    }
}

/// The node for this side's tasks: an embedded node with the IB transport when RDMA (or
/// `--transport ib`) asks for it and `ip` is on an RDMA device, else `None` (the daemon's node
/// or the default embedded node, RDS/TCP). With `-D`, the original's RDMA check on a socket
/// bound to `ip:port` (exit 1 with "RDMA not supported by this kernel" on RDS/TCP).
fn task_node(r: &Resolved, w: &WireOptions, ip: IpAddr, name: &str) -> Result<Option<Node>, Fatal> {
    let want_ib = r.transport_ib.unwrap_or(w.rdma_size != 0);
    // On the kernel's RDS the kernel picks the transport (IB on an RDMA device). RDMA mode
    // needs the kernel's rds_rdma: without it `auto` uses a node of ours with RDS/IB.
    let kernel_rdma = || rds_core::kernel::transport_modules().contains(&"rds_rdma");
    let on_kernel = match rds_core::socket::stack() {
        rds_core::socket::StackChoice::Kernel => true,
        rds_core::socket::StackChoice::Auto => {
            rds_core::socket::kernel_preferred() && (w.rdma_size == 0 || kernel_rdma())
        }
        rds_core::socket::StackChoice::User => false,
    };
    let node = if want_ib && !on_kernel {
        match rdma_mode::not_on_rdma_device(ip) {
            None => Some(rdma_mode::start_ib_node(ip, name)?),
            Some(why) if r.transport_ib == Some(true) => {
                return Err(Fatal::new(format!(
                    "--transport ib: {ip} is not on an RDMA device: {why}\n"
                )))
            }
            Some(_) => None,
        }
    } else {
        None
    };
    if w.rdma_size != 0 {
        if let Err(e) = rdma_mode::check_support(node.as_ref(), ip, w.starting_port) {
            if let Some(n) = &node {
                n.shutdown();
            }
            return Err(e);
        }
    }
    Ok(node)
}

fn start_tasks(env: Env) -> Result<Tasks, Fatal> {
    let t = Tasks::start(env)?;
    register(&t);
    Ok(t)
}

fn run_active(r: &Resolved, p: &Printer, soak: Option<&Soakers>) -> Result<i32, Fatal> {
    let mut w = r.wire.clone();
    let peer_ip = r.send_addr.map_or(unspecified(r.v6), |a| a.ip());
    let peer = match r.send_addr {
        Some(SocketAddr::V6(a)) => SocketAddr::V6(std::net::SocketAddrV6::new(
            *a.ip(),
            w.starting_port,
            0,
            a.scope_id(),
        )),
        _ => SocketAddr::new(peer_ip, w.starting_port),
    };
    let mut node = match r.recv_addr {
        Some(a) => task_node(r, &w, a.ip(), "rds-stress-active")?,
        None => None,
    };
    if w.show_params != 0 {
        p.out(&output::show_params(&w));
    }
    let local = r.recv_addr.map_or(unspecified(r.v6), |a| a.ip());
    let mut stream = connect(local, peer, w.connect_retries, p)?;
    let local = if local.is_unspecified() {
        let l = stream
            .local_addr()
            .map_err(|e| Fatal::new(format!("getsockname failed{}", errno_suffix(&e))))?;
        set_addr(&mut w, l.ip(), false);
        node = task_node(r, &w, l.ip(), "rds-stress-active")?;
        l.ip()
    } else {
        local
    };
    if r.use_json {
        w.set_json_flag();
        if w.tracing != 0 {
            eprintln!("RDS: rds-stress will use json option exchange");
        }
    }
    let layout = w.layout(r.v6, r.use_json);
    send_all(&mut stream, &w.encode_layout(layout)).map_err(ctl_fatal)?;
    let env = env_for(r, &w, local, peer_ip, true, node.clone());
    let mut tasks = None;
    if !r.use_json {
        tasks = Some(start_tasks(env.clone())?);
    }
    send_all(&mut stream, &[0]).map_err(ctl_fatal)?;
    let ok = recv_byte(&mut stream).map_err(ctl_fatal)?;
    if r.use_json {
        if w.tracing != 0 {
            eprintln!("RDS: passive_parent support json exchange. json options will be exchanged.");
        }
        if ok != JSON_IDENTIFIER {
            return Err(Fatal::new(
                "Remote server does not support json option exchange.\n",
            ));
        }
        send_json(&mut stream, &w.to_json()).map_err(ctl_fatal)?;
        let theirs = recv_json(&mut stream).map_err(ctl_fatal)?;
        for k in missing_json_keys(&theirs) {
            p.out(&format!("{k} field not supported by remote server\n"));
        }
        tasks = Some(start_tasks(env)?);
        send_all(&mut stream, &[ok]).map_err(ctl_fatal)?;
        recv_byte(&mut stream).map_err(ctl_fatal)?;
    }
    let Some(tasks) = tasks else {
        return Err(Fatal::new("internal error: no tasks\n"));
    };
    warm_up(node.as_ref(), local, peer_ip);
    p.out("negotiated options, tasks will start in 2 seconds\n");
    let code = release_and_wait(r, &w, p, soak, tasks, None, Some(stream), true);
    if let Some(n) = node {
        n.shutdown();
    }
    code
}

fn check_peer_options(w: &WireOptions, v6: bool) -> Result<(), Fatal> {
    let hdr = header_size(v6) as u32;
    let wrap = |f: Fatal| Fatal::new(format!("options from peer: {}", f.msg));
    if w.ack_size < hdr {
        return Err(wrap(Fatal::new(format!(
            "ack size must be at least {hdr} bytes\n"
        ))));
    }
    if w.req_size < hdr {
        return Err(wrap(Fatal::new(format!(
            "req size must be at least {hdr} bytes\n"
        ))));
    }
    check_limits(w).map_err(wrap)?;
    if w.async_send != 0 {
        return Err(Fatal::new(NO_ASYNC));
    }
    Ok(())
}

fn run_passive(r: &Resolved, p: &Printer, soak: Option<&Soakers>) -> Result<i32, Fatal> {
    let port = r.wire.starting_port;
    let listen_ip = r.recv_addr.map_or(unspecified(r.v6), |a| a.ip());
    let listen_at = match r.recv_addr {
        Some(SocketAddr::V6(a)) => {
            SocketAddr::V6(std::net::SocketAddrV6::new(*a.ip(), port, 0, a.scope_id()))
        }
        _ => SocketAddr::new(listen_ip, port),
    };
    let listener = TcpListener::bind(listen_at)
        .map_err(|e| Fatal::new(format!("bind() failed{}", errno_suffix(&e))))?;
    p.out(&format!(
        "waiting for incoming connection on {}:{}\n",
        fmt_scoped(&listen_at),
        port
    ));
    let (mut stream, from) = listener
        .accept()
        .map_err(|e| Fatal::new(format!("accept() failed{}", errno_suffix(&e))))?;
    drop(listener);
    let mut line = match from {
        SocketAddr::V4(a) => format!("accepted connection from {}:{}", a.ip(), a.port()),
        SocketAddr::V6(a) => {
            let scope = if a.scope_id() != 0 {
                format!("%{}", a.scope_id())
            } else {
                String::new()
            };
            format!("accepted connection from {}:{scope}:{}", a.ip(), a.port())
        }
    };
    let local = stream
        .local_addr()
        .map_err(|e| Fatal::new(format!("getsockname failed{}", errno_suffix(&e))))?;
    let own = if listen_ip.is_unspecified() {
        line += &format!(" on {}:{}", local.ip(), local.port());
        local.ip()
    } else {
        listen_ip
    };
    line.push('\n');
    p.out(&line);
    let v6 = own.is_ipv6();
    let (mut w, _layout, peer_version) = read_options(&mut stream, v6).map_err(ctl_fatal)?;
    swap_addrs(&mut w, own);
    w.inq_enabled = r.wire.inq_enabled;
    let peer_ip = peer_of(&w, v6);
    let ok = recv_byte(&mut stream).map_err(ctl_fatal)?;
    let json = peer_version[JSON_FLAG_OFFSET..JSON_FLAG_OFFSET + 5] == *b"json\0";
    let node;
    let tasks = if !json {
        check_peer_options(&w, v6)?;
        node = task_node(r, &w, own, "rds-stress-passive")?;
        let env = env_for(r, &w, own, peer_ip, false, node.clone());
        let t = start_tasks(env)?;
        send_all(&mut stream, &[ok]).map_err(ctl_fatal)?;
        t
    } else {
        send_all(&mut stream, &[JSON_IDENTIFIER]).map_err(ctl_fatal)?;
        let theirs = recv_json(&mut stream).map_err(ctl_fatal)?;
        w.apply_json(&theirs)
            .map_err(|e| ctl_fatal(CtlError::BadJson(e)))?;
        if w.tracing != 0 {
            eprintln!("RDS:passive_parent received json_options");
        }
        swap_addrs(&mut w, own);
        send_json(&mut stream, &w.to_json()).map_err(ctl_fatal)?;
        check_peer_options(&w, v6)?;
        let peer_ip = peer_of(&w, v6);
        node = task_node(r, &w, own, "rds-stress-passive")?;
        let env = env_for(r, &w, own, peer_ip, false, node.clone());
        let t = start_tasks(env)?;
        let ok = recv_byte(&mut stream).map_err(ctl_fatal)?;
        send_all(&mut stream, &[ok]).map_err(ctl_fatal)?;
        t
    };
    p.out("negotiated options, tasks will start in 2 seconds\n");
    let code = release_and_wait(r, &w, p, soak, tasks, None, Some(stream), false);
    if let Some(n) = node {
        n.shutdown();
    }
    code
}

/// The passive side's view: send to the peer's receive address, receive on our own.
fn swap_addrs(w: &mut WireOptions, own: IpAddr) {
    match own {
        IpAddr::V4(a) => {
            w.send_addr = w.receive_addr;
            w.receive_addr = u32::from(a);
        }
        IpAddr::V6(a) => {
            w.send_addr6 = w.receive_addr6;
            w.receive_addr6 = a.octets();
        }
    }
}

fn peer_of(w: &WireOptions, v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(w.send_addr6))
    } else {
        IpAddr::V4(w.send_v4())
    }
}

fn start_node(ip: IpAddr, name: &str) -> Result<Node, Fatal> {
    let mut cfg = NodeConfig::new([ip]);
    cfg.name = name.into();
    cfg.ctl = CtlMode::Auto;
    let node = Node::start(cfg).map_err(|e| {
        if e.raw_os_error() == Some(libc::EADDRINUSE) {
            return Fatal::new(format!(
                "bind() to {ip} failed{}{}\n",
                errno_suffix(&e),
                rds_core::ctl::describe_addr_conflict(ip)
            ));
        }
        Fatal::new(format!(
            "cannot start an RDS node on {ip}: {e} (is port 16385 on {ip} taken, for example by \
             the kernel's rds_tcp module or an rds-ctrl daemon? choose other addresses with -r \
             and -s)\n"
        ))
    })?;
    crate::nodes::keep(&node);
    Ok(node)
}

fn run_loopback(r: &Resolved, p: &Printer, soak: Option<&Soakers>) -> Result<i32, Fatal> {
    let a = r
        .recv_addr
        .map_or(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)), |x| x.ip());
    let b = r
        .send_addr
        .map_or(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)), |x| x.ip());
    if a == b || a.is_ipv6() != b.is_ipv6() {
        return Err(Fatal::new(
            "--loopback needs two different addresses of one family (-r and -s)\n",
        ));
    }
    let mut w = r.wire.clone();
    if a.is_ipv6() != r.v6 {
        return Err(Fatal::new("send and receive address family not matched\n"));
    }
    set_addr(&mut w, a, false);
    set_addr(&mut w, b, true);
    if w.show_params != 0 {
        p.out(&output::show_params(&w));
    }
    let (node_a, node_b) = match (
        task_node(r, &w, a, "rds-stress-active")?,
        task_node(r, &w, b, "rds-stress-passive")?,
    ) {
        (Some(x), Some(y)) => (x, y),
        _ => (
            start_node(a, "rds-stress-active")?,
            start_node(b, "rds-stress-passive")?,
        ),
    };
    let mut wp = w.clone();
    swap_addrs(&mut wp, b);
    let passive = start_tasks(env_for(r, &wp, b, a, false, Some(node_b.clone())))?;
    let active = start_tasks(env_for(r, &w, a, b, true, Some(node_a.clone())))?;
    warm_up(Some(&node_a), a, b);
    p.out(&format!(
        "loopback: active side on {a} (node {}), passive side on {b} (node {}), over {}\n",
        node_a.name(),
        node_b.name(),
        if node_a.ib_running() {
            "RDS/IB"
        } else {
            "RDS/TCP"
        }
    ));
    p.out("negotiated options, tasks will start in 2 seconds\n");
    let code = release_and_wait(r, &w, p, soak, active, Some(passive), None, true);
    node_a.shutdown();
    node_b.shutdown();
    code
}

/// Brings the RDS connection to `peer` up before the tasks send: a zero-length message to
/// port 0 (answered by the peer's stack, as rds-ping uses it), waiting up to 3 s for the pong
/// (over IB up to 5 pings of 2 s).
/// Works around an rds-core race that loses messages when both nodes open the connection at
/// the same moment (see tests/core_connect_race.rs).
fn warm_up(node: Option<&Node>, local: IpAddr, peer: IpAddr) {
    let s = match node {
        Some(n) => rds_core::Socket::with_node(n),
        None => match rds_core::Socket::new() {
            Ok(s) => s,
            Err(_) => return,
        },
    };
    if s.bind(SocketAddr::new(local, 0)).is_err() {
        return;
    }
    // Over IB the first connection can take a few attempts (connect races under emulated
    // RDMA): ping up to 5 times, 2 s each, until a pong comes back.
    let ib = node.is_some_and(Node::ib_running);
    let (tries, wait) = if ib {
        (5, Duration::from_secs(2))
    } else {
        (1, Duration::from_secs(3))
    };
    s.set_read_timeout(Some(wait));
    for _ in 0..tries {
        if s.send_to(&[], SocketAddr::new(peer, 0)).is_err() {
            return;
        }
        let mut b = [0u8; 16];
        if s.recv_from(&mut b).is_ok() {
            return;
        }
    }
}

/// Counters of the node behind task 0 (for --show-perfdata).
fn node_counters(ctl: &Control) -> Vec<(String, u64)> {
    if let Some(n) = ctl.node.get() {
        return n
            .stats()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
    }
    if ctl.via_daemon.load(Relaxed) {
        if let Ok(mut c) =
            rds_core::ctl::client::CtlClient::connect_node(Some(rds_core::ctl::DAEMON_NAME))
        {
            if let Ok(v) = c.stats() {
                return v;
            }
        }
    }
    Vec::new()
}

#[allow(clippy::too_many_arguments)]
fn release_and_wait(
    r: &Resolved,
    w: &WireOptions,
    p: &Printer,
    soak: Option<&Soakers>,
    tasks: Tasks,
    other: Option<Tasks>,
    mut stream: Option<TcpStream>,
    active: bool,
) -> Result<i32, Fatal> {
    let role = match (&other, active) {
        (Some(_), _) => "--loopback",
        (None, true) => "active",
        (None, false) => "passive",
    };
    let start = Instant::now() + Duration::from_secs(2);
    tasks.ctl.release(start);
    if let Some(o) = &other {
        o.ctl.release(start);
    }
    MEASURING.store(true, Relaxed);
    let mut snap = Snapshotter::new(tasks.stats.len());
    p.out("Starting up");
    for _ in 0..4 {
        if pause(Duration::from_secs(1)) {
            break;
        }
        snap.take(&tasks.stats);
        if let Some(s) = soak {
            s.cpu_use();
        }
        p.out(".");
    }
    p.out("\n");
    let first_ts = Instant::now();
    let end = (!r.run_time.is_zero() && active).then(|| first_ts + r.run_time);
    if r.abort_after != 0 {
        let secs = r.abort_after;
        let _ = std::thread::Builder::new()
            .name("abort".into())
            .spawn(move || {
                std::thread::sleep(Duration::from_secs(u64::from(secs)));
                eprintln!("rds-stress: aborting after {secs} seconds (--abort-after)");
                interrupt(128 + libc::SIGALRM);
            });
    }
    if w.rtprio != 0 {
        crate::sys::set_rt_priority().map_err(|e| {
            Fatal::new(format!(
                "sched_setscheduler(SCHED_RR) failed{}",
                errno_suffix(&e)
            ))
        })?;
    }
    let perf = w.show_perfdata != 0;
    let mut proc_stat = ProcStat::default();
    let mut last_counters: Vec<(String, u64)> = Vec::new();
    if stop_signal().is_some() {
        // Interrupted in the start-up: straight to the (empty) summary.
    } else if perf {
        last_counters = node_counters(&tasks.ctl);
        proc_stat.prime();
        let names: Vec<String> = last_counters.iter().map(|c| c.0.clone()).collect();
        p.out(&output::perfdata_header(&names));
    } else {
        p.out(&output::header());
    }
    if end.is_some() && std::io::stderr().is_terminal() {
        let secs = r.run_time.as_secs_f64().ceil() as u64;
        let bar = ProgressBar::new(secs);
        bar.set_style(
            ProgressStyle::with_template(&output::progress_template(
                secs,
                rds_cli::table::terminal_width(),
            ))
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        *p.bar.lock().unwrap_or_else(|x| x.into_inner()) = Some(bar);
    }
    let nr = tasks.stats.len() as u32;
    let mut summary = [Counter::default(); NR_STATS];
    let mut cpu_total = 0.0;
    let mut last_ts = first_ts;
    let mut intervals = Vec::new();
    let mut plotted = Vec::new();
    let mut last_perf = Instant::now();
    while stop_signal().is_none() {
        let peer_gone = wait_interval(stream.as_mut());
        if stop_signal().is_some() {
            // The interval in progress is not shown; the summary covers the shown ones.
            break;
        }
        if peer_gone && !active {
            break;
        }
        let disp = snap.take(&tasks.stats);
        let now = Instant::now();
        let cpu = soak.map_or(-1.0, |s| s.cpu_use());
        let us = now.duration_since(last_ts).as_micros().max(1) as f64;
        let scale = 1e6 / us;
        if w.summary_only == 0 {
            if perf {
                let cur = node_counters(&tasks.ctl);
                let pscale = 1e6 / now.duration_since(last_perf).as_micros().max(1) as f64;
                let deltas: Vec<f64> = cur
                    .iter()
                    .map(|(k, v)| {
                        let old = last_counters.iter().find(|c| &c.0 == k).map_or(0, |c| c.1);
                        v.wrapping_sub(old) as f64 * pscale
                    })
                    .collect();
                last_counters = cur;
                last_perf = now;
                p.out(&output::perfdata_line(
                    w,
                    &disp,
                    scale,
                    cpu,
                    &deltas,
                    proc_stat.sample(),
                ));
            } else {
                p.out(&output::interval(nr, &disp, scale, cpu));
            }
        }
        plotted.push(plot::Interval {
            end_secs: now.duration_since(first_ts).as_secs_f64(),
            tx: disp[Stat::ReqTx as usize].nr,
            rx: disp[Stat::ReqRx as usize].nr,
        });
        intervals.push(JsonInterval {
            tx: disp[Stat::ReqTx as usize].nr,
            rx: disp[Stat::ReqRx as usize].nr,
            tx_rx_kib_per_sec: scale * stats::throughput(&disp) / 1024.0,
            rtt_us: disp[Stat::RttUsecs as usize].avg(),
        });
        stats::accumulate(&mut summary, &disp);
        cpu_total += cpu;
        last_ts = now;
        if let Some(b) = p.bar.lock().unwrap_or_else(|x| x.into_inner()).as_ref() {
            b.inc(1);
        }
        if end.is_some_and(|e| now >= e) || peer_gone {
            break;
        }
    }
    if let Some(b) = p.bar.lock().unwrap_or_else(|x| x.into_inner()).take() {
        b.finish_and_clear();
    }
    drop(stream);
    tasks.ctl.stopping.store(true, Relaxed);
    if let Some(o) = &other {
        o.ctl.stopping.store(true, Relaxed);
    }
    std::thread::sleep(Duration::from_secs(1));
    let stats_list = tasks.stats.clone();
    let mut rdma_failed = tasks.ctl.rdma_failures();
    if let Some(o) = &other {
        for (a, b) in rdma_failed.iter_mut().zip(o.ctl.rdma_failures()) {
            *a += b;
        }
    }
    tasks.join();
    if let Some(o) = other {
        o.join();
    }
    if let Some(s) = soak {
        s.stop();
    }
    if w.summary_only == 0 {
        p.out(output::DASHES);
    }
    let span = last_ts.duration_since(first_ts).as_micros();
    let scale = if span == 0 { 0.0 } else { 1e6 / span as f64 };
    p.out(&output::average(
        u32::from(w.nr_tasks),
        &summary,
        scale,
        soak.map(|_| cpu_total),
    ));
    if r.show_histogram {
        p.out(&output::histogram(&stats::histogram(&stats_list)));
    }
    let rtt = stats::RttDistribution::of(&stats_list);
    let pct = rtt.percentiles();
    p.out(&output::percentile_line(&pct));
    if let Some(line) = rdma_mode::failure_line(&rdma_failed) {
        eprint!("{line}");
    }
    if r.json {
        let tot = stats::total(&stats_list);
        let s = JsonSummary {
            tasks: u32::from(w.nr_tasks),
            req_bytes: w.req_size,
            ack_bytes: w.ack_size,
            depth: w.req_depth,
            one_way: w.simplex != 0,
            seconds: span as f64 / 1e6,
            tx_per_sec: scale * summary[Stat::ReqTx as usize].nr as f64,
            rx_per_sec: scale * summary[Stat::ReqRx as usize].nr as f64,
            tx_rx_kib_per_sec: scale * stats::throughput(&summary) / 1024.0,
            rdma_in_kib_per_sec: scale * summary[Stat::MbusIn as usize].sum as f64 / 1024.0,
            rdma_out_kib_per_sec: scale * summary[Stat::MbusOut as usize].sum as f64 / 1024.0,
            requests_sent: tot[Stat::ReqTx as usize].nr,
            requests_received: tot[Stat::ReqRx as usize].nr,
            tx_us_per_call: summary[Stat::SendmsgUsecs as usize].avg(),
            rtt_us: output::JsonRtt {
                avg: summary[Stat::RttUsecs as usize].avg(),
                percentiles: pct,
            },
            cpu_percent: soak.map(|_| scale * cpu_total),
            intervals,
            stopped: stop_signal().map(|_| "interrupted"),
        };
        let text = serde_json::to_string_pretty(&s).unwrap_or_else(|_| "{}".into());
        println!("{text}");
    }
    if let Some(target) = &r.plot {
        target
            .write(&plot::Run {
                title: plot::title(role, w),
                intervals: &plotted,
                rtt: &rtt,
            })
            .map_err(Fatal::new)?;
    }
    let _ = control::RDS_VERSION;
    Ok(stop_signal().map_or(0, |n| 128 + n))
}
