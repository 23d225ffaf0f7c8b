//! One RDS/TCP capture of several nodes: `rds-trace -w FILE` without `--node` when nodes of
//! several processes run, no daemon does, and this user may trace more than one of them.
//!
//! Every node streams its frames ([`Request::TraceStart`] without an output); a reader thread
//! per node passes its replies on one bounded channel to this thread, which writes them. A
//! frame that two traced nodes both see (one sends it, the other receives it) is written once,
//! from its sender: a node's received frames whose peer address another traced node owns are
//! left out. Each node's frames go through a [`Capture`] of their own (the node's TCP segments
//! and sequence numbers), whose pcap records are appended whole to the one output, after the
//! first capture's file header. The capture ends as a single node's does (`-c`, `-G`,
//! SIGINT or SIGTERM, a second signal), every session is stopped, and the summary adds up the
//! nodes' counts.

use std::cell::RefCell;
use std::io::{self, Write};
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use nix::sys::signal::Signal;
use rds_core::ctl::client::{CtlClient, CtlError};
use rds_core::ctl::select::RunningNode;
use rds_core::ctl::{Reply, Request};
use rds_core::trace::{
    decode_record_refs, Capture, CaptureLink, CaptureTally, Direction, TcpCaptureConfig,
    REC_HDR_LEN,
};

use super::{
    controller, effective_snaplen, is_broken_pipe, started, stream_output, summary, Dest, Options,
    Stopper, Tally, Target,
};

/// Bytes of a pcap file header.
const FILE_HEADER_LEN: usize = 24;
/// Bytes of a pcap record header (its captured length at offset 8, little-endian).
const RECORD_HEADER_LEN: usize = 16;
/// Replies waiting for the writer, over all nodes.
const QUEUE: usize = 16;

/// The output of one node's [`Capture`], read back by the writer.
#[derive(Clone, Default)]
struct Spool(Rc<RefCell<Vec<u8>>>);

