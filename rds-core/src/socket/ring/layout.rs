//! The segment's layout and records: the header page's words, the two byte rings, and
//! [`RingEnd`], one process's end of them. Everything read from the segment is checked here
//! before use (see the trust rule in [`super`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use crate::sys::Shm;
use crate::wire::MAX_MSG_SIZE;

/// Data bytes of each ring: a largest request and its header, plus [`POST_WINDOW`] for
/// posted sends ahead of it (a client has one waited-for request in flight).
pub const RING_CAP: usize = MAX_MSG_SIZE + REC_HDR + POST_WINDOW;
/// Bytes of posted sends (headers included) the client may have in the ring on top of the
/// room it keeps for one waited-for request.
pub const POST_WINDOW: usize = 128 << 10;
/// The header page.
const HDR: usize = 4096;
/// Bytes of the whole segment.
pub const SEG_LEN: usize = HDR + 2 * RING_CAP;
/// Bytes of a record header.
pub const REC_HDR: usize = 64;
/// The first word of the segment.
const MAGIC: u64 = u64::from_be_bytes(*b"RDSRING2");

const OFF_MAGIC: usize = 0;
const OFF_C2D_HEAD: usize = 64;
const OFF_C2D_TAIL: usize = 128;
const OFF_D2C_HEAD: usize = 192;
const OFF_D2C_TAIL: usize = 256;
const OFF_DAEMON_IDLE: usize = 320;
const OFF_CLIENT_WAIT: usize = 384;
const OFF_WANT: usize = 448;
/// Byte offsets for clients that read and write the segment through its file (tests, hostile
/// clients, the ring fuzz target): the request ring's data starts after the header page, the
/// result ring's after the request ring.
pub const REQ_DATA: usize = HDR;
/// See [`REQ_DATA`].
pub const RES_DATA: usize = HDR + RING_CAP;
/// The request ring's producer position (`u64`, little-endian).
pub const REQ_HEAD_WORD: usize = OFF_C2D_HEAD;
/// The result ring's producer position.
pub const RES_HEAD_WORD: usize = OFF_D2C_HEAD;
/// The result ring's consumer position.
pub const RES_TAIL_WORD: usize = OFF_D2C_TAIL;
/// Byte offset of the word of watched directions (`WANT_*`, little-endian), for clients that
/// write the segment through its file (tests, hostile clients).
pub const WANT_WORD: usize = OFF_WANT;
const OFF_POST_ERR: usize = 512;
const OFF_POST_STOP: usize = 576;
const OFF_HANDED: usize = 640;
const OFF_TAKEN: usize = 704;
const OFF_SOCK_RX: usize = 768;
const OFF_CONG: usize = 832;

/// Descriptors the daemon passes with a ring, in the order of [`super`]'s pieces: segment,
/// the daemon's doorbell, the client's doorbell, receive signal, send signal, congestion bell.
pub const RING_FDS: usize = 6;

/// The client wants its receive-readiness descriptor signalled when the socket is readable.
pub const WANT_RX: u64 = 1;
/// The client wants its send-readiness descriptor signalled when the socket is writable.
pub const WANT_TX: u64 = 2;

/// Record kinds.
pub const OP_SEND: u32 = 1;
/// A receive request.
pub const OP_RECV: u32 = 2;
/// The result of a request (daemon to client).
pub const OP_RESULT: u32 = 3;
/// A request that only brings a result (the daemon has taken everything posted before it).
pub const OP_SYNC: u32 = 4;
/// After a send that met congestion: arm the congestion bell if the destination (`addr`; none:
/// the connected one) is still congested. The result's `c` is 1 when armed, with `d` the
/// congestion word then, 0 when the destination is not congested.
pub const OP_CONG: u32 = 5;

/// Result flags.
pub const F_TRUNCATED: u32 = 1;
/// The result is a congestion update (`c` is the mask).
pub const F_CONG: u32 = 2;
/// The socket is readable after the request.
pub const F_READABLE: u32 = 4;
/// The socket is writable after the request.
pub const F_WRITABLE: u32 = 8;
/// `d` holds a receive timestamp.
pub const F_TS: u32 = 16;
/// Request flag: non-blocking receive peeks.
pub const F_PEEK: u32 = 32;
/// Request flag: a send that gets no result.
pub const F_POSTED: u32 = 64;
/// Request flag: a receive that may bring several messages.
pub const F_BATCH: u32 = 128;
/// Result flag: another result of the same request follows.
pub const F_MORE: u32 = 256;
/// Result flag: a message the daemon pushed without a request (`seq` 0).
pub const F_PUSHED: u32 = 512;

