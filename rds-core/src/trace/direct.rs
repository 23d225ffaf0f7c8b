//! [`CaptureFile`]: the capture file, written past the page cache (`O_DIRECT`) by a thread of
//! its own.
//!
//! At full load a capture writes hundreds of MB/s. Through the page cache every byte costs a
//! copy by the CPU, which on a busy node is taken from the data path being traced (measured
//! with `cargo bench -p rds-trace --bench capture_overhead`: the page-cache copy was the largest
//! single cost of a capture). With `O_DIRECT` the device reads our buffers itself, and the
//! writes run on their own thread, so the capture keeps decoding while the device writes.
//!
//! Bytes are gathered in [`BLOCK`]-aligned buffers of [`BUF_SIZE`] bytes; full buffers go to
//! the writer thread (at most [`IN_FLIGHT`] queued, so a slow device slows the capture, whose
//! node then drops and counts frames, instead of growing memory). [`Write::flush`] hands over
//! the whole blocks gathered so far; the last partial block is written at
//! [`CaptureFile::finish`] with `O_DIRECT` switched off. A file system that refuses `O_DIRECT`
//! (at open or at the first write, `EINVAL`) gets ordinary buffered writes of the same
//! buffers.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;

use nix::fcntl::{fcntl, FcntlArg, OFlag};

/// Alignment of buffers, offsets and lengths of direct writes (the largest logical block
/// size of common devices).
pub const BLOCK: usize = 4096;
/// Bytes gathered before a buffer goes to the writer thread.
pub const BUF_SIZE: usize = 4 << 20;
/// Buffers queued for the writer thread beyond the one being written.
pub const IN_FLIGHT: usize = 2;

/// A byte buffer whose data starts at a [`BLOCK`]-aligned address (a `Vec` with room to
/// shift the start; no allocator tricks).
struct Aligned {
    raw: Vec<u8>,
    off: usize,
    len: usize,
}

impl Aligned {
    fn new() -> Self {
        let raw = vec![0u8; BUF_SIZE + BLOCK];
        let addr = raw.as_ptr() as usize;
        let off = (BLOCK - addr % BLOCK) % BLOCK;
        Aligned { raw, off, len: 0 }
    }

    fn data(&self) -> &[u8] {
        &self.raw[self.off..self.off + self.len]
    }

    fn room(&self) -> usize {
        BUF_SIZE - self.len
    }

    fn push(&mut self, b: &[u8]) {
        let at = self.off + self.len;
        self.raw[at..at + b.len()].copy_from_slice(b);
        self.len += b.len();
    }
}

/// Whether `fd` was opened with `O_DIRECT` and still has it.
fn is_direct(f: &File) -> bool {
    fcntl(f.as_raw_fd(), FcntlArg::F_GETFL)
        .map(|fl| OFlag::from_bits_truncate(fl).contains(OFlag::O_DIRECT))
        .unwrap_or(false)
}

/// Switches `O_DIRECT` off (buffered writes from here on).
fn set_buffered(f: &File) -> io::Result<()> {
    let fl = OFlag::from_bits_truncate(fcntl(f.as_raw_fd(), FcntlArg::F_GETFL)?);
    fcntl(f.as_raw_fd(), FcntlArg::F_SETFL(fl - OFlag::O_DIRECT))?;
    Ok(())
}

/// Writes all of `b`; a direct write refused with `EINVAL` (alignment the file system does not
/// accept) is retried buffered.
fn write_all(f: &mut File, b: &[u8]) -> io::Result<()> {
    match f.write_all(b) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) && is_direct(f) => {
            set_buffered(f)?;
            f.write_all(b)
        }
        r => r,
    }
}

/// The writer thread: writes each buffer and hands it back; ends when the sender is dropped,
/// returning the file, or at the first error.
fn writer(mut f: File, jobs: Receiver<Aligned>, free: SyncSender<Aligned>) -> io::Result<File> {
    for mut buf in jobs {
        write_all(&mut f, buf.data())?;
        buf.len = 0;
        let _ = free.try_send(buf);
    }
    Ok(f)
}

/// Creates (or truncates) `path` for writing, with `O_DIRECT` when its file system takes it.
///
/// # Errors
/// The file cannot be created.
pub fn open_capture_file(path: &Path) -> io::Result<File> {
    let mut o = OpenOptions::new();
    o.write(true).create(true).truncate(true);
    match o.clone().custom_flags(libc::O_DIRECT).open(path) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => o.open(path),
        r => r,
    }
}

