//! `rds-trace -w FILE`: capture from a running node.
//!
//! 1. Pick the node ([`choose_node`]) and say hello on its control socket: `--node
//!    NAME|ADDRESS|PID`, else the daemon if it runs, else the only running node, else the only
//!    node this user may trace, else the first node of the one process that runs them all
//!    (both nodes of `rds-stress --loopback`: the traffic between them), else every node the
//!    user may trace, in one RDS/TCP capture (`capture/many.rs`; for IB, an error listing them). Nodes
//!    are found in the runtime directories of [`rds_core::ctl`] (`RDS_RUNTIME_DIR` overrides
//!    them).
//! 2. Send [`Request::TraceStart`] with the snap length
//!    and filters. The node refuses with `EPERM` unless we are root or its owner, and with
//!    `EBUSY` while another trace session runs on it (one per node).
//! 3. A regular file (or a new one) is written by the node itself: rds-trace creates it under
//!    a temporary name in the same directory and passes its descriptor with the request
//!    ([`TraceOutput`], `SCM_RIGHTS`); the node answers [`Reply::TraceStarted`] with the link
//!    type it writes, and rds-trace renames the file to its name. The node decodes its tap's
//!    batches and writes the pcap file past the page cache (`O_DIRECT` where the file system
//!    takes it) on threads at a lower priority (the session thread and the writer under
//!    `SCHED_IDLE` while they capture, then at [`rds_core::node::admin::TRACE_NICE`]), so the
//!    frames never cross a socket and the capture yields the CPU to the traffic it observes.
//!    Stdout (`-w -`) and files that are not regular ones (a FIFO, a device, a symbolic link)
//!    are written by rds-trace from the [`Reply::TraceFrames`] batches the node streams, as
//!    is any file when a node answers without a link type.
//! 4. The capture's transport: `--transport`, else IB when the node runs only the IB transport,
//!    else TCP. A pcap file has one link type, so a capture holds one transport's frames:
//!    RDS/TCP frames as Ethernet + IP + TCP packets, or RDS/IB fragments as ERF InfiniBand
//!    records ([`rds_core::trace::Capture`]); frames of the other transport are counted and
//!    reported, not written. `-w -` flushes after every batch.
//! 5. At `-c COUNT` frames (a node writing the file ends the session itself), `-G SECONDS`,
//!    SIGINT or SIGTERM: send [`Request::TraceStop`], write what the node still sends until
//!    [`Reply::TraceEnd`] (with what the node wrote, when it writes), close the file and print
//!    `N frames captured, M dropped` to stderr (N frames written, M frames the node's tap
//!    dropped because the capture fell behind). A second signal, or a node that does not end
//!    the session within 5 seconds of the stop, ends the capture without waiting.
//!
//! Signals are handled without a signal handler: SIGINT and SIGTERM are blocked in every
//! thread and a dedicated thread reads them from a signalfd ([`rds_cli::StopSignals`]).

use std::fs::File;
use std::io::{self, BufWriter, IsTerminal};
use std::net::IpAddr;
use std::os::fd::AsFd;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use nix::sys::signal::Signal;
use rds_core::ctl::client::{CtlClient, CtlError};
use rds_core::ctl::select::{self, RunningNode};
use rds_core::ctl::{write_frame, write_frame_with_fd, NodeEndpoint, Reply, Request, TraceOutput};
use rds_core::socket::{HEADER_LEN, MAX_MSG_SIZE};
use rds_core::trace::{
    open_capture_file, Capture, CaptureFile, CaptureLink, CaptureTally, TcpCaptureConfig,
    TraceError,
};

mod many;

/// How long the node has to end the session after the stop request.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// What to capture.
#[derive(Debug, Clone)]
pub struct Options {
    /// Output file, `-` for stdout.
    pub file: PathBuf,
    /// Bytes kept per frame (0: whole frames).
    pub snaplen: u32,
    /// Stop after this many frames.
    pub count: Option<u64>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Node name.
    pub node: Option<String>,
    /// Only frames with this peer.
    pub peer: Option<IpAddr>,
    /// Only frames with this RDS port.
    pub port: Option<u16>,
    /// Which transport's frames to write (default: see the module documentation).
    pub transport: Option<CaptureTransport>,
}