impl Write for Spool {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// One traced node.
struct Session {
    name: String,
    capture: Capture<Spool>,
    spool: Spool,
    /// File header bytes still to drop from the spool (the output has the first session's).
    header_left: usize,
    /// The addresses of the other traced nodes: frames received from them are theirs.
    others: Vec<IpAddr>,
    end: Option<(u64, u64)>,
    stopper: Arc<Stopper>,
}

/// Moves the whole pcap records of `spool` to `out`, leaving out the first `header_left`
/// bytes (a file header the output already has).
fn drain(spool: &Spool, header_left: &mut usize, out: &mut Dest) -> io::Result<()> {
    let mut buf = spool.0.borrow_mut();
    let skip = (*header_left).min(buf.len());
    *header_left -= skip;
    let mut at = skip;
    while let Some(h) = buf.get(at..at + RECORD_HEADER_LEN) {
        let incl = u32::from_le_bytes([h[8], h[9], h[10], h[11]]) as usize;
        let end = at + RECORD_HEADER_LEN + incl;
        if end > buf.len() {
            break;
        }
        at = end;
    }
    out.write_all(&buf[skip..at])?;
    buf.drain(..at);
    Ok(())
}

/// The records of a streamed batch that this node alone saw: all but those it received from
/// another traced node, at most `limit` of them.
pub(super) fn own_records(batch: &[u8], others: &[IpAddr], limit: Option<u64>) -> Vec<u8> {
    let mut kept = Vec::with_capacity(batch.len());
    let mut n = 0u64;
    let mut at = 0;
    for r in decode_record_refs(batch) {
        let Ok(r) = r else { break };
        let Some(cap) = batch.get(at..at + 4) else {
            break;
        };
        let len = REC_HDR_LEN + u32::from_le_bytes([cap[0], cap[1], cap[2], cap[3]]) as usize;
        let span = at..at + len;
        at += len;
        let peer = rds_core::info::canonical(r.faddr());
        if r.dir() == Direction::Rx && others.contains(&peer) {
            continue;
        }
        if limit.is_some_and(|l| n >= l) {
            break;
        }
        if let Some(b) = batch.get(span) {
            kept.extend_from_slice(b);
            n += 1;
        }
    }
    kept
}

/// A reply from node `.0` (or the end of its stream).
type Item = (usize, Result<(Reply, Vec<u8>), CtlError>);

/// Traces `nodes` into one capture; see the module documentation.
///
/// # Errors
/// A node refused to trace, the output failed, a node's stream broke.
pub(super) fn run(
    opts: &Options,
    target: &Target,
    nodes: &[RunningNode],
    sig_rx: mpsc::Receiver<Signal>,
) -> anyhow::Result<u8> {
    let snaplen = effective_snaplen(opts.snaplen);
    let link = CaptureLink::Tcp;
    let stdout = matches!(target, Target::Stream { stdout: true });
    let tcp = TcpCaptureConfig {
        hold_ns: if stdout {
            0
        } else {
            TcpCaptureConfig::default().hold_ns
        },
        ..TcpCaptureConfig::default()
    };
    let addrs = |n: &RunningNode| -> Vec<IpAddr> {
        n.hello.as_ref().map_or_else(Vec::new, |h| {
            h.addrs
                .iter()
                .map(|a| rds_core::info::canonical(*a))
                .collect()
        })
    };
    // The nodes that agreed to trace; one that refuses (another session runs on it) or went
    // away is left out, with a line saying why.
    let mut clients = Vec::new();
    let mut traced = Vec::new();
    let mut refused = None;
    for n in nodes {
        let name = n.name().to_string();
        let start = CtlClient::connect(&n.endpoint.path)
            .map_err(anyhow::Error::new)
            .and_then(|mut c| {
                c.send_only(&Request::TraceStart {
                    snaplen,
                    peer: opts.peer,
                    port: opts.port,
                    output: None,
                })?;
                let owner_uid = c.hello.owner_uid;
                started(&mut c, &name, owner_uid)?;
                Ok(c)
            });
        match start {
            Ok(c) => {
                clients.push(c);
                traced.push(n);
            }
            Err(e) => {
                eprintln!("rds-trace: node '{name}' left out: {e:#}");
                refused = Some(e);
            }
        }
    }
    if clients.is_empty() {
        return Err(refused.unwrap_or_else(|| anyhow!("no node to trace")));
    }
    let nodes = traced;
    let mut sessions = Vec::new();
    for (i, (n, client)) in nodes.iter().zip(&clients).enumerate() {
        let name = n.name().to_string();
        let spool = Spool::default();
        let capture = Capture::new(spool.clone(), link, None, tcp)
            .map_err(|e| anyhow::Error::new(e).context("writing the capture header"))?;
        let others = nodes
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != i)
            .flat_map(|(_, m)| addrs(m))
            .collect();
        sessions.push(Session {
            name,
            capture,
            spool,
            header_left: FILE_HEADER_LEN,
            others,
            end: None,
            stopper: Stopper::new(client.stream().try_clone().context("control socket")?, None),
        });
    }
    let stop_all = |sessions: &[Session]| sessions.iter().for_each(|s| s.stopper.stop());
    if let Target::Node {
        tmp: Some(tmp),
        path,
        ..
    } = target
    {
        if let Err(e) = std::fs::rename(tmp, path) {
            stop_all(&sessions);
            return Err(e).with_context(|| format!("creating {}", path.display()));
        }
    }
    // The file's header is the first capture's (every capture wrote its own at its start).
    let header: Vec<u8> = sessions[0]
        .spool
        .0
        .borrow()
        .get(..FILE_HEADER_LEN)
        .map(<[u8]>::to_vec)
        .unwrap_or_default();
    let mut out = match stream_output(opts, target).and_then(|mut o| {
        o.write_all(&header)
            .context("writing the capture header")
            .map(|()| o)
    }) {
        Ok(o) => o,
        Err(e) => {
            stop_all(&sessions);
            return Err(e);
        }
    };
    let list: Vec<String> = nodes
        .iter()
        .map(|n| {
            let a: Vec<String> = addrs(n).iter().map(ToString::to_string).collect();
            format!("{} ({})", n.name(), a.join(", "))
        })
        .collect();
    eprintln!(
        "rds-trace: tracing {} node{}: {}, snaplen {snaplen}, transport {}; a frame two of \
         them see is written once, from its sender (choose one with --node NAME|ADDRESS|PID)",
        nodes.len(),
        if nodes.len() == 1 { "" } else { "s" },
        list.join(", "),
        link.name()
    );

    let done = Arc::new(AtomicBool::new(false));
    {
        let stoppers = sessions.iter().map(|s| s.stopper.clone()).collect();
        let d = done.clone();
        let deadline = opts.duration.map(|t| Instant::now() + t);
        std::thread::Builder::new()
            .name("controller".into())
            .spawn(move || controller(stoppers, sig_rx, deadline, d))
            .context("starting the controller thread")?;
    }
    let (tx, rx) = mpsc::sync_channel::<Item>(QUEUE);
    for (i, mut c) in clients.into_iter().enumerate() {
        let tx = tx.clone();
        std::thread::Builder::new()
            .name(format!("trace-{i}"))
            .spawn(move || loop {
                let r = c.read_reply();
                let last = !matches!(r, Ok((Reply::TraceFrames { .. }, _)));
                if tx.send((i, r)).is_err() || last {
                    return;
                }
            })
            .context("starting a reader thread")?;
    }
    drop(tx);

