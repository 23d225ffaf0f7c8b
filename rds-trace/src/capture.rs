//! `rds-trace -w FILE`: capture from a running node.
//!
//! 1. Pick the node: `--node NAME`, else the daemon if it runs, else the only running node
//!    (several nodes and no daemon: an error listing them). Nodes are found in the runtime
//!    directories of [`rds_core::ctl`] (`RDS_RUNTIME_DIR` overrides them).
//! 2. Say hello on its control socket and send [`Request::TraceStart`] with the snap length
//!    and filters; the node answers [`Reply::TraceStarted`] with the transports it runs. The node refuses with `EPERM` unless we are root or its owner, and with
//!    `EBUSY` while another trace session runs on it (one per node).
//! 3. Pick the capture's transport: `--transport`, else IB when the node runs only the IB
//!    transport (as its [`Reply::TraceStarted`] says), else TCP. A pcap file has one link type, so a capture holds
//!    one transport's frames: RDS/TCP frames through [`PcapSink::ethernet`], or RDS/IB
//!    fragments through [`PcapSink::erf`]; frames of the other transport are counted and
//!    reported, not written.
//! 4. Decode every [`Reply::TraceFrames`] batch of binary trace records
//!    ([`rds_core::node::tap::decode_records`]) and write its frames. `-w -` writes to stdout
//!    and flushes after every batch.
//! 5. At `-c COUNT` frames, `-G SECONDS`, SIGINT or SIGTERM: send [`Request::TraceStop`],
//!    write what the node still sends until [`Reply::TraceEnd`], close the file and print
//!    `N frames captured, M dropped` to stderr (N frames written, M frames the node's tap
//!    dropped because the capture fell behind). A second signal, or a node that does not end
//!    the session within 5 seconds of the stop, ends the capture without waiting.
//!
//! Signals are handled without a signal handler: SIGINT and SIGTERM are blocked in every
//! thread and a dedicated thread takes them with `sigwait`.

use std::fs::File;
use std::io::{self, BufWriter, IsTerminal, Read as _};
use std::net::IpAddr;
use std::os::fd::AsFd;
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
    MAX_DATA, MAX_JSON, PROTO_VERSION,
};
use rds_core::node::tap::decode_records;
use rds_core::trace::{PcapSink, TcpCaptureConfig, TraceError, TraceRecord, Transport};
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
    fn name(self) -> &'static str {
        match self {
            CaptureTransport::Tcp => "tcp",
            CaptureTransport::Ib => "ib",
        }
    }

    fn holds(self, t: &Transport) -> bool {
        matches!(
            (self, t),
            (CaptureTransport::Tcp, Transport::Tcp { .. })
                | (CaptureTransport::Ib, Transport::Ib { .. })
        )
    }
}

/// The default transport of a capture from the transports a node runs: IB when it runs IB
/// and not TCP, else TCP.
pub fn default_transport(node_transports: &[String]) -> CaptureTransport {
    let has = |t: &str| node_transports.iter().any(|x| x == t);
    if has("ib") && !has("tcp") {
        CaptureTransport::Ib
    } else {
        CaptureTransport::Tcp
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

/// Reads one reply of the trace stream like [`read_frame`], without zeroing the data buffer
/// first or copying it through a buffer (a batch of trace records is up to 1 MiB).
fn recv_trace(stream: &mut impl io::Read) -> anyhow::Result<(Reply, Vec<u8>)> {
    let mut hdr = [0u8; 8];
    let mut got = 0;
    while got < 8 {
        match stream.read(&mut hdr[got..]) {
            Ok(0) if got == 0 => bail!("the node closed the control connection"),
            Ok(0) => bail!("control socket: connection closed inside a frame"),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(anyhow!("control socket: {e}")),
        }
    }
    let json_len = u32::from_be_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]) as usize;
    let data_len = u32::from_be_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]) as usize;
    if json_len > MAX_JSON || data_len > MAX_DATA {
        bail!("control socket: frame too large ({json_len} + {data_len} bytes)");
    }
    let mut json = vec![0u8; json_len];
    stream
        .read_exact(&mut json)
        .map_err(|e| anyhow!("control socket: {e}"))?;
    let mut data = Vec::with_capacity(data_len);
    let n = io::Read::take(&mut *stream, data_len as u64)
        .read_to_end(&mut data)
        .map_err(|e| anyhow!("control socket: {e}"))?;
    if n < data_len {
        bail!("control socket: connection closed inside a frame");
    }
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

/// Where frames go: a file, or stdout (flushed after every batch).
struct Out {
    sink: PcapSink<BufWriter<File>>,
    stdout: bool,
}