/// The capture file (see the module documentation).
pub struct CaptureFile {
    cur: Aligned,
    jobs: Option<SyncSender<Aligned>>,
    free: Receiver<Aligned>,
    thread: Option<JoinHandle<io::Result<File>>>,
    /// The writer thread's id, for its scheduling policy.
    tid: crate::sys::ThreadTid,
    /// Buffers made so far (at most `IN_FLIGHT + 2`).
    made: usize,
    direct: bool,
}

impl std::fmt::Debug for CaptureFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptureFile")
            .field("gathered", &self.cur.len)
            .field("direct", &self.direct)
            .finish_non_exhaustive()
    }
}

impl CaptureFile {
    /// Creates (or truncates) `path`, with `O_DIRECT` when the file system takes it.
    ///
    /// # Errors
    /// The file cannot be created, or the writer thread cannot start.
    pub fn create(path: &Path) -> io::Result<Self> {
        Self::new(open_capture_file(path)?)
    }

    /// Writes to `f` (already open; with or without `O_DIRECT`).
    ///
    /// # Errors
    /// The writer thread cannot start.
    pub fn new(f: File) -> io::Result<Self> {
        let direct = is_direct(&f);
        let (jobs_tx, jobs_rx) = mpsc::sync_channel(IN_FLIGHT);
        let (free_tx, free_rx) = mpsc::sync_channel(IN_FLIGHT + 2);
        let (tid_tx, tid_rx) = mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("capture-writer".into())
            .spawn(move || {
                let _ = tid_tx.send(crate::sys::ThreadTid::current());
                writer(f, jobs_rx, free_tx)
            })?;
        let tid = tid_rx
            .recv()
            .map_err(|_| io::Error::other("the capture writer did not start"))?;
        Ok(CaptureFile {
            cur: Aligned::new(),
            jobs: Some(jobs_tx),
            free: free_rx,
            thread: Some(thread),
            tid,
            made: 1,
            direct,
        })
    }

    /// Whether writes go past the page cache.
    pub fn direct(&self) -> bool {
        self.direct
    }

    /// Moves the writer thread to the `SCHED_IDLE` policy (`idle`), or back to `SCHED_OTHER`
    /// at the nice value it started with (see [`crate::sys::set_thread_idle`]). A capture that
    /// must not slow the traffic it observes writes only on CPU time the traffic leaves: when
    /// the writer falls behind, the capture waits for it and its node drops (and counts)
    /// frames.
    ///
    /// # Errors
    /// The policy cannot be changed (leaving `SCHED_IDLE` needs privilege), or the writer
    /// thread stopped after an error.
    pub fn set_idle(&self, idle: bool) -> io::Result<()> {
        self.writer_tid()?.set_idle(idle)
    }

    /// Whether the writer thread runs under `SCHED_IDLE` ([`CaptureFile::set_idle`]).
    ///
    /// # Errors
    /// The writer thread stopped after an error.
    pub fn idle(&self) -> io::Result<bool> {
        self.writer_tid()?.is_idle()
    }

    /// The writer thread, while it runs: another thread may lift it out of `SCHED_IDLE` (the
    /// capture's stop, [`crate::sys::ThreadTid`]) while this file is not finished.
    ///
    /// # Errors
    /// The writer thread stopped after an error.
    pub fn writer_tid(&self) -> io::Result<crate::sys::ThreadTid> {
        match &self.thread {
            Some(t) if !t.is_finished() => Ok(self.tid),
            _ => Err(io::Error::other("the capture writer stopped")),
        }
    }

    /// The writer thread's error, once it stopped.
    fn writer_error(&mut self) -> io::Error {
        self.jobs = None;
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(Err(e))) => e,
            Some(Err(_)) => io::Error::other("the capture writer thread panicked"),
            _ => io::Error::other("the capture writer stopped"),
        }
    }

    /// Hands the first `n` gathered bytes (a multiple of [`BLOCK`]) to the writer thread.
    fn submit(&mut self, n: usize) -> io::Result<()> {
        if n == 0 {
            return Ok(());
        }
        let mut next = match self.free.try_recv() {
            Ok(b) => b,
            Err(_) if self.made < IN_FLIGHT + 2 => {
                self.made += 1;
                Aligned::new()
            }
            Err(_) => match self.free.recv() {
                Ok(b) => b,
                Err(_) => return Err(self.writer_error()),
            },
        };
        // The bytes after `n` (a partial block) start the next buffer.
        next.push(&self.cur.data()[n..]);
        let mut full = std::mem::replace(&mut self.cur, next);
        full.len = n;
        let sent = match &self.jobs {
            Some(j) => j.send(full).is_ok(),
            None => false,
        };
        if sent {
            Ok(())
        } else {
            Err(self.writer_error())
        }
    }

    /// Writes what is left and returns the file (`O_DIRECT` switched off).
    ///
    /// # Errors
    /// A write failed.
    pub fn finish(mut self) -> io::Result<File> {
        let whole = self.cur.len / BLOCK * BLOCK;
        self.submit(whole)?;
        self.jobs = None;
        let mut f = match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r?,
            _ => return Err(io::Error::other("the capture writer thread panicked")),
        };
        if is_direct(&f) {
            set_buffered(&f)?;
        }
        f.write_all(self.cur.data())?;
        self.cur.len = 0;
        Ok(f)
    }
}

