//! What the sockets reported ([`TcpOut`]), applied to the engine: the one place where the
//! transport tells the [`Stack`] about accepted and completed connections, frames, stream
//! errors, acknowledgements and ends, and carries out the engine's answers on its sockets.

use std::net::{SocketAddr, TcpStream};

use super::*;
use crate::node::transport::connecting;
use crate::proto::{Established, Incoming};

impl Tcp {
    /// Applies `outs` (emptied) to the engine in order. Returns how many frames were handed
    /// to it (the node's `frames_in`).
    pub(crate) fn apply_reports(
        &mut self,
        stack: &mut Stack,
        outs: &mut Vec<TcpOut>,
        now: Instant,
    ) -> u64 {
        let mut frames_in = 0;
        // Accepted connections are offered after the batch's other reports: the offer first
        // reads the peer's draining connections to their end and applies that at once, so
        // their frames read earlier in this round (later in `outs`) must reach the engine
        // before it, or the end of the drain would come first and the engine would drop those
        // frames (their epoch no longer read) after our TCP acknowledged them.
        let mut offers = Vec::new();
        for o in outs.drain(..) {
            match o {
                TcpOut::Accepted {
                    stream,
                    local,
                    peer,
                } => offers.push((stream, local, peer)),
                TcpOut::Connected(idx, serial) => {
                    let Some((c, p, epoch)) = self.ident(idx, serial) else {
                        continue;
                    };
                    match stack.link_connected(now, c, p, epoch) {
                        Established::Read { epoch } => {
                            self.established(idx, epoch);
                            self.mark(idx);
                        }
                        Established::Drain => self.retire(idx, now),
                        Established::Close => self.close_now(idx, false),
                    }
                }
                TcpOut::ConnectFailed(idx, serial) => {
                    if let Some((c, p, epoch)) = self.ident(idx, serial) {
                        self.close_now(idx, false);
                        stack.handle_connect_failed(now, c, p, epoch);
                    }
                }
                TcpOut::Frames {
                    conn,
                    path,
                    epoch,
                    mut frames,
                } => {
                    self.tap_rx(stack, conn, path, &frames);
                    frames_in += frames.len() as u64;
                    let _ = crate::proto::driver::deliver(
                        stack,
                        now,
                        conn,
                        path,
                        epoch,
                        frames.drain(..),
                        Ok(()),
                    );
                    self.spare(frames);
                }
                TcpOut::StreamError {
                    conn,
                    path,
                    epoch,
                    err,
                } => stack.handle_stream_error(now, conn, path, epoch, err),
                TcpOut::Reassembly {
                    conn,
                    path,
                    epoch,
                    held,
                } => {
                    // Refused: the engine reset the path, whose disconnect closes it.
                    let _ = stack.tcp_reassembly(now, conn, path, epoch, held);
                }
                TcpOut::ReassemblyRefused => stack.tcp_reassembly_refused(),
                TcpOut::Closed(idx, serial) => {
                    if let Some((c, p, epoch, connecting)) = self.closed(idx, serial) {
                        if connecting {
                            stack.handle_connect_failed(now, c, p, epoch);
                        } else {
                            stack.handle_disconnected(now, c, p, epoch);
                        }
                    }
                }
                TcpOut::Acked {
                    conn,
                    path,
                    epoch,
                    acked,
                } => stack.handle_tx_acked(now, conn, path, epoch, acked),
            }
        }
        for (stream, local, peer) in offers {
            let (laddr, faddr) = (local.ip(), peer.ip());
            // Old data of a half-closed predecessor goes first.
            let mut old = Vec::new();
            self.finish_drains_of(canonical(laddr), canonical(faddr), stack, now, &mut old);
            frames_in += self.apply_reports(stack, &mut old, now);
            self.offer(stack, stream, local, peer, now);
        }
        frames_in
    }

    /// Offers an accepted connection to the engine: read it on its lane, hold it unread
    /// (the engine answers later with [`crate::proto::Event::Adopt`] or
    /// [`crate::proto::Event::Refuse`]), or reset it.
    fn offer(
        &mut self,
        stack: &mut Stack,
        stream: TcpStream,
        local: SocketAddr,
        peer: SocketAddr,
        now: Instant,
    ) {
        let link = self.new_link();
        let kind = TransportKind::Tcp;
        match stack.link_accepted(now, link, local.ip(), peer.ip(), kind, peer.port()) {
            Incoming::Read { conn, path, epoch } => {
                let tun = stack.tunables().clone();
                let r = self.install(stream, local, peer, conn, path, epoch, &tun, now);
                if r.is_err() {
                    stack.handle_disconnected(now, conn, path, epoch);
                }
            }
            Incoming::Hold => self.hold(
                link,
                HeldConn {
                    stream,
                    local,
                    peer,
                },
            ),
            Incoming::Refuse(why) => self.reset_refused(stream, why),
        }
    }

    /// The engine's [`crate::proto::Event::Adopt`]: the held connection `link` is read on
    /// `(conn, path)` from now on; one gone meanwhile (node shutdown) or that cannot be set
    /// up is reported ended.
    pub(crate) fn adopt_held(
        &mut self,
        stack: &mut Stack,
        link: LinkId,
        conn: ConnId,
        path: usize,
        epoch: u32,
        now: Instant,
    ) {
        let Some(h) = self.take_held(link) else {
            stack.handle_disconnected(now, conn, path, epoch);
            return;
        };
        let tun = stack.tunables().clone();
        let r = self.install(h.stream, h.local, h.peer, conn, path, epoch, &tun, now);
        if r.is_err() {
            stack.handle_disconnected(now, conn, path, epoch);
        }
    }

    /// The engine's [`crate::proto::Event::Connect`]: opens the attempt, or reports it failed
    /// at once. A connect the path has moved on from is not opened: it would replace a
    /// connection (an accepted one that took the path over, say) after its peer's TCP had
    /// acknowledged data on it.
    pub(crate) fn connect_path(
        &mut self,
        stack: &mut Stack,
        conn: ConnId,
        path: usize,
        epoch: u32,
        now: Instant,
    ) {
        if !connecting(stack, conn, path, epoch) {
            // The engine dropped the attempt before it started: its drain (the engine waits
            // for the end of a dropped attempt) ends here, with no connection to read.
            stack.handle_disconnected(now, conn, path, epoch);
            return;
        }
        let (laddr, faddr, _) = stack.conn_addrs(conn);
        let tun = stack.tunables().clone();
        if self
            .open(conn, path, epoch, laddr, faddr, &tun, now)
            .is_err()
        {
            stack.handle_connect_failed(now, conn, path, epoch);
        }
    }
}