/// Something in the segment that a well-behaved peer never writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault(pub &'static str);

/// A record header, decoded. The meaning of `a`, `c`, `d` depends on `op`: a send has the
/// destination in `addr`; a receive has its buffer size in `c`; a result has the errno in `a`
/// (0: success), the length sent or the message's full length in `c` (the mask of a
/// congestion update), the timestamp in `d`, the sender in `addr`, the socket's send-buffer
/// room in `room`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rec {
    /// Payload bytes after the header.
    pub len: u32,
    /// [`OP_SEND`], [`OP_RECV`] or [`OP_RESULT`].
    pub op: u32,
    /// The request's sequence number (a result repeats its request's).
    pub seq: u64,
    /// See the type's documentation.
    pub a: u32,
    /// Flags (`F_*`).
    pub flags: u32,
    /// See the type's documentation.
    pub c: u64,
    /// See the type's documentation.
    pub d: u64,
    /// An address (destination or sender).
    pub addr: Option<SocketAddr>,
    /// A result: bytes the socket's send buffer could still take (saturated).
    pub room: u32,
}

impl Rec {
    /// The record header's bytes (what a client writes into the segment).
    pub fn encode(&self) -> [u8; REC_HDR] {
        let mut b = [0u8; REC_HDR];
        b[0..4].copy_from_slice(&self.len.to_le_bytes());
        b[4..8].copy_from_slice(&self.op.to_le_bytes());
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..20].copy_from_slice(&self.a.to_le_bytes());
        b[20..24].copy_from_slice(&self.flags.to_le_bytes());
        b[24..32].copy_from_slice(&self.c.to_le_bytes());
        b[32..40].copy_from_slice(&self.d.to_le_bytes());
        b[60..64].copy_from_slice(&self.room.to_le_bytes());
        match self.addr {
            None => {}
            Some(SocketAddr::V4(a)) => {
                b[40] = 4;
                b[42..44].copy_from_slice(&a.port().to_le_bytes());
                b[44..48].copy_from_slice(&a.ip().octets());
            }
            Some(SocketAddr::V6(a)) => {
                b[40] = 6;
                b[42..44].copy_from_slice(&a.port().to_le_bytes());
                b[44..60].copy_from_slice(&a.ip().octets());
            }
        }
        b
    }

    fn decode(b: &[u8; REC_HDR]) -> Result<Rec, Fault> {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        let port = u16::from_le_bytes([b[42], b[43]]);
        let addr = match b[40] {
            0 => None,
            4 => Some(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::new(b[44], b[45], b[46], b[47])),
                port,
            )),
            6 => {
                let mut o = [0u8; 16];
                o.copy_from_slice(&b[44..60]);
                Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(o)), port))
            }
            _ => return Err(Fault("bad address family in a ring record")),
        };
        let r = Rec {
            len: u32_at(0),
            op: u32_at(4),
            seq: u64_at(8),
            a: u32_at(16),
            flags: u32_at(20),
            c: u64_at(24),
            d: u64_at(32),
            addr,
            room: u32_at(60),
        };
        if r.len as usize > MAX_MSG_SIZE {
            return Err(Fault("ring record longer than a message"));
        }
        if !matches!(r.op, OP_SEND | OP_RECV | OP_RESULT | OP_SYNC | OP_CONG) {
            return Err(Fault("unknown ring record kind"));
        }
        Ok(r)
    }
}

/// Which end of the segment this process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The daemon: consumes requests, produces results.
    Daemon,
    /// The client: produces requests, consumes results.
    Client,
}

/// One end of a segment. Positions this end writes are kept here and only stored into the
/// segment, never read back from it.
#[derive(Debug)]
pub struct RingEnd {
    shm: Arc<Shm>,
    side: Side,
    /// Next position this end produces at.
    head: u64,
    /// Next position this end consumes at.
    tail: u64,
}

/// Byte offsets of one direction: data start, head word, tail word.
#[derive(Clone, Copy)]
struct Dir {
    base: usize,
    head: usize,
    tail: usize,
}

const C2D: Dir = Dir {
    base: HDR,
    head: OFF_C2D_HEAD,
    tail: OFF_C2D_TAIL,
};
const D2C: Dir = Dir {
    base: HDR + RING_CAP,
    head: OFF_D2C_HEAD,
    tail: OFF_D2C_TAIL,
};