impl Out {
    fn write(&mut self, rec: &TraceRecord) -> Result<(), TraceError> {
        self.sink.write(rec)
    }

    fn flush(&mut self) -> Result<(), TraceError> {
        self.sink.flush()
    }

    fn finish(self) -> Result<(), TraceError> {
        let w = self.sink.finish()?;
        let f = w.into_inner().map_err(|e| e.into_error())?;
        if !self.stdout {
            f.sync_all()?;
        }
        Ok(())
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
    /// Frames of the other transport (and same-node loopback frames).
    other: u64,
    invalid: u64,
    end: Option<(u64, u64)>,
    transport: Option<CaptureTransport>,
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
    let node_transports = match recv(&mut stream)?.0 {
        Reply::TraceStarted { transports } => transports,
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
    };
    let transport = opts
        .transport
        .unwrap_or_else(|| default_transport(&node_transports));
    let started = Instant::now();
    // Batches of up to 1 MiB: read straight into their buffers.
    let mut frames_in = stream.try_clone().context("control socket")?;
    let stopper = Arc::new(Stopper {
        writer: Mutex::new(stream.try_clone().context("control socket")?),
        stop_sent: Mutex::new(None),
        aborted: AtomicBool::new(false),
    });

    // The file is created once the node agreed to trace.
    let file = if to_stdout {
        io::stdout()
            .as_fd()
            .try_clone_to_owned()
            .map(File::from)
            .context("standard output")
    } else {
        File::create(&opts.file).with_context(|| format!("creating {}", opts.file.display()))
    };
    let file = match file {
        Ok(f) => BufWriter::with_capacity(1 << 20, f),
        Err(e) => {
            stopper.stop();
            return Err(e);
        }
    };
    let out = match transport {
        CaptureTransport::Tcp => {
            let cfg = if to_stdout {
                TcpCaptureConfig {
                    hold_ns: 0,
                    ..TcpCaptureConfig::default()
                }
            } else {
                TcpCaptureConfig::default()
            };
            PcapSink::ethernet(file, cfg)
        }
        CaptureTransport::Ib => PcapSink::erf(file),
    }
    .map(|sink| Out {
        sink,
        stdout: to_stdout,
    });
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
        "rds-trace: tracing node '{}' ({addr_list}), snaplen {snaplen}, transport {}",
        node.name,
        transport.name()
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

    let mut t = Tally {
        transport: Some(transport),
        ..Tally::default()
    };
    let mut output_error: Option<anyhow::Error> = None;
    let mut last_flush = Instant::now();
    let ended: anyhow::Result<()> = loop {
        let (reply, data) = match recv_trace(&mut frames_in) {
            Ok(r) => r,
            Err(e) => {
                if stopper.aborted.load(Ordering::SeqCst) {
                    break Ok(());
                }
                break Err(e);
            }
        };
        match reply {
            Reply::TraceFrames { .. } => {
                if output_error.is_some() {
                    continue;
                }
                for f in decode_records(Bytes::from(data)) {
                    if opts.count.is_some_and(|c| t.written >= c) {
                        break;
                    }
                    let f = match f {
                        Ok(f) => f,
                        Err(e) => {
                            if t.invalid == 0 {
                                eprintln!("rds-trace: frames left out: {e}");
                            }
                            t.invalid += 1;
                            break;
                        }
                    };
                    let Some(rec) =
                        TraceRecord::from_tap_frame(f).filter(|r| transport.holds(&r.transport))
                    else {
                        t.other += 1;
                        continue;
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
                            output_error =
                                Some(anyhow!(io::Error::from(io::ErrorKind::BrokenPipe)));
                            break;
                        }
                        Err(e) => {
                            output_error =
                                Some(anyhow::Error::new(e).context("writing the capture"));
                            break;
                        }
                    }
                }
                if output_error.is_some() || opts.count.is_some_and(|c| t.written >= c) {
                    stopper.stop();
                    continue;
                }
                if out.stdout || last_flush.elapsed() >= Duration::from_secs(1) {
                    last_flush = Instant::now();
                    if let Err(e) = out.flush() {
                        if is_broken_pipe(&e) {
                            output_error =
                                Some(anyhow!(io::Error::from(io::ErrorKind::BrokenPipe)));
                        } else {
                            output_error =
                                Some(anyhow::Error::new(e).context("writing the capture"));
                        }
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
    if t.other > 0 {
        eprintln!(
            "rds-trace: {} frames of other transports than {} (or same-node loopback) were not written",
            t.other,
            match t.transport {
                Some(CaptureTransport::Ib) => "RDS/IB",
                _ => "RDS/TCP",
            }
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
    let delivered = t.written + t.other + t.invalid;
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
