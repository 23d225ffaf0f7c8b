//! The shared-memory data path between a daemon client socket and the daemon. One document of
//! the protocol's pieces and states; the files hold one job each: [`layout`] the segment and
//! its records, [`bell`] the doorbells and readiness signals, `host` the daemon's side,
//! `client` the client's.
//!
//! # Pieces
//! - **The segment**: one sealed memfd ([`crate::sys::memfd_sealed`]) of [`SEG_LEN`] bytes: a
//!   header page and two single-producer, single-consumer byte rings, client to daemon
//!   (requests) and daemon to client (results). The header page holds, each in its own 64-byte
//!   line, the ring positions (`u64` byte counts that only grow; the offset in a ring is the
//!   position modulo [`RING_CAP`]) and the flags and counters below. A record is a
//!   [`REC_HDR`]-byte header ([`Rec`]) and its payload, written across the ring's end when it
//!   wraps.
//! - **The doorbell**: one Unix stream socket pair; the daemon keeps one end, the client gets
//!   the other. Each side rings the other by writing a byte at its own end and clears its own
//!   doorbell by reading its own end.
//! - **Two readiness signals** (receive and send), each a socket pair of the daemon's ([`bell::
//!   Signal`]): set while bytes wait at the end the client polls. The client gets that end of
//!   both, and the setting end of the receive signal (it clears and sets that one itself,
//!   below).
//!
//! The daemon creates all of them and passes them over the control connection that owns the
//! socket ([`crate::ctl::Request::SockRing`]): segment, doorbell, receive signal (polled end),
//! receive signal (setting end), send signal (polled end).
//!
//! # States
//! - **Daemon idle / busy** (the idle word): the daemon sets it before it sleeps and checks the
//!   request ring once more; a client that published a request rings the doorbell only when
//!   the word was set (and clears it). **Client waiting** (the wait word) is the same for the
//!   result direction.
//! - **One waited-for request at a time**: the client sends a request and waits for its
//!   result (matched by sequence number). A receive marked [`F_BATCH`] may bring several
//!   messages: each result but the last carries [`F_MORE`].
//! - **Posted sends**: a send marked [`F_POSTED`] gets no result. The client posts one only to
//!   a destination its last waited-for send reached, and only within the send-buffer room the
//!   last result reported ([`Rec::room`], less what it posted since), so the daemon's
//!   non-blocking send accepts it; it queues one that met congestion anyway (congestion is
//!   advisory; at most [`POST_WINDOW`] bytes of them until a waited-for send to that
//!   destination succeeds, `ENOBUFS` beyond) and raises the stop word, after which the client
//!   waits for its sends again. Any other failure of a posted send is kept in the error word
//!   and returned by the client's next send.
//! - **Watched directions** (the want word, [`WANT_RX`], [`WANT_TX`]): from the client's first
//!   poll of a direction on, the daemon keeps that signal set exactly while the socket is
//!   ready in that direction.
//! - **Pushed messages**: while the client watches its receive side, the daemon pushes
//!   messages into the result ring as they reach the socket ([`F_PUSHED`], sequence 0). The
//!   daemon counts the messages it handed (the handed word), the client the ones it took (the
//!   taken word); the receive signal stays set while they differ. A client that took the last
//!   one, when the daemon last saw its socket empty (the socket word), clears the receive
//!   signal itself, then sets it again if something was handed or queued meanwhile.
//! - **Closing**: when the owning connection closes, the posted sends still in the request ring
//!   are the application's sent messages: the daemon runs them, a bounded number per turn of
//!   its event loop, then forgets the ring.
//!
//! # Trust
//! The daemon treats every byte of the segment and everything the client does to its
//! descriptors as hostile:
//! - It keeps its own copy of the positions it writes, checks every position and length it
//!   reads before use, and copies a record out of the ring before looking at it; anything
//!   inconsistent is a [`Fault`], which ends that client's connection and nothing else.
//! - No call of the daemon on a descriptor the client holds can block, whatever the client
//!   does to it (clears `O_NONBLOCK` on the shared description, fills it, closes or shuts down
//!   its end): every read and write is non-blocking by its own flags ([`bell`]). A doorbell
//!   whose client end is closed ends the connection.
//! - Work per turn is bounded: at most a turn's worth of records, then other connections get
//!   theirs.

pub mod bell;
pub(crate) mod client;
pub(crate) mod host;
mod layout;

pub use layout::*;