impl RingEnd {
    /// The daemon's end of a fresh segment (`shm` is [`SEG_LEN`] zero bytes).
    pub fn daemon(shm: Shm) -> Option<RingEnd> {
        if shm.len() != SEG_LEN {
            return None;
        }
        shm.word(OFF_DAEMON_IDLE)?.store(1, Ordering::Release);
        shm.word(OFF_MAGIC)?.store(MAGIC, Ordering::Release);
        Some(RingEnd {
            shm: Arc::new(shm),
            side: Side::Daemon,
            head: 0,
            tail: 0,
        })
    }

    /// The client's end of a segment the daemon set up.
    pub fn client(shm: Shm) -> Option<RingEnd> {
        if shm.len() != SEG_LEN || shm.word(OFF_MAGIC)?.load(Ordering::Acquire) != MAGIC {
            return None;
        }
        let d2c_head = shm.word(OFF_D2C_HEAD)?.load(Ordering::Acquire);
        let c2d_head = shm.word(OFF_C2D_HEAD)?.load(Ordering::Acquire);
        Some(RingEnd {
            shm: Arc::new(shm),
            side: Side::Client,
            head: c2d_head,
            tail: d2c_head,
        })
    }

    fn word(&self, off: usize) -> &std::sync::atomic::AtomicU64 {
        // Every offset used is a constant inside the header page, and the segment is
        // SEG_LEN bytes (checked at construction).
        self.shm.word(off).expect("header word inside the segment")
    }

    fn out_dir(&self) -> Dir {
        match self.side {
            Side::Client => C2D,
            Side::Daemon => D2C,
        }
    }

    fn in_dir(&self) -> Dir {
        match self.side {
            Side::Client => D2C,
            Side::Daemon => C2D,
        }
    }

    fn copy_in(&self, dir: Dir, pos: u64, data: &[u8]) {
        let off = (pos % RING_CAP as u64) as usize;
        let first = data.len().min(RING_CAP - off);
        self.shm.write(dir.base + off, &data[..first]);
        self.shm.write(dir.base, &data[first..]);
    }

    fn copy_out(&self, dir: Dir, pos: u64, out: &mut [u8]) {
        let off = (pos % RING_CAP as u64) as usize;
        let first = out.len().min(RING_CAP - off);
        let (a, b) = out.split_at_mut(first);
        self.shm.read(dir.base + off, a);
        self.shm.read(dir.base, b);
    }

    /// Bytes free in the outgoing ring. A consumer position that is ahead of ours or more
    /// than a ring behind is a fault.
    pub fn room(&self) -> Result<usize, Fault> {
        let dir = self.out_dir();
        let tail = self.word(dir.tail).load(Ordering::Acquire);
        let used = self.head.wrapping_sub(tail);
        if used > RING_CAP as u64 {
            return Err(Fault("ring consumer position out of range"));
        }
        Ok(RING_CAP - used as usize)
    }

    /// Appends a record and its payload to the outgoing ring (`rec.len` is set here).
    pub fn push(&mut self, mut rec: Rec, payload: &[u8]) -> Result<(), Fault> {
        let need = REC_HDR + payload.len();
        if payload.len() > MAX_MSG_SIZE || self.room()? < need {
            return Err(Fault("no room in the ring"));
        }
        rec.len = payload.len() as u32;
        let dir = self.out_dir();
        self.copy_in(dir, self.head, &rec.encode());
        self.copy_in(dir, self.head + REC_HDR as u64, payload);
        self.head += need as u64;
        self.word(dir.head).store(self.head, Ordering::Release);
        Ok(())
    }

    /// Takes the next record of the incoming ring, its payload copied out; `None` when the
    /// ring is empty.
    pub fn pop(&mut self) -> Result<Option<(Rec, Vec<u8>)>, Fault> {
        let dir = self.in_dir();
        let head = self.word(dir.head).load(Ordering::Acquire);
        let avail = head.wrapping_sub(self.tail);
        if avail == 0 {
            return Ok(None);
        }
        if avail > RING_CAP as u64 || avail < REC_HDR as u64 {
            return Err(Fault("ring producer position out of range"));
        }
        let mut hb = [0u8; REC_HDR];
        self.copy_out(dir, self.tail, &mut hb);
        let rec = Rec::decode(&hb)?;
        let total = REC_HDR as u64 + u64::from(rec.len);
        if total > avail {
            return Err(Fault("ring record longer than the bytes published"));
        }
        let mut payload = crate::buf::take(rec.len as usize);
        payload.resize(rec.len as usize, 0);
        self.copy_out(dir, self.tail + REC_HDR as u64, &mut payload);
        self.tail += total;
        self.word(dir.tail).store(self.tail, Ordering::Release);
        Ok(Some((rec, payload)))
    }

