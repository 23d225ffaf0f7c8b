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
//! - **Two doorbells**: the daemon's, an eventfd the client writes to ring it and the daemon
//!   only watches (edge-triggered: each ring is one wake-up; the daemon never reads or writes
//!   it); the client's, a pipe ([`bell::Pipe`]) whose writing end the daemon keeps and whose
//!   reading end the client polls and clears.
//! - **Two readiness signals**, set while bytes wait at the end the client polls: receive, a
//!   pipe the daemon only sets (the client clears it, below), and send, a socket pair the
//!   daemon sets and clears ([`bell::Signal`]).
//! - **The congestion bell**: a pipe the daemon rings (its own writing end) and a word of the
//!   header page it counts the rings in ([`CongWord`]); see "Congested sends" below.
//!
//! The daemon creates all of them and passes them over the control connection that owns the
//! socket ([`crate::ctl::Request::SockRing`]): segment, the daemon's doorbell, the client's
//! doorbell (reading end), receive signal (reading end), send signal (polled end), congestion
//! bell (reading end) ([`RING_FDS`] in all).
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
//!   taken word). The daemon sets the receive signal whenever it finds the socket readable or
//!   the client holding handed messages, and never clears it: the client clears it when it
//!   took the last one, or a receive found nothing, while the daemon last saw its socket empty
//!   (the socket word); if something was handed or queued meanwhile, it rings the daemon's
//!   doorbell, whose turn ends with the signals brought up to date.
//! - **Congested sends**: a waited-for send that meets congestion returns `ENOBUFS`; a client
//!   that blocks then asks [`OP_CONG`] for its destination. The daemon arms the bell if the
//!   destination is still congested (checked under the node's engine lock, so no change is
//!   missed; see `socket::cong`) and answers the word's value then; the node's congestion
//!   watcher rings every armed bell once (and disarms it) when a congestion map changes, a
//!   path goes down or the node stops, storing its count in the word first. The client waits
//!   on the bell's pipe, and the control connection's hang-up, until the word differs from the
//!   answer, then sends again: no timer, one wake-up per change. Not congested any more: it
//!   sends again at once (twice in a row around a failed send: the `ENOBUFS` was the node's
//!   memory, and is returned).
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
//!   does to it (clears `O_NONBLOCK` on a shared description, fills it, closes or shuts down
//!   its end): the daemon never calls on its own doorbell, its pipe ends are its own
//!   descriptions, and on the one socket pair it shares every read and write is non-blocking
//!   by its own flags ([`bell`]).
//! - Work per turn is bounded: at most a turn's worth of records, then other connections get
//!   theirs.

pub mod bell;
pub(crate) mod client;
pub(crate) mod host;
mod layout;

pub use layout::*;