/// The transport whose frames a capture holds (one link type per pcap file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CaptureTransport {
    /// RDS/TCP frames as Ethernet + IP + TCP packets (`LINKTYPE_ETHERNET`).
    Tcp,
    /// RDS/IB fragments as ERF InfiniBand records (`LINKTYPE_ERF`).
    Ib,
}

impl CaptureTransport {
    fn link(self) -> CaptureLink {
        match self {
            CaptureTransport::Tcp => CaptureLink::Tcp,
            CaptureTransport::Ib => CaptureLink::Ib,
        }
    }
}

/// The default transport of a capture from the transports a node runs: IB when it runs IB
/// and not TCP, else TCP.
pub fn default_transport(node_transports: &[String]) -> CaptureTransport {
    match CaptureLink::default_for(node_transports) {
        CaptureLink::Tcp => CaptureTransport::Tcp,
        CaptureLink::Ib => CaptureTransport::Ib,
    }
}

/// The snap length sent to the node: 0 means whole frames.
pub fn effective_snaplen(s: u32) -> u32 {
    let whole = (HEADER_LEN + MAX_MSG_SIZE) as u32;
    if s == 0 {
        whole
    } else {
        s.clamp(HEADER_LEN as u32, whole)
    }
}

fn send(stream: &mut UnixStream, req: &Request) -> io::Result<()> {
    let json = serde_json::to_vec(req).map_err(io::Error::other)?;
    write_frame(stream, &json, &[])
}

/// Ends the session from any thread: the first call sends [`Request::TraceStop`], `abort`
/// shuts the connection down.
#[derive(Debug)]
struct Stopper {
    writer: Mutex<UnixStream>,
    stop_sent: Mutex<Option<Instant>>,
    aborted: AtomicBool,
    /// The thread that writes the frames, which may run under `SCHED_IDLE`: on CPUs the
    /// traffic keeps busy it would not run to see the stop, so the stop lifts it out.
    writer_thread: Option<rds_core::ThreadTid>,
}

impl Stopper {
    /// The session on `control`, whose frames `writer_thread` writes.
    fn new(control: UnixStream, writer_thread: Option<rds_core::ThreadTid>) -> Arc<Self> {
        Arc::new(Stopper {
            writer: Mutex::new(control),
            stop_sent: Mutex::new(None),
            aborted: AtomicBool::new(false),
            writer_thread,
        })
    }

    /// Moves the writing thread out of `SCHED_IDLE` (without the privilege, EPERM, it stays).
    fn lift(&self) {
        if let Some(t) = self.writer_thread {
            let _ = t.set_idle(false);
        }
    }

    fn stop(&self) {
        let mut sent = self.stop_sent.lock().unwrap_or_else(|p| p.into_inner());
        if sent.is_some() {
            return;
        }
        *sent = Some(Instant::now());
        self.lift();
        let mut w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        if send(&mut w, &Request::TraceStop).is_err() {
            drop(w);
            self.abort();
        }
    }

