//! Trace sessions on the control socket: the node's tap streams binary trace records to the
//! client as [`Reply::TraceFrames`], or writes the pcap file whose descriptor the client
//! passed ([`crate::ctl::TraceOutput`]). A session holds a worker for its duration and runs at
//! a lower priority than the traffic it observes.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use super::introspect::transports;
use super::send;
use crate::ctl::{read_frame, Failed, Reply, Request, TraceOutput, MAX_DATA};
use crate::node::tap::{self, TapBatch, TapChunk, TapFilter};
use crate::node::Node;
use crate::sys;
use crate::trace::{Capture, CaptureFile, CaptureLink, TcpCaptureConfig, TraceError};

/// Frames a trace session may hold before dropping (and counting) new ones. The queue's
/// bytes are bounded too ([`tap::MAX_QUEUED_BYTES`], 64 MiB); this many of the smallest
/// records (a bare header: 136 bytes) take about as much, so at any snap length the queue can
/// hold what the data path produces in the ~0.3 s a slow write to the file may take.
const TRACE_QUEUE: usize = 1 << 19;

/// How long the trace loop waits for a full chunk of trace records before it sends what
/// there is (the latency of a live capture at low traffic).
const TRACE_BATCH_WAIT: Duration = Duration::from_millis(20);

// Every batch the tap hands out fits the data part of one control frame.
const _: () = assert!(tap::CHUNK_SIZE <= MAX_DATA && tap::MAX_RECORD <= MAX_DATA);

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
    /// Into the capture file the client passed (see [`TraceOutput`]).
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
    out: &TraceOutput,
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
    let cf = CaptureFile::new(std::fs::File::from(file)).map_err(|e| Failed::io(&e))?;
    Capture::new(cf, link, out.count, TcpCaptureConfig::default())
        .map_err(|e| Failed(trace_errno(&e), format!("writing the capture: {e}")))
}

/// Runs a trace session until the client stops or leaves, or (writing a file) the count is
/// reached. Frames go to the client or into the file the client passed. Returns whether the
/// connection may continue.
pub(super) fn trace(
    stream: &mut UnixStream,
    node: &Node,
    snaplen: u32,
    filter: TapFilter,
    output: Option<(TraceOutput, Option<OwnedFd>)>,
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
        return send(stream, &Reply::error(libc::EBUSY, e.to_string()), &[]).is_ok();
    }
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
    // This thread (and the file's writer) runs under SCHED_IDLE while it captures: on CPUs
    // the traffic keeps busy it may not run for seconds, and would not see the client's stop.
    // A watcher at the normal policy, asleep until the client sends something (the stop) or
    // leaves, lifts them.
    let mut lift = vec![sys::ThreadTid::current()];
    if let TraceSink::File(c) = &sink {
        lift.extend(c.get_ref().and_then(|f| f.writer_tid().ok()));
    }
    let mut alive = true;
    let mut write_error: Option<TraceError> = None;
    std::thread::scope(|scope| {
        // Started first: it must not inherit SCHED_IDLE.
        let watcher = StopWatcher::start(scope, stream.as_raw_fd(), lift);
        // The session thread and the file's writer now only take CPU time the traffic leaves.
        let _ = sys::set_thread_idle(true);
        set_writer_idle(&sink, true);
        capture_until_stop(stream, node, &mut sink, &mut alive, &mut write_error);
        // The watcher ends before the writer thread can (the sink finishes below).
        if let Some(w) = watcher {
            w.end();
        }
    });
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
            Some(e) => Reply::error(trace_errno(&e), format!("writing the capture: {e}")),
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

/// The session's capture: frames go to the sink until the client stops the session or
/// leaves (then `alive` is false), the node stops, the file is full or a write fails.
fn capture_until_stop(
    stream: &mut UnixStream,
    node: &Node,
    sink: &mut TraceSink,
    alive: &mut bool,
    write_error: &mut Option<TraceError>,
) {
    let mut last_flush = std::time::Instant::now();
    loop {
        // A TraceStop (or the client leaving) ends the session.
        if sys::wait_readable(stream.as_raw_fd(), Duration::ZERO).unwrap_or(false) {
            match read_frame(stream) {
                Ok((json, _)) => {
                    if matches!(serde_json::from_slice(&json), Ok(Request::TraceStop)) {
                        return;
                    }
                }
                Err(_) => {
                    *alive = false;
                    return;
                }
            }
        }
        match sink {
            TraceSink::Stream => {
                let Some(batches) = node.tap().take_batches(TRACE_BATCH_WAIT) else {
                    return;
                };
                if send_batches(stream, node, batches).is_err() {
                    *alive = false;
                }
            }
            TraceSink::File(c) => {
                let Some(chunks) = node.tap().take_chunks(TRACE_BATCH_WAIT) else {
                    return;
                };
                write_chunks(c, node, chunks, write_error);
                if write_error.is_none() && last_flush.elapsed() >= FILE_FLUSH {
                    last_flush = std::time::Instant::now();
                    *write_error = c.flush().err();
                }
                if write_error.is_some() || c.full() {
                    return;
                }
            }
        }
        if !*alive || !node.is_running() {
            return;
        }
    }
}

/// A thread at the normal policy that sleeps until the session's control socket has
/// something to read (the client's stop, or its leaving), then moves the session's threads out
/// of `SCHED_IDLE` so that they run to act on it however busy the CPUs are.
struct StopWatcher<'scope> {
    wake: OwnedFd,
    thread: std::thread::ScopedJoinHandle<'scope, ()>,
}

impl<'scope> StopWatcher<'scope> {
    /// Starts the watcher of `control` for the threads `lift` (best effort: without a thread
    /// or an eventfd, none; the session then acts on the stop when its CPU time comes).
    fn start<'env>(
        scope: &'scope std::thread::Scope<'scope, 'env>,
        control: std::os::fd::RawFd,
        lift: Vec<sys::ThreadTid>,
    ) -> Option<Self> {
        let wake = sys::eventfd().ok()?;
        let wake_fd = wake.as_raw_fd();
        let thread = std::thread::Builder::new()
            .name("trace-stop".into())
            .spawn_scoped(scope, move || loop {
                match sys::poll_readable(&[control, wake_fd], Duration::MAX) {
                    Ok(r) if r[1] => return,
                    Ok(r) if r[0] => {
                        for t in &lift {
                            let _ = t.set_idle(false);
                        }
                        return;
                    }
                    Ok(_) => {}
                    Err(_) => return,
                }
            })
            .ok()?;
        Some(StopWatcher { wake, thread })
    }

    /// Ends the watcher and waits for it.
    fn end(self) {
        sys::eventfd_signal(self.wake.as_raw_fd());
        let _ = self.thread.join();
    }
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
