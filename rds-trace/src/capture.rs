//! `rds-trace -w FILE`: capture from a running node.
//!
//! 1. Pick the node: `--node NAME`, else the daemon if it runs, else the only running node
//!    (several nodes and no daemon: an error listing them). Nodes are found in the runtime
//!    directories of [`rds_core::ctl`] (`RDS_RUNTIME_DIR` overrides them).
//! 2. Say hello on its control socket and send [`Request::TraceStart`] with the snap length
//!    and filters. The node refuses with `EPERM` unless we are root or its owner, and with
//!    `EBUSY` while another trace session runs on it (one per node).
//! 3. Write every [`Reply::TraceFrame`] as RDS/TCP through [`PcapSink::ethernet`]. `-w -`
//!    writes to stdout and flushes after every frame.
//! 4. At `-c COUNT` frames, `-G SECONDS`, SIGINT or SIGTERM: send [`Request::TraceStop`],
//!    write what the node still sends until [`Reply::TraceEnd`], close the file and print
//!    `N frames captured, M dropped` to stderr (N frames written, M frames the node's tap
//!    dropped because the capture fell behind). A second signal, or a node that does not end
//!    the session within 5 seconds of the stop, ends the capture without waiting.
//!
//! Signals are handled without a signal handler: SIGINT and SIGTERM are blocked in every
//! thread and a dedicated thread takes them with `sigwait`.

use std::fs::File;
use std::io::{self, BufWriter, IsTerminal};
use std::net::IpAddr;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use nix::sys::signal::{SigSet, Signal};
use rds_core::ctl::{
    discover, read_frame, write_frame, FrameError, NodeEndpoint, Reply, Request, DAEMON_NAME,
    PROTO_VERSION,
};
use rds_core::trace::{Direction, PcapSink, TcpCaptureConfig, TraceError, TraceRecord, Transport};
use rds_core::wire::{HEADER_LEN, MAX_MSG_SIZE};

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