    /// Whether the incoming ring holds something (or a bad position, which `pop` reports).
    pub fn incoming(&self) -> bool {
        self.word(self.in_dir().head).load(Ordering::Acquire) != self.tail
    }

    /// Producer: after a push, whether the other side sleeps and must be woken by its
    /// doorbell (clears its sleeping flag).
    pub fn must_ring(&self) -> bool {
        fence(Ordering::SeqCst);
        let off = match self.side {
            Side::Client => OFF_DAEMON_IDLE,
            Side::Daemon => OFF_CLIENT_WAIT,
        };
        self.word(off).swap(0, Ordering::AcqRel) != 0
    }

    /// Consumer: about to sleep on its doorbell. Sets this side's sleeping flag and returns
    /// whether it may sleep (false: something came meanwhile; the flag is cleared again).
    pub fn may_sleep(&self) -> bool {
        let off = match self.side {
            Side::Client => OFF_CLIENT_WAIT,
            Side::Daemon => OFF_DAEMON_IDLE,
        };
        self.word(off).store(1, Ordering::Release);
        fence(Ordering::SeqCst);
        let busy = self.incoming();
        if busy {
            self.word(off).store(0, Ordering::Release);
        }
        !busy
    }

    /// Client: no longer sleeping.
    pub fn awake(&self) {
        let off = match self.side {
            Side::Client => OFF_CLIENT_WAIT,
            Side::Daemon => OFF_DAEMON_IDLE,
        };
        self.word(off).store(0, Ordering::Release);
    }

    /// Client: from now on, keep the readiness descriptors of `bits` (`WANT_*`) up to date.
    /// Returns whether they were new (the client then rings the daemon's doorbell).
    pub fn want(&self, bits: u64) -> bool {
        self.word(OFF_WANT).fetch_or(bits, Ordering::AcqRel) & bits != bits
    }

    /// Daemon: the readiness directions the client watches (unknown bits dropped).
    pub fn take_want(&self) -> u64 {
        self.word(OFF_WANT).load(Ordering::Acquire) & (WANT_RX | WANT_TX)
    }