impl Write for CaptureFile {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.write_all(b)?;
        Ok(b.len())
    }

    fn write_all(&mut self, mut b: &[u8]) -> io::Result<()> {
        while !b.is_empty() {
            let n = b.len().min(self.cur.room());
            self.cur.push(&b[..n]);
            b = &b[n..];
            if self.cur.room() == 0 {
                self.submit(BUF_SIZE)?;
            }
        }
        Ok(())
    }

    /// Hands the whole blocks gathered so far to the writer thread (the last partial block
    /// waits for more bytes or [`CaptureFile::finish`]).
    fn flush(&mut self) -> io::Result<()> {
        let whole = self.cur.len / BLOCK * BLOCK;
        self.submit(whole)
    }
}

impl Drop for CaptureFile {
    fn drop(&mut self) {
        // Unfinished (an error path): stop the thread; the partial tail is not written.
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    /// Writes `total` bytes in pieces of `piece`, flushing every `flush_every` pieces.
    fn roundtrip(total: usize, piece: usize, flush_every: usize) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.pcap");
        let data = pattern(total);
        let mut f = CaptureFile::create(&path).unwrap();
        for (i, c) in data.chunks(piece).enumerate() {
            f.write_all(c).unwrap();
            if flush_every > 0 && i % flush_every == 0 {
                f.flush().unwrap();
            }
        }
        let file = f.finish().unwrap();
        drop(file);
        assert_eq!(std::fs::read(&path).unwrap(), data);
    }

    #[test]
    fn bytes_arrive_in_order_whatever_the_pieces() {
        roundtrip(0, 1, 0);
        roundtrip(10, 3, 0);
        roundtrip(BLOCK, BLOCK, 0);
        roundtrip(BUF_SIZE * 3 + 17, 100_003, 0);
        roundtrip(BUF_SIZE * 2 + BLOCK + 1, 65_536 + 88, 5);
        roundtrip(BUF_SIZE + 5, BUF_SIZE + 5, 1);
    }

    #[test]
    fn a_file_without_direct_io_is_written_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plain");
        let f = File::create(&path).unwrap();
        let mut c = CaptureFile::new(f).unwrap();
        assert!(!c.direct());
        let data = pattern(BUF_SIZE + 12_345);
        c.write_all(&data).unwrap();
        c.flush().unwrap();
        drop(c.finish().unwrap());
        assert_eq!(std::fs::read(&path).unwrap(), data);
    }

    #[test]
    fn the_writer_moves_to_idle_and_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = CaptureFile::create(&dir.path().join("c.pcap")).unwrap();
        assert!(!c.idle().unwrap());
        c.set_idle(true).unwrap();
        assert!(c.idle().unwrap());
        let data = pattern(BUF_SIZE * 2 + 99);
        c.write_all(&data).unwrap();
        c.flush().unwrap();
        // Leaving SCHED_IDLE needs privilege (CI runs as root).
        if c.set_idle(false).is_ok() {
            assert!(!c.idle().unwrap());
        }
        drop(c.finish().unwrap());
        assert_eq!(std::fs::read(dir.path().join("c.pcap")).unwrap(), data);
    }

    #[test]
    fn a_write_error_is_returned() {
        // /dev/full: every write fails with ENOSPC.
        let f = OpenOptions::new().write(true).open("/dev/full").unwrap();
        let mut c = CaptureFile::new(f).unwrap();
        let data = pattern(BUF_SIZE * (IN_FLIGHT + 3));
        let err = c
            .write_all(&data)
            .and_then(|()| c.flush())
            .err()
            .or_else(|| c.finish().err())
            .expect("an error");
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    }
}