/// Chooses the node to trace (see the module documentation).
///
/// # Errors
/// No node runs, the named one does not, or several run without a daemon.
pub fn pick_node(name: Option<&str>) -> anyhow::Result<NodeEndpoint> {
    let nodes = discover();
    let names = || {
        nodes
            .iter()
            .map(|e| e.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if nodes.is_empty() {
        bail!(
            "no RDS node is running (start one with 'rds-ctrl load', or run a tool that \
             embeds one, such as rds-stress)"
        );
    }
    match name {
        Some(n) => match nodes.iter().find(|e| e.name == n) {
            Some(e) => Ok(e.clone()),
            None => bail!("no node named '{n}'; running nodes: {}", names()),
        },
        None => {
            if let Some(d) = nodes.iter().find(|e| e.name == DAEMON_NAME) {
                return Ok(d.clone());
            }
            if nodes.len() == 1 {
                return Ok(nodes[0].clone());
            }
            bail!(
                "several RDS nodes are running; choose one with --node NAME: {}",
                names()
            )
        }
    }
}

fn send(stream: &mut UnixStream, req: &Request) -> io::Result<()> {
    let json = serde_json::to_vec(req).map_err(io::Error::other)?;
    write_frame(stream, &json, &[])
}

fn recv(stream: &mut impl io::Read) -> anyhow::Result<(Reply, Vec<u8>)> {
    let (json, data) = match read_frame(stream) {
        Ok(f) => f,
        Err(FrameError::Closed) => bail!("the node closed the control connection"),
        Err(e) => return Err(anyhow!("control socket: {e}")),
    };
    let reply: Reply = serde_json::from_slice(&json)
        .map_err(|e| anyhow!("control socket: unexpected reply: {e}"))?;
    Ok((reply, data))
}

/// Ends the session from any thread: the first call sends [`Request::TraceStop`], `abort`
/// shuts the connection down.
#[derive(Debug)]
struct Stopper {
    writer: Mutex<UnixStream>,
    stop_sent: Mutex<Option<Instant>>,
    aborted: AtomicBool,
}

impl Stopper {
    fn stop(&self) {
        let mut sent = self.stop_sent.lock().unwrap_or_else(|p| p.into_inner());
        if sent.is_some() {
            return;
        }
        *sent = Some(Instant::now());
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
        let w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let _ = w.shutdown(std::net::Shutdown::Both);
    }
}

/// Blocks SIGINT and SIGTERM in this thread (and the threads it starts later) and starts a
/// thread that takes them with `sigwait`, passing each on `tx`.
fn signal_thread(tx: mpsc::Sender<Signal>) -> anyhow::Result<()> {
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.thread_block().context("blocking SIGINT and SIGTERM")?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || loop {
            match set.wait() {
                Ok(sig) => {
                    if tx.send(sig).is_err() {
                        return;
                    }
                }
                Err(_) => return,
            }
        })
        .context("starting the signal thread")?;
    Ok(())
}

/// Watches signals, the duration and the stop deadline.
fn controller(
    stopper: Arc<Stopper>,
    signals: mpsc::Receiver<Signal>,
    deadline: Option<Instant>,
    done: Arc<AtomicBool>,
) {
    let mut signalled = 0;
    while !done.load(Ordering::SeqCst) {
        match signals.recv_timeout(Duration::from_millis(50)) {
            Ok(_) => {
                signalled += 1;
                if signalled == 1 {
                    stopper.stop();
                } else {
                    stopper.abort();
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                std::thread::sleep(Duration::from_millis(50))
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            stopper.stop();
        }
        if stopper
            .stop_sent_at()
            .is_some_and(|t| t.elapsed() >= STOP_GRACE)
        {
            stopper.abort();
        }
    }
}

/// Where frames go.
enum Out {
    File(PcapSink<BufWriter<File>>),
    Stdout(PcapSink<io::Stdout>),
}

impl Out {
    fn write(&mut self, rec: &TraceRecord) -> Result<(), TraceError> {
        match self {
            Out::File(s) => s.write(rec),
            Out::Stdout(s) => {
                s.write(rec)?;
                s.flush()
            }
        }
    }

    fn flush(&mut self) -> Result<(), TraceError> {
        match self {
            Out::File(s) => s.flush(),
            Out::Stdout(s) => s.flush(),
        }
    }

    fn finish(self) -> Result<(), TraceError> {
        match self {
            Out::File(s) => {
                let w = s.finish()?;
                let f = w.into_inner().map_err(|e| e.into_error())?;
                f.sync_all()?;
                Ok(())
            }
            Out::Stdout(s) => s.finish().map(|_| ()),
        }
    }
}

fn is_broken_pipe(e: &TraceError) -> bool {
    match e {
        TraceError::Io(io) => io.kind() == io::ErrorKind::BrokenPipe,
        TraceError::Pcap(pcap_file::PcapError::IoError(io)) => {
            io.kind() == io::ErrorKind::BrokenPipe
        }
        _ => false,
    }
}

/// How the session ended.
#[derive(Debug, Default)]
struct Tally {
    written: u64,
    not_tcp: u64,
    invalid: u64,
    end: Option<(u64, u64)>,
}

/// `rds-trace -w FILE ...`.
///
/// # Errors
/// No node, refused trace, output errors.
pub fn run(opts: Options) -> anyhow::Result<u8> {
    let to_stdout = opts.file.as_os_str() == "-";
    if to_stdout && io::stdout().is_terminal() {
        bail!(
            "refusing to write a binary capture to a terminal: redirect stdout to a file, or \
             pipe it to 'wireshark -k -i -'"
        );
    }
    let (sig_tx, sig_rx) = mpsc::channel();
    signal_thread(sig_tx)?;

    let node = pick_node(opts.node.as_deref())?;
    let mut stream = UnixStream::connect(&node.path).with_context(|| {
        format!(
            "connecting to node '{}' ({})",
            node.name,
            node.path.display()
        )
    })?;
    send(&mut stream, &Request::Hello { v: PROTO_VERSION })?;
    let (addrs, owner_uid) = match recv(&mut stream)?.0 {
        Reply::Hello {
            addrs, owner_uid, ..
        } => (addrs, owner_uid),
        Reply::Error { message, .. } => bail!("node '{}': {message}", node.name),
        other => bail!("node '{}': unexpected reply {other:?}", node.name),
    };
    let snaplen = effective_snaplen(opts.snaplen);
    send(
        &mut stream,
        &Request::TraceStart {
            snaplen,
            peer: opts.peer,
            port: opts.port,
        },
    )?;
    match recv(&mut stream)?.0 {
        Reply::Ok => {}
        Reply::Error { errno, message } if errno == libc::EPERM => bail!(
            "cannot trace node '{}': permission denied: tracing needs root or the node's \
             owner (uid {owner_uid}) ({message})",
            node.name
        ),
        Reply::Error { errno, .. } if errno == libc::EBUSY => bail!(
            "cannot trace node '{}': another trace session is running on it (one per node)",
            node.name
        ),
        Reply::Error { message, .. } => bail!("cannot trace node '{}': {message}", node.name),
        other => bail!("node '{}': unexpected reply {other:?}", node.name),
    }
    let started = Instant::now();
    // Frames are read through a buffer: one read call for many small frames.
    let mut frames_in =
        io::BufReader::with_capacity(1 << 20, stream.try_clone().context("control socket")?);
    let stopper = Arc::new(Stopper {
        writer: Mutex::new(stream.try_clone().context("control socket")?),
        stop_sent: Mutex::new(None),
        aborted: AtomicBool::new(false),
    });

    // The file is created once the node agreed to trace.
    let out = if to_stdout {
        let cfg = TcpCaptureConfig {
            hold_ns: 0,
            ..TcpCaptureConfig::default()
        };
        PcapSink::ethernet(io::stdout(), cfg).map(Out::Stdout)
    } else {
        match File::create(&opts.file) {
            Ok(f) => PcapSink::ethernet(
                BufWriter::with_capacity(1 << 20, f),
                TcpCaptureConfig::default(),
            )
            .map(Out::File),
            Err(e) => {
                stopper.stop();
                return Err(e).with_context(|| format!("creating {}", opts.file.display()));
            }
        }
    };
    let mut out = match out {
        Ok(o) => o,
        Err(e) if is_broken_pipe(&e) => {
            stopper.stop();
            return Ok(0);
        }
        Err(e) => {
            stopper.stop();
            return Err(e).context("writing the capture header");
        }
    };
    let addr_list = addrs
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    eprintln!(
        "rds-trace: tracing node '{}' ({addr_list}), snaplen {snaplen}",
        node.name
    );

    let done = Arc::new(AtomicBool::new(false));
    {
        let (s, d) = (stopper.clone(), done.clone());
        let deadline = opts.duration.map(|d| started + d);
        std::thread::Builder::new()
            .name("controller".into())
            .spawn(move || controller(s, sig_rx, deadline, d))
            .context("starting the controller thread")?;
    }

    let mut t = Tally::default();
    let mut output_error: Option<anyhow::Error> = None;
    let mut last_flush = Instant::now();
    let ended: anyhow::Result<()> = loop {
        let (reply, data) = match recv(&mut frames_in) {
            Ok(r) => r,
            Err(e) => {
                if stopper.aborted.load(Ordering::SeqCst) {
                    break Ok(());
                }
                break Err(e);
            }
        };
        match reply {
            Reply::TraceFrame {
                ts_ns,
                dir,
                laddr,
                faddr,
                lane,
                tcp,
                orig_len,
            } => {
                if output_error.is_some() || opts.count.is_some_and(|c| t.written >= c) {
                    continue;
                }
                let Some((local, peer)) = tcp else {
                    t.not_tcp += 1;
                    continue;
                };
                let rec = TraceRecord {
                    ts_ns,
                    dir: if dir == "rx" {
                        Direction::Rx
                    } else {
                        Direction::Tx
                    },
                    local: laddr,
                    peer: faddr,
                    lane,
                    transport: Transport::Tcp { local, peer },
                    orig_len,
                    data: Bytes::from(data),
                };
                match out.write(&rec) {
                    Ok(()) => t.written += 1,
                    Err(TraceError::Record(e)) => {
                        if t.invalid == 0 {
                            eprintln!("rds-trace: frame left out: {e}");
                        }
                        t.invalid += 1;
                    }
                    Err(e) if is_broken_pipe(&e) => {
                        // The reader went away (wireshark closed): end quietly.
                        output_error = Some(anyhow!(io::Error::from(io::ErrorKind::BrokenPipe)));
                        stopper.stop();
                        continue;
                    }
                    Err(e) => {
                        output_error = Some(anyhow::Error::new(e).context("writing the capture"));
                        stopper.stop();
                        continue;
                    }
                }
                if opts.count.is_some_and(|c| t.written >= c) {
                    stopper.stop();
                }
                if last_flush.elapsed() >= Duration::from_secs(1) {
                    last_flush = Instant::now();
                    if let Err(e) = out.flush() {
                        output_error = Some(anyhow::Error::new(e).context("writing the capture"));
                        stopper.stop();
                    }
                }
            }
            Reply::TraceEnd { captured, dropped } => {
                t.end = Some((captured, dropped));
                break Ok(());
            }
            Reply::Error { message, .. } => break Err(anyhow!("node '{}': {message}", node.name)),
            other => break Err(anyhow!("node '{}': unexpected reply {other:?}", node.name)),
        }
    };
    done.store(true, Ordering::SeqCst);
    let finished = out.finish();
    if let Some(e) = output_error {
        if super::error_status(&e) == 0 {
            summary(&t);
            return Ok(0);
        }
        return Err(e);
    }
    if let Err(e) = finished {
        if !is_broken_pipe(&e) {
            return Err(e).context("closing the capture");
        }
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

fn summary(t: &Tally) {
    match t.end {
        Some((_, dropped)) => eprintln!("{} frames captured, {dropped} dropped", t.written),
        None => eprintln!("{} frames captured", t.written),
    }
    if t.not_tcp > 0 {
        eprintln!(
            "rds-trace: {} frames of other transports than RDS/TCP were not written",
            t.not_tcp
        );
    }
    if t.invalid > 0 {
        eprintln!(
            "rds-trace: {} inconsistent frames were not written",
            t.invalid
        );
    }
}

/// Frames the node captured but did not deliver (never expected; a node that discards its
/// queue at the stop would cause it). Not checked when `-c` cut the capture short.
fn undelivered(t: &Tally, count: Option<u64>) -> Option<u64> {
    let (captured, _) = t.end?;
    if count.is_some_and(|c| t.written >= c) {
        return None;
    }
    let delivered = t.written + t.not_tcp + t.invalid;
    (captured > delivered).then(|| captured - delivered)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snaplen_rules() {
        assert_eq!(effective_snaplen(0), 48 + (1 << 20));
        assert_eq!(effective_snaplen(1), 48);
        assert_eq!(effective_snaplen(96), 96);
        assert_eq!(effective_snaplen(u32::MAX), 48 + (1 << 20));
    }
}
