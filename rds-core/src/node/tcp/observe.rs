//! What the transport shows: its sockets for `rds-info -T`, received frames for the tap.

use super::*;

impl Tcp {
    /// Snapshot for `rds-info -T`.
    pub(crate) fn infos(&self) -> Vec<TcpSockInfo> {
        self.conns
            .iter()
            .flatten()
            .map(|c| TcpSockInfo {
                local: c.local,
                peer: c.peer,
                hdr_rem: c.parser.hdr_rem() as u64,
                data_rem: c.parser.data_rem() as u64,
                last_sent_nxt: c.written as u32,
                last_expected_una: (c.written - c.out_bytes.min(c.written as usize) as u64) as u32,
                last_seen_una: c.last_seen_una,
                path: c.path,
                state: match c.state {
                    State::Connecting => "CONNECTING",
                    State::Up => "UP",
                    State::Draining(_) => "DRAINING",
                }
                .to_string(),
            })
            .collect()
    }

    /// Records received frames on the tap.
    pub(crate) fn tap_rx(&self, stack: &Stack, conn: ConnId, path: usize, frames: &[Frame]) {
        let tap = &self.tap;
        if !tap.enabled() {
            return;
        }
        let Some(&idx) = self.by_path.get(&(conn, path)) else {
            return;
        };
        let Some(c) = self.conns[idx].as_ref() else {
            return;
        };
        let (laddr, faddr, _) = stack.conn_addrs(conn);
        tap.record_tcp(
            Dir::Rx,
            laddr,
            faddr,
            path,
            c.local,
            c.peer,
            frames.iter().map(|f| (f.hdr.to_bytes(), &f.payload)),
        );
    }
}