    /// Daemon: a posted send failed with `errno`; the client's next send returns it (the
    /// first one is kept until then).
    pub fn post_failed(&self, errno: u32) {
        let _ = self.word(OFF_POST_ERR).compare_exchange(
            0,
            u64::from(errno),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// Client: the errno of a posted send that failed since the last call, if any.
    pub fn take_post_error(&self) -> Option<i32> {
        match self.word(OFF_POST_ERR).swap(0, Ordering::AcqRel) {
            0 => None,
            e => Some(i32::try_from(e).unwrap_or(libc::EIO)),
        }
    }

    /// Daemon: the client should wait for its sends again (a posted one met congestion).
    pub fn stop_posting(&self) {
        self.word(OFF_POST_STOP).store(1, Ordering::Release);
    }

    /// Client: whether the daemon asked it to stop posting (clears the request).
    pub fn take_post_stop(&self) -> bool {
        self.word(OFF_POST_STOP).swap(0, Ordering::AcqRel) != 0
    }

    /// Daemon: `n` more messages handed to the client (results of a batched receive, or
    /// pushed).
    pub fn handed(&self, n: u64) {
        self.word(OFF_HANDED).fetch_add(n, Ordering::AcqRel);
    }

    /// Client: one handed message taken from its own queue.
    pub fn taken(&self) {
        self.word(OFF_TAKEN).fetch_add(1, Ordering::AcqRel);
    }

    /// Whether the client holds handed messages it has not taken yet (the daemon's view; the
    /// client's, before it clears its receive descriptor).
    pub fn client_holds(&self) -> bool {
        self.word(OFF_HANDED).load(Ordering::Acquire)
            != self.word(OFF_TAKEN).load(Ordering::Acquire)
    }

    /// Daemon: whether its socket has messages queued, as last seen (before the receive
    /// descriptor is set from it).
    pub fn set_sock_readable(&self, readable: bool) {
        self.word(OFF_SOCK_RX)
            .store(u64::from(readable), Ordering::SeqCst);
    }

    /// Client: whether the daemon last saw messages queued at its socket.
    pub fn sock_readable(&self) -> bool {
        self.word(OFF_SOCK_RX).load(Ordering::SeqCst) != 0
    }

    /// The mapping (tests scribble on it).
    pub fn shm(&self) -> &Shm {
        &self.shm
    }

    /// The congestion word's view of the segment, for a thread that does not hold this end.
    pub fn cong_word(&self) -> CongWord {
        CongWord(self.shm.clone())
    }
}

/// The congestion word of a segment: the daemon stores there how many times it rang the
/// client's congestion bell (a congestion map changed or a path went down after the client
/// armed it); a client waits while it still holds the value its arming reported.
#[derive(Debug, Clone)]
pub struct CongWord(Arc<Shm>);

impl CongWord {
    /// The value now.
    pub fn load(&self) -> u64 {
        self.word().load(Ordering::SeqCst)
    }

    /// Daemon: stores its own count (it never reads the word back: the client may scribble on
    /// it).
    pub fn store(&self, v: u64) {
        self.word().store(v, Ordering::SeqCst);
    }

    fn word(&self) -> &std::sync::atomic::AtomicU64 {
        self.0
            .word(OFF_CONG)
            .expect("header word inside the segment")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn pair() -> (RingEnd, RingEnd) {
        let fd = crate::sys::memfd_sealed("t", SEG_LEN).unwrap();
        let d = RingEnd::daemon(Shm::map(fd.as_raw_fd(), SEG_LEN).unwrap()).unwrap();
        let c = RingEnd::client(Shm::map(fd.as_raw_fd(), SEG_LEN).unwrap()).unwrap();
        (d, c)
    }

    #[test]
    fn records_round_trip_across_the_wrap() {
        let (mut d, mut c) = pair();
        let dest: SocketAddr = "[fe80::1]:7000".parse().unwrap();
        for i in 0..40u64 {
            let len = (i as usize * 77_777) % (MAX_MSG_SIZE + 1);
            let payload: Vec<u8> = (0..len).map(|b| (b as u64 + i) as u8).collect();
            let rec = Rec {
                op: OP_SEND,
                seq: i,
                addr: Some(dest),
                c: i * 3,
                ..Rec::default()
            };
            c.push(rec, &payload).unwrap();
            assert!(c.must_ring(), "the daemon starts idle");
            let (got, data) = d.pop().unwrap().unwrap();
            assert_eq!(got.seq, i);
            assert_eq!(got.addr, Some(dest));
            assert_eq!(got.c, i * 3);
            assert_eq!(data, payload);
            assert!(d.may_sleep());
        }
    }

    #[test]
    fn posted_send_words_and_held_messages() {
        let (d, c) = pair();
        assert_eq!(c.take_post_error(), None);
        d.post_failed(libc::EHOSTUNREACH as u32);
        // The first failure is the one kept.
        d.post_failed(libc::ENOBUFS as u32);
        assert_eq!(c.take_post_error(), Some(libc::EHOSTUNREACH));
        assert_eq!(c.take_post_error(), None);
        assert!(!c.take_post_stop());
        d.stop_posting();
        assert!(c.take_post_stop());
        assert!(!c.take_post_stop());
        assert!(!d.client_holds());
        d.handed(2);
        assert!(d.client_holds());
        c.taken();
        assert!(d.client_holds());
        c.taken();
        assert!(!d.client_holds());
        // A result's room survives encoding.
        let r = Rec {
            op: OP_RESULT,
            room: 106_496,
            flags: F_MORE,
            ..Rec::default()
        };
        assert_eq!(Rec::decode(&r.encode()), Ok(r));
    }

    #[test]
    fn scribbled_positions_and_headers_are_faults() {
        let (mut d, c) = pair();
        c.shm()
            .word(OFF_C2D_HEAD)
            .unwrap()
            .store(u64::MAX, Ordering::Release);
        assert!(d.pop().is_err());
        c.shm()
            .word(OFF_C2D_HEAD)
            .unwrap()
            .store(64, Ordering::Release);
        c.shm().write(HDR, &[0xff; 64]);
        assert!(d.pop().is_err());
        c.shm()
            .word(OFF_D2C_TAIL)
            .unwrap()
            .store(12345, Ordering::Release);
        assert!(d.room().is_err());
        assert!(d.push(Rec::default(), b"x").is_err());
    }
}