    fn stop_sent_at(&self) -> Option<Instant> {
        *self.stop_sent.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn abort(&self) {
        self.aborted.store(true, Ordering::SeqCst);
        self.lift();
        let w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let _ = w.shutdown(std::net::Shutdown::Both);
    }
}

/// Blocks SIGINT and SIGTERM in this thread (and the threads it starts later) and starts a
/// thread that takes them ([`rds_cli::StopSignals`]), passing each on `tx`.
fn signal_thread(tx: mpsc::Sender<Signal>) -> anyhow::Result<()> {
    rds_cli::StopSignals::block()
        .context("blocking SIGINT and SIGTERM")?
        .spawn("signals", move |sig| tx.send(sig).is_ok())
        .context("starting the signal thread")
}

/// Watches signals, the duration and the stop deadline, for the sessions of `stoppers`.
fn controller(
    stoppers: Vec<Arc<Stopper>>,
    signals: mpsc::Receiver<Signal>,
    deadline: Option<Instant>,
    done: Arc<AtomicBool>,
) {
    let mut signalled = 0;
    while !done.load(Ordering::SeqCst) {
        match signals.recv_timeout(Duration::from_millis(50)) {
            Ok(_) => {
                signalled += 1;
                for s in &stoppers {
                    if signalled == 1 {
                        s.stop();
                    } else {
                        s.abort();
                    }
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                std::thread::sleep(Duration::from_millis(50))
            }
        }
        for s in &stoppers {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                s.stop();
            }
            if s.stop_sent_at().is_some_and(|t| t.elapsed() >= STOP_GRACE) {
                s.abort();
            }
        }
    }
}

/// The nodes a capture traces.
#[derive(Debug)]
pub enum Choice {
    /// One node, and a note saying why when rds-trace chose it among several.
    One(NodeEndpoint, Option<String>),
    /// Every node this user may trace, in several processes: one capture of them all.
    All(Vec<RunningNode>),
}

/// The nodes to trace.
///
/// With `sel` (`--node`), the node it selects ([`select::choose`]). Without: the daemon if it
/// runs, else the only node; else, among the nodes this user may trace (root, or the node's
/// owner), the only one or, when they all run in one process (the two nodes of
/// `rds-stress --loopback`), the first: the traffic between them passes through each; else
/// all of them, when the capture is of RDS/TCP (`all_tcp`).
///
/// # Errors
/// No node runs, none matches `sel`, or several processes run nodes and the capture is of IB
/// (the message lists them).
pub fn choose_node(sel: Option<&str>, all_tcp: bool) -> Result<Choice, CtlError> {
    if sel.is_some() {
        return select::choose(sel).map(|e| Choice::One(e, None));
    }
    match select::choose(None) {
        Err(CtlError::NoNode(_)) => {}
        r => return r.map(|e| Choice::One(e, None)),
    }
    let nodes = select::running_nodes();
    let uid = nix::unistd::geteuid().as_raw();
    let ours: Vec<&RunningNode> = nodes
        .iter()
        .filter(|n| {
            n.hello
                .as_ref()
                .is_some_and(|h| uid == 0 || h.owner_uid == uid)
        })
        .collect();
    match obvious_node(&ours) {
        Some((n, note)) => Ok(Choice::One(n.endpoint.clone(), note)),
        None if all_tcp && ours.len() > 1 => Ok(Choice::All(ours.into_iter().cloned().collect())),
        None => select::pick(None, &nodes).map(|e| Choice::One(e, None)),
    }
}

/// The node to trace among several traceable ones (see [`choose_node`]), with a note naming
/// the others when there are.
fn obvious_node<'a>(ours: &[&'a RunningNode]) -> Option<(&'a RunningNode, Option<String>)> {
    let first = *ours.first()?;
    if ours.len() == 1 {
        return Some((first, None));
    }
    let pid = first.pid()?;
    if ours.iter().any(|n| n.pid() != Some(pid)) {
        return None;
    }
    let others: Vec<&str> = ours[1..].iter().map(|n| n.name()).collect();
    let program = first
        .program
        .as_deref()
        .map_or_else(String::new, |p| format!(" ({p})"));
    Some((
        first,
        Some(format!(
            "the nodes of process {pid}{program} are {} and {}: tracing {}, which sees the \
             traffic between them (choose another with --node NAME|ADDRESS)",
            first.name(),
            others.join(", "),
            first.name()
        )),
    ))
}

/// Where the capture goes.
enum Target {
    /// A regular file: the node writes it. It is made under a temporary name (`tmp`) in the
    /// same directory, passed to the node with the request, and renamed to its name once the
    /// node agreed to trace (a refused trace leaves no file, and an existing one untouched).
    /// A character device (`-w /dev/null`) is passed as it is (`tmp` is `None`).
    Node {
        file: File,
        tmp: Option<PathBuf>,
        path: PathBuf,
    },
    /// Standard output (a pipe to wireshark), or a file that is neither a regular one nor a
    /// character device (a FIFO, a symbolic link): the node streams the frames and rds-trace
    /// writes them, flushing after every batch for stdout.
    Stream { stdout: bool },
}