    let mut output_error: Option<anyhow::Error> = None;
    let mut stream_error: Option<anyhow::Error> = None;
    let mut written = 0u64;
    let mut last_flush = Instant::now();
    for (i, r) in rx {
        let s = &mut sessions[i];
        match r {
            Ok((Reply::TraceFrames { .. }, data)) => {
                if output_error.is_some() {
                    continue;
                }
                let limit = opts.count.map(|c| c.saturating_sub(written));
                let mine = own_records(&data, &s.others, limit);
                let before = s.capture.tally().written;
                let mut res = s.capture.write_batch(&mine);
                if res.is_ok() && (stdout || last_flush.elapsed() >= Duration::from_secs(1)) {
                    last_flush = Instant::now();
                    res = s.capture.flush();
                }
                written += s.capture.tally().written - before;
                let res = res
                    .map_err(|e| {
                        if is_broken_pipe(&e) {
                            anyhow!(io::Error::from(io::ErrorKind::BrokenPipe))
                        } else {
                            anyhow::Error::new(e).context("writing the capture")
                        }
                    })
                    .and_then(|()| {
                        drain(&s.spool, &mut s.header_left, &mut out)
                            .and_then(|()| if stdout { out.flush() } else { Ok(()) })
                            .map_err(|e| anyhow::Error::new(e).context("writing the capture"))
                    });
                if let Err(e) = res {
                    output_error = Some(e);
                }
                if output_error.is_some() || opts.count.is_some_and(|c| written >= c) {
                    stop_all(&sessions);
                }
            }
            Ok((
                Reply::TraceEnd {
                    captured, dropped, ..
                },
                _,
            )) => s.end = Some((captured, dropped)),
            Ok((other, _)) => {
                stream_error
                    .get_or_insert(anyhow!("node '{}': unexpected reply {other:?}", s.name));
                stop_all(&sessions);
            }
            Err(_) if s.stopper.aborted.load(Ordering::SeqCst) => {}
            Err(CtlError::Node { message, .. }) => {
                stream_error.get_or_insert(anyhow!("node '{}': {message}", s.name));
                stop_all(&sessions);
            }
            Err(e) => {
                stream_error.get_or_insert(anyhow!("node '{}': {e}", s.name));
                stop_all(&sessions);
            }
        }
    }
    done.store(true, Ordering::SeqCst);

    let mut t = Tally {
        link: Some(link),
        counts: CaptureTally::default(),
        end: Some((0, 0)),
    };
    let mut finished: anyhow::Result<()> = Ok(());
    for s in sessions {
        let Session {
            capture,
            spool,
            mut header_left,
            end,
            ..
        } = s;
        match capture.finish() {
            Ok((_, counts)) => {
                t.counts.written += counts.written;
                t.counts.other += counts.other;
                t.counts.invalid += counts.invalid;
                if t.counts.first_invalid.is_none() {
                    t.counts.first_invalid = counts.first_invalid;
                }
            }
            Err(e) => finished = Err(anyhow::Error::new(e)),
        }
        // What the capture held back is in the spool now.
        if let Err(e) = drain(&spool, &mut header_left, &mut out) {
            finished = Err(anyhow::Error::new(e));
        }
        t.end = match (t.end, end) {
            (Some((c, d)), Some((c2, d2))) => Some((c + c2, d + d2)),
            _ => None,
        };
    }
    let closed = out.finish(stdout);
    if let Some(e) = output_error {
        if rds_cli::error_status(&e) == 0 {
            summary(&t);
            return Ok(0);
        }
        return Err(e);
    }
    finished.context("closing the capture")?;
    match closed {
        Err(e) if stdout && e.kind() == io::ErrorKind::BrokenPipe => {}
        r => r.context("closing the capture")?,
    }
    summary(&t);
    if t.end.is_none() {
        eprintln!(
            "rds-trace: a node did not confirm the end of the trace; dropped frames are unknown"
        );
    }
    match stream_error {
        Some(e) => Err(e.context("the trace ended early; the capture holds the frames written")),
        None => Ok(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rds_core::trace::{decode_records, encode_record, TapFrame, Transport};

    fn frame(dir: Direction, local: &str, peer: &str, seq: u8) -> TapFrame {
        let (l, p): (IpAddr, IpAddr) = (local.parse().unwrap(), peer.parse().unwrap());
        TapFrame {
            ts_ns: 1,
            dir,
            laddr: l,
            faddr: p,
            lane: 0,
            transport: Transport::Tcp {
                local: (l, 40000).into(),
                peer: (p, 16385).into(),
            },
            orig_len: 48 + u32::from(seq),
            data: vec![seq; 48 + usize::from(seq)].into(),
        }
    }

    /// Frames received from another traced node are that node's; the rest are kept whole, in
    /// order, up to the limit.
    #[test]
    fn own_records_leave_out_what_a_traced_peer_sent() {
        let mut batch = Vec::new();
        let frames = [
            frame(Direction::Tx, "10.0.0.1", "10.0.0.2", 1),
            frame(Direction::Rx, "10.0.0.1", "10.0.0.2", 2),
            frame(Direction::Rx, "10.0.0.1", "10.0.0.3", 3),
            frame(Direction::Tx, "10.0.0.1", "10.0.0.3", 4),
        ];
        for f in &frames {
            encode_record(&mut batch, f);
        }
        let others: Vec<IpAddr> = vec!["10.0.0.2".parse().unwrap()];
        let seqs = |b: Vec<u8>| -> Vec<u8> {
            decode_records(b.into())
                .map(|r| r.unwrap().data[0])
                .collect()
        };
        assert_eq!(seqs(own_records(&batch, &others, None)), [1, 3, 4]);
        assert_eq!(seqs(own_records(&batch, &others, Some(2))), [1, 3]);
        assert_eq!(seqs(own_records(&batch, &[], None)), [1, 2, 3, 4]);
        assert!(own_records(&batch, &others, Some(0)).is_empty());
    }
}