impl Target {
    fn choose(path: &std::path::Path) -> Target {
        if path.as_os_str() == "-" {
            return Target::Stream { stdout: true };
        }
        // A new file, or an existing regular one (not a symbolic link, which is written
        // through as before).
        let regular = match std::fs::symlink_metadata(path) {
            Err(_) => true,
            Ok(m) if m.file_type().is_char_device() => {
                return match open_capture_file(path) {
                    Ok(file) => Target::Node {
                        file,
                        tmp: None,
                        path: path.to_path_buf(),
                    },
                    Err(_) => Target::Stream { stdout: false },
                };
            }
            // An existing file we may not write keeps its error for the streamed path
            // (renaming over it would replace a file we could not open).
            Ok(m) => m.is_file() && std::fs::OpenOptions::new().write(true).open(path).is_ok(),
        };
        if regular {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            let tmp = path.with_file_name(format!(
                ".{}.rds-trace-{}",
                name.unwrap_or_default(),
                std::process::id()
            ));
            if let Ok(file) = open_capture_file(&tmp) {
                return Target::Node {
                    file,
                    tmp: Some(tmp),
                    path: path.to_path_buf(),
                };
            }
        }
        Target::Stream { stdout: false }
    }

    /// Removes the temporary file of a trace that did not start.
    fn discard(&self) {
        if let Target::Node { tmp: Some(tmp), .. } = self {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// The bytes of a capture rds-trace writes itself.
enum Dest {
    /// The file made for the node (it may have `O_DIRECT`).
    Direct(CaptureFile),
    /// Stdout, or a file that is not a regular one.
    Buffered(BufWriter<File>),
}

impl io::Write for Dest {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Dest::Direct(f) => f.write(b),
            Dest::Buffered(w) => w.write(b),
        }
    }

    fn write_all(&mut self, b: &[u8]) -> io::Result<()> {
        match self {
            Dest::Direct(f) => f.write_all(b),
            Dest::Buffered(w) => w.write_all(b),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Dest::Direct(f) => f.flush(),
            Dest::Buffered(w) => w.flush(),
        }
    }
}

/// Syncs a capture file to its device; a file that is not a regular file (`-w /dev/null`, a
/// FIFO, a terminal) has nothing to sync.
fn sync(f: &File) -> io::Result<()> {
    if f.metadata()?.is_file() {
        f.sync_all()
    } else {
        Ok(())
    }
}

impl Dest {
    /// Writes what is left; a file is synced.
    fn finish(self, stdout: bool) -> io::Result<()> {
        match self {
            Dest::Direct(f) => sync(&f.finish()?),
            Dest::Buffered(w) => {
                let f = w.into_inner().map_err(|e| e.into_error())?;
                if stdout {
                    Ok(())
                } else {
                    sync(&f)
                }
            }
        }
    }
}

/// The output of a capture rds-trace writes itself.
fn stream_output(opts: &Options, target: &Target) -> anyhow::Result<Dest> {
    let buffered = |f: File| Dest::Buffered(BufWriter::with_capacity(1 << 20, f));
    Ok(match target {
        Target::Node { file, path, .. } => Dest::Direct(
            file.try_clone()
                .and_then(CaptureFile::new)
                .with_context(|| format!("writing {}", path.display()))?,
        ),
        Target::Stream { stdout: true } => buffered(
            io::stdout()
                .as_fd()
                .try_clone_to_owned()
                .map(File::from)
                .context("standard output")?,
        ),
        Target::Stream { stdout: false } => buffered(
            File::create(&opts.file)
                .with_context(|| format!("creating {}", opts.file.display()))?,
        ),
    })
}

fn is_broken_pipe(e: &TraceError) -> bool {
    e.io_error()
        .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
}

/// How the session ended.
#[derive(Debug, Default)]
struct Tally {
    counts: CaptureTally,
    end: Option<(u64, u64)>,
    link: Option<CaptureLink>,
}

/// `rds-trace -w FILE ...`.
///
/// # Errors
/// No node, refused trace, output errors.
pub fn run(opts: Options) -> anyhow::Result<u8> {
    let target = Target::choose(&opts.file);
    if matches!(target, Target::Stream { stdout: true }) && io::stdout().is_terminal() {
        bail!(
            "refusing to write a binary capture to a terminal: redirect stdout to a file, or \
             pipe it to 'wireshark -k -i -'"
        );
    }
    let r = start_and_run(&opts, &target);
    target.discard();
    r
}

fn start_and_run(opts: &Options, target: &Target) -> anyhow::Result<u8> {
    let (sig_tx, sig_rx) = mpsc::channel();
    signal_thread(sig_tx)?;

    let all_tcp = opts.transport != Some(CaptureTransport::Ib);
    let (endpoint, note) = match choose_node(opts.node.as_deref(), all_tcp)? {
        Choice::One(e, note) => (e, note),
        Choice::All(nodes) => return many::run(opts, target, &nodes, sig_rx),
    };
    let mut client = CtlClient::connect(&endpoint.path)?;
    if let Some(n) = note {
        eprintln!("rds-trace: {n}");
    }
    // The node's name as `--node` takes it: its control socket's stem.
    let name = client
        .path()
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (addrs, owner_uid) = (client.hello.addrs.clone(), client.hello.owner_uid);
    let snaplen = effective_snaplen(opts.snaplen);
    let output = match target {
        Target::Node { .. } => Some(TraceOutput {
            link: opts.transport.map(CaptureTransport::link),
            count: opts.count,
        }),
        Target::Stream { .. } => None,
    };
    let start = Request::TraceStart {
        snaplen,
        peer: opts.peer,
        port: opts.port,
        output,
    };
    match target {
        Target::Node { file, .. } => {
            let json = serde_json::to_vec(&start)?;
            write_frame_with_fd(client.stream(), &json, &[], file.as_fd())?;
        }
        Target::Stream { .. } => client.send_only(&start)?,
    }
    let (node_transports, link) = started(&mut client, &name, owner_uid)?;
    let started_link = link;
    let link = link.unwrap_or_else(|| {
        opts.transport
            .unwrap_or_else(|| default_transport(&node_transports))
            .link()
    });
    let started = Instant::now();
    // This thread writes the frames the node streams (below, under SCHED_IDLE).
    let stopper = Stopper::new(
        client.stream().try_clone().context("control socket")?,
        Some(rds_core::ThreadTid::current()),
    );

    // The file takes its name once the node agreed to trace.
    if let Target::Node {
        tmp: Some(tmp),
        path,
        ..
    } = target
    {
        if let Err(e) = std::fs::rename(tmp, path) {
            stopper.stop();
            return Err(e).with_context(|| format!("creating {}", path.display()));
        }
    }
    // A node that does not write files (it answered without a link type) streams the frames
    // for us to write, as it does for stdout.
    let node_writes = started_link.is_some() && matches!(target, Target::Node { .. });
    let mut out = if node_writes {
        None
    } else {
        let stdout = matches!(target, Target::Stream { stdout: true });
        let capture = stream_output(opts, target).and_then(|w| {
            let tcp = TcpCaptureConfig {
                // Live to a pipe: no segment waits for the next frame.
                hold_ns: if stdout {
                    0
                } else {
                    TcpCaptureConfig::default().hold_ns
                },
                ..TcpCaptureConfig::default()
            };
            Capture::new(w, link, opts.count, tcp)
                .map_err(|e| anyhow::Error::new(e).context("writing the capture header"))
        });
        match capture {
            Ok(c) => Some((c, stdout)),
            Err(e) => {
                stopper.stop();
                if e.downcast_ref::<TraceError>().is_some_and(is_broken_pipe) {
                    return Ok(0);
                }
                return Err(e);
            }
        }
    };
    let addr_list = addrs
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    eprintln!(
        "rds-trace: tracing node '{name}' ({addr_list}), snaplen {snaplen}, transport {}",
        link.name()
    );

    let done = Arc::new(AtomicBool::new(false));
    {
        let (s, d) = (stopper.clone(), done.clone());
        let deadline = opts.duration.map(|d| started + d);
        std::thread::Builder::new()
            .name("controller".into())
            .spawn(move || controller(vec![s], sig_rx, deadline, d))
            .context("starting the controller thread")?;
    }

    // Writing the frames the node streams, this thread takes CPU time from the traffic it
    // captures, as the node's own capture threads would: like them it runs under SCHED_IDLE
    // while the capture runs (the node drops and counts frames it cannot keep up with), and
    // leaves it once the capture is asked to stop (the stopper lifts it, from whichever thread
    // stops), to write what the node still sends.
    if out.is_some() {
        let _ = rds_core::set_thread_idle(true);
    }
    let mut t = Tally {
        link: Some(link),
        ..Tally::default()
    };
    let mut output_error: Option<anyhow::Error> = None;
    let mut last_flush = Instant::now();
    let ended: anyhow::Result<()> = loop {
        let (reply, data) = match client.read_reply() {
            Ok(r) => r,
            Err(_) if stopper.aborted.load(Ordering::SeqCst) => break Ok(()),
            Err(CtlError::Node { message, .. }) => break Err(anyhow!("node '{name}': {message}")),
            Err(e) => break Err(e.into()),
        };
        match reply {
            Reply::TraceFrames { .. } => {
                let Some((c, stdout)) = out.as_mut() else {
                    break Err(anyhow!("node '{name}': frames for a file it writes"));
                };
                if output_error.is_some() {
                    continue;
                }
                let mut res = c.write_batch(&data);
                if res.is_ok() && (*stdout || last_flush.elapsed() >= Duration::from_secs(1)) {
                    last_flush = Instant::now();
                    res = c.flush();
                }
                if let Err(e) = res {
                    output_error = Some(if is_broken_pipe(&e) {
                        // The reader went away (wireshark closed): end quietly.
                        anyhow!(io::Error::from(io::ErrorKind::BrokenPipe))
                    } else {
                        anyhow::Error::new(e).context("writing the capture")
                    });
                }
                if output_error.is_some() || c.full() {
                    stopper.stop();
                }
            }
            Reply::TraceEnd {
                captured,
                dropped,
                written,
            } => {
                t.end = Some((captured, dropped));
                if let Some(w) = written {
                    t.counts = w;
                }
                break Ok(());
            }
            other => break Err(anyhow!("node '{name}': unexpected reply {other:?}")),
        }
    };
    done.store(true, Ordering::SeqCst);
    let finished: anyhow::Result<()> = match (out, target) {
        (Some((c, stdout)), _) => match c.finish() {
            Ok((w, counts)) => {
                t.counts = counts;
                match w.finish(stdout) {
                    Err(e) if stdout && e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
                    r => r.map_err(anyhow::Error::new),
                }
            }
            Err(e) if is_broken_pipe(&e) => Ok(()),
            Err(e) => Err(anyhow::Error::new(e)),
        },
        (None, Target::Node { file, .. }) => sync(file).map_err(anyhow::Error::new),
        (None, Target::Stream { .. }) => Ok(()),
    };
    if let Some(e) = output_error {
        if rds_cli::error_status(&e) == 0 {
            summary(&t);
            return Ok(0);
        }
        return Err(e);
    }
    if let Err(e) = finished {
        return Err(e).context("closing the capture");
    }
    summary(&t);
    if let Some(n) = undelivered(&t, opts.count) {
        eprintln!("rds-trace: the node captured {n} frames it did not deliver");
    }
    match ended {
        Ok(()) if t.end.is_none() => {
            eprintln!("rds-trace: the node did not confirm the end of the trace; dropped frames are unknown");
            Ok(0)
        }
        Ok(()) => Ok(0),
        Err(e) => Err(e.context("the trace ended early; the capture holds the frames written")),
    }
}

/// The node's answer to [`Request::TraceStart`]: its transports and the link type it writes
/// (none when it streams), or why it refused.
fn started(
    client: &mut CtlClient,
    name: &str,
    owner_uid: u32,
) -> anyhow::Result<(Vec<String>, Option<CaptureLink>)> {
    match client.read_reply() {
        Ok((Reply::TraceStarted { transports, link }, _)) => Ok((transports, link)),
        Ok((other, _)) => bail!("node '{name}': unexpected reply {other:?}"),
        Err(CtlError::Node { errno, message }) if errno == libc::EPERM => bail!(
            "cannot trace node '{name}': permission denied: tracing needs root or the node's \
             owner (uid {owner_uid}) ({message})"
        ),
        Err(CtlError::Node { errno, .. }) if errno == libc::EBUSY => bail!(
            "cannot trace node '{name}': another trace session is running on it (one per node)"
        ),
        Err(CtlError::Node { message, .. }) => bail!("cannot trace node '{name}': {message}"),
        Err(e) => Err(e.into()),
    }
}

fn summary(t: &Tally) {
    let c = &t.counts;
    match t.end {
        Some((_, dropped)) => eprintln!("{} frames captured, {dropped} dropped", c.written),
        None => eprintln!("{} frames captured", c.written),
    }
    if c.other > 0 {
        eprintln!(
            "rds-trace: {} frames of other transports than {} (or same-node loopback) were not written",
            c.other,
            match t.link {
                Some(CaptureLink::Ib) => "RDS/IB",
                _ => "RDS/TCP",
            }
        );
    }
    if c.invalid > 0 {
        eprintln!(
            "rds-trace: {} inconsistent frames were not written (the first: {})",
            c.invalid,
            c.first_invalid.as_deref().unwrap_or("unknown")
        );
    }
}

/// Frames the node captured but did not deliver (never expected; a node that discards its
/// queue at the stop would cause it). Not checked when `-c` cut the capture short.
fn undelivered(t: &Tally, count: Option<u64>) -> Option<u64> {
    let (captured, _) = t.end?;
    let c = &t.counts;
    if count.is_some_and(|n| c.written >= n) {
        return None;
    }
    let delivered = c.written + c.other + c.invalid;
    (captured > delivered).then(|| captured - delivered)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regular files (new or existing) are written by the node through a temporary file, a
    /// character device directly; stdout, FIFOs and symbolic links are streamed.
    #[test]
    fn targets() {
        let d = tempfile::tempdir().unwrap();
        let kind = |p: &std::path::Path| {
            let t = Target::choose(p);
            let k = match &t {
                Target::Node {
                    tmp: Some(tmp),
                    path,
                    ..
                } => {
                    assert_eq!(tmp.parent(), path.parent());
                    assert!(tmp.exists());
                    "node"
                }
                Target::Node { tmp: None, .. } => "device",
                Target::Stream { stdout: true } => "stdout",
                Target::Stream { stdout: false } => "stream",
            };
            t.discard();
            k
        };
        assert_eq!(kind(std::path::Path::new("-")), "stdout");
        let new = d.path().join("new.pcap");
        assert_eq!(kind(&new), "node");
        assert!(
            !new.exists(),
            "the file gets its name only when the node agreed"
        );
        std::fs::write(&new, b"old").unwrap();
        assert_eq!(kind(&new), "node");
        assert_eq!(std::fs::read(&new).unwrap(), b"old");
        let fifo = d.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert_eq!(kind(&fifo), "stream");
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&new, &link).unwrap();
        assert_eq!(kind(&link), "stream");
        assert_eq!(kind(std::path::Path::new("/dev/null")), "device");
        assert_eq!(
            std::fs::read_dir(d.path()).unwrap().count(),
            3,
            "no temporary file is left"
        );
    }

    #[test]
    fn snaplen_rules() {
        assert_eq!(effective_snaplen(0), 48 + (1 << 20));
        assert_eq!(effective_snaplen(1), 48);
        assert_eq!(effective_snaplen(96), 96);
        assert_eq!(effective_snaplen(u32::MAX), 48 + (1 << 20));
    }
}
