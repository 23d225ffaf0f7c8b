//! Unit tests of the TCP transport.

use super::*;

#[test]
fn connection_cap_follows_the_descriptor_limit() {
    assert_eq!(conn_cap_for(None), TCP_CONNS_MAX);
    assert_eq!(conn_cap_for(Some(1024)), 512);
    assert_eq!(conn_cap_for(Some(1 << 20)), TCP_CONNS_MAX);
    assert_eq!(conn_cap_for(Some(20)), TCP_CONNS_MIN);
    assert!(nofile_soft().is_some_and(|n| n > 0));
}

mod race {
    //! The race that lost data (issue 31), on real sockets: a real [`Tcp`] and a real
    //! [`Stack`] driven by hand, against a fake RDS peer (a plain [`TcpListener`]).

    use std::io::{ErrorKind, Read, Write};
    use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
    use std::os::fd::AsRawFd;
    use std::sync::Arc;
    use std::time::Duration;

    use super::super::{Tcp, TcpOut};
    use crate::message::Received;
    use crate::node::tap::Tap;
    use crate::node::transport::Transport;
    use crate::proto::driver::{self, Io};
    use crate::proto::{ConnId, DropReason, HeldEnd, LinkId, PathState, SockId, Stack};
    use crate::stats::TcpStats;
    use crate::sys::Epoll;
    use crate::time::Instant;
    use crate::tunables::Tunables;
    use crate::wire::HeaderRepr;

    /// The node's `TransportIo` for TCP alone: the engine's transport work on a [`Tcp`],
    /// through the transport contract.
    struct Drive<'a> {
        tcp: &'a mut Tcp,
        stack: &'a mut Stack,
        now: Instant,
    }

    impl Io for Drive<'_> {
        fn stack(&mut self) -> &mut Stack {
            self.stack
        }

        fn connect(&mut self, conn: ConnId, path: usize, epoch: u32) {
            Transport::connect(self.tcp, self.stack, conn, path, epoch, self.now);
        }

        fn disconnect(&mut self, conn: ConnId, path: usize, epoch: u32, reason: DropReason) {
            Transport::disconnect(self.tcp, conn, path, epoch, reason, self.now);
        }

        fn transmit(&mut self, conn: ConnId, path: usize) {
            Transport::transmit(self.tcp, self.stack, conn, path, self.now);
        }

        fn adopt(&mut self, link: LinkId, conn: ConnId, path: usize, epoch: u32) {
            Transport::adopt(self.tcp, self.stack, link, conn, path, epoch, self.now);
        }

        fn refuse(&mut self, link: LinkId, why: HeldEnd) {
            Transport::refuse(self.tcp, link, why);
        }
    }

    /// The test's node: engine time from a real clock, the transport's rounds as the I/O
    /// thread runs them (`Inner::io_round_with`: events, timers, apply, engine timers,
    /// engine work, writes).
    struct Bench {
        tcp: Tcp,
        stack: Stack,
        origin: std::time::Instant,
    }

    impl Bench {
        /// A node of the smaller of two loopback addresses ([`addrs`]) whose connections to
        /// the larger one go to a fake RDS peer (a plain listener, returned), with a socket
        /// bound to port 4000: `(bench, peer, socket, our address, the peer's address)`.
        fn with_fake_peer() -> (Bench, TcpListener, SockId, IpAddr, IpAddr) {
            let (laddr, faddr) = addrs();
            let peer = TcpListener::bind((faddr, 0)).expect("fake peer listens on loopback");
            let mut b = Bench {
                tcp: transport(),
                stack: Stack::new(Tunables::default(), 11),
                origin: std::time::Instant::now(),
            };
            b.tcp
                .set_route(faddr, Some(peer.local_addr().expect("listener address")));
            b.stack.add_local_addr(laddr, true, false);
            let sock = b.stack.socket();
            b.stack
                .bind(sock, SocketAddr::new(laddr, 4000))
                .expect("bind");
            (b, peer, sock, laddr, faddr)
        }

        /// Sends `payload` from `sock` to `dest` (the fake peer's address, port 5000), which
        /// makes the node connect path 0, and returns the connection.
        fn send_first(&mut self, sock: SockId, dest: SocketAddr, payload: bytes::Bytes) -> ConnId {
            let now = self.now();
            self.stack
                .send(now, sock, Some(dest), payload, true)
                .expect("send");
            self.pump();
            let laddr = self.stack.local_addrs().next().expect("the node's address");
            self.stack
                .find_conn(laddr, dest.ip(), crate::proto::TransportKind::Tcp)
                .expect("the send made the connection")
        }

        fn now(&self) -> Instant {
            Instant::from_nanos(self.origin.elapsed().as_nanos() as u64)
        }

        /// Runs the engine's events on the transport.
        fn pump(&mut self) {
            let now = self.now();
            let mut io = Drive {
                tcp: &mut self.tcp,
                stack: &mut self.stack,
                now,
            };
            driver::pump(&mut io);
        }

        /// Waits up to `wait` for socket events and collects the transport's reports (kept
        /// in `tcp.outs`).
        fn collect(&mut self, wait: Duration) {
            let mut evs = Vec::new();
            self.tcp
                .epoll
                .wait(&mut evs, Some(wait))
                .expect("epoll_wait");
            let now = self.now();
            for (token, bits) in evs {
                assert!(self.tcp.owns_token(token), "token {token:#x}");
                self.tcp.handle_event(token, bits, now);
            }
            Transport::timers(&mut self.tcp, now);
        }

        /// Applies reports, runs due engine timers and the engine's work, writes.
        fn settle(&mut self) {
            let now = self.now();
            self.tcp.limits(&self.stack, now);
            Transport::apply(&mut self.tcp, &mut self.stack, now);
            driver::handle_due(&mut self.stack, now);
            self.pump();
            for _ in 0..4 {
                let refill = Transport::flush(&mut self.tcp, now);
                if !self.tcp.has_reports() && refill.is_empty() {
                    break;
                }
                Transport::apply(&mut self.tcp, &mut self.stack, now);
                for (c, p) in refill {
                    Transport::transmit(&mut self.tcp, &mut self.stack, c, p, now);
                }
                self.pump();
            }
        }

        fn round(&mut self) {
            self.collect(Duration::from_millis(5));
            self.settle();
        }

        /// Collects (without applying) until `done` holds; panics saying `what` after 5 s.
        fn collect_until(&mut self, what: &str, mut done: impl FnMut(&Bench) -> bool) {
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while !done(self) {
                assert!(std::time::Instant::now() < deadline, "{what}");
                self.collect(Duration::from_millis(5));
            }
        }
    }

    /// A transport for the tests: its own epoll set, a disabled tap.
    fn transport() -> Tcp {
        let epoll = Arc::new(Epoll::new().expect("epoll"));
        let tap = Arc::new(Tap::default());
        Tcp::new(epoll, Arc::new(TcpStats::new()), tap, 7).expect("transport")
    }

    /// Loopback addresses of this test run (127.0.0.0/8), the second one larger.
    fn addrs() -> (IpAddr, IpAddr) {
        let pid = std::process::id();
        let (a, b) = ((pid >> 8) as u8, pid as u8);
        (
            IpAddr::V4(Ipv4Addr::new(127, 91, a, b.max(1) & 0xfe)),
            IpAddr::V4(Ipv4Addr::new(127, 91, a, (b.max(1) & 0xfe) + 1)),
        )
    }

    /// Issue 31's loss, closed by rule 3 of the engine's connection lifecycle
    /// (`proto/stack/links.rs`): our node, the smaller address, connects a path; the peer
    /// accepts, adopts the connection and writes a message on it at once, and our TCP
    /// acknowledges it. Before our node hears that its attempt completed (the `Connected`
    /// report is collected but not yet applied), the engine drops the connecting path (an
    /// operator's restart). The message must still reach our socket (exact bytes), the peer
    /// must see our FIN, not a reset, and the path must connect again once the attempt ended.
    ///
    /// Before the lifecycle moved into the engine, the transport closed a connecting socket
    /// unread (`close_now`) when the engine dropped the path: the kernel then resets the
    /// connection because its receive buffer holds unread bytes, so the peer's read fails with
    /// `ECONNRESET` instead of returning 0, and the message the peer's TCP saw acknowledged
    /// (RDS/TCP then counts it delivered and frees it) never reaches the socket: both
    /// assertions below fail on that behaviour.
    #[test]
    fn a_connecting_path_dropped_after_the_peer_wrote_loses_nothing() {
        let (mut b, peer, sock, laddr, faddr) = Bench::with_fake_peer();

        // A message to the peer makes our node connect path 0.
        let dest = SocketAddr::new(faddr, 5000);
        let conn = b.send_first(sock, dest, bytes::Bytes::from_static(b"ours"));
        assert_eq!(b.stack.path_state(conn, 0).0, PathState::Connecting);
        assert_eq!(b.tcp.len(), 1, "one attempt is open");

        // The peer adopts the attempt and writes a complete data frame for our socket.
        let (mut theirs, from) = peer.accept().expect("the attempt reaches the fake peer");
        assert_eq!(from.ip(), laddr);
        let payload = b"written by the peer right after its accept";
        let mut frame = HeaderRepr::data(1, 5000, 4000, payload.len() as u32)
            .to_bytes()
            .to_vec();
        frame.extend_from_slice(payload);
        theirs.write_all(&frame).expect("peer writes");

        // Our transport learns the attempt completed: the report is collected, not applied.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !b
            .tcp
            .outs
            .iter()
            .any(|o| matches!(o, TcpOut::Connected(..)))
        {
            assert!(std::time::Instant::now() < deadline, "no Connected report");
            b.collect(Duration::from_millis(10));
        }
        // Our TCP has the frame (acknowledged to the peer) before the engine drops the path.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while b
            .tcp
            .conns
            .iter()
            .flatten()
            .all(|c| crate::sys::inq(c.stream.as_raw_fd()).unwrap_or(0) < frame.len())
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the frame never arrived"
            );
            std::thread::sleep(Duration::from_millis(1));
        }

        // The engine drops the connecting path; its Disconnect reaches the transport first.
        let now = b.now();
        b.stack.restart_conn(now, conn, DropReason::Restart);
        b.pump();
        assert_ne!(b.stack.path_state(conn, 0).0, PathState::Up);

        // The fake peer reads until our end of stream, then closes its side.
        let peer_side = std::thread::spawn(move || {
            theirs
                .set_read_timeout(Some(Duration::from_secs(5)))
                .expect("timeout");
            let mut buf = [0u8; 256];
            let mut got = Vec::new();
            let end = loop {
                match theirs.read(&mut buf) {
                    Ok(0) => break Ok(()),
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => break Err(e.kind()),
                }
            };
            drop(theirs);
            (end, got)
        });

        // The transport's rounds: the stale report, the drain, the reconnect.
        b.settle();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let mut received = None;
        let mut again: Option<TcpStream> = None;
        peer.set_nonblocking(true).expect("nonblocking listener");
        while (received.is_none() || again.is_none()) && std::time::Instant::now() < deadline {
            b.round();
            if received.is_none() {
                if let Ok(Received::Data { msg, .. }) = b.stack.recv(sock, 1 << 16, false) {
                    received = Some(msg);
                }
            }
            if again.is_none() {
                if let Ok((s, from)) = peer.accept() {
                    assert_eq!(from.ip(), laddr);
                    again = Some(s);
                }
            }
        }
        let (end, ours) = peer_side.join().expect("peer thread");
        let msg = received.expect("the message the peer wrote arrived at our socket");
        assert_eq!(&msg.payload[..], &payload[..]);
        assert_eq!(msg.from, SocketAddr::new(faddr, 5000));
        assert_eq!(msg.seq, 1);
        assert_eq!(
            end,
            Ok(()),
            "the peer saw our FIN (read returned 0), not a reset"
        );
        assert!(
            ours.is_empty(),
            "nothing was written on the dropped attempt"
        );
        let again = again.expect("the path connected again after the attempt ended");
        assert_eq!(
            again.peer_addr().expect("peer address").port() % 8,
            0,
            "lane 0"
        );
        let (state, _) = b.stack.path_state(conn, 0);
        assert!(
            matches!(state, PathState::Connecting | PathState::Up),
            "{state:?}"
        );
    }

    /// A sending thread writes its frames itself while the lane is idle
    /// (`Inner::after_app_call`). A lane whose last write the peer's TCP has not acknowledged
    /// yet (a delayed ACK: the answers ride another lane, so no data carries it) is still
    /// idle; one with more unacknowledged (here the peer does not read and its window is
    /// full) is streaming, and the I/O thread batches it until it learns that the peer caught
    /// up. With the old rule (everything acknowledged) the first check fails: nearly every
    /// request of such a lane woke the I/O thread.
    #[test]
    fn a_lane_is_idle_with_little_unacknowledged_and_streaming_with_much() {
        let (mut b, peer, sock, _, faddr) = Bench::with_fake_peer();
        // A small receive buffer on the fake peer: its window fills with what it leaves unread.
        crate::sys::set_bufs(peer.as_raw_fd(), 0, 4096).expect("SO_RCVBUF");
        let dest = SocketAddr::new(faddr, 5000);
        let send = |b: &mut Bench, len: usize| {
            let now = b.now();
            b.stack
                .send(
                    now,
                    sock,
                    Some(dest),
                    bytes::Bytes::from(vec![7u8; len]),
                    true,
                )
                .map(|_| ())
        };
        let conn = b.send_first(sock, dest, bytes::Bytes::from(vec![7u8; 64]));
        let (mut theirs, _) = peer.accept().expect("the attempt reaches the fake peer");
        let idx = b.tcp.by_path[&(conn, 0)];
        let fd = b.tcp.conns[idx]
            .as_ref()
            .expect("attempt")
            .stream
            .as_raw_fd();
        let lane = |b: &Bench| {
            let c = b.tcp.conns[idx].as_ref().expect("the lane's connection");
            (c.written, c.out.is_empty(), c.written - c.written_before)
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while b.stack.path_state(conn, 0).0 != PathState::Up || lane(&b).0 == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the lane never came up"
            );
            b.round();
        }
        let (written, _, last) = lane(&b);
        assert_eq!(written, last, "one write so far");
        assert!(
            Transport::lane_idle(&mut b.tcp, conn, 0, false),
            "a lane whose only write ({written} bytes) may be unacknowledged is idle"
        );

        // The peer stops reading: its window fills, our TCP holds the rest unacknowledged.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let unacked = || crate::sys::outq(fd).expect("SIOCOUTQ") as u64;
        while unacked() < 64 << 10 || !lane(&b).1 || unacked() <= lane(&b).2 {
            assert!(
                std::time::Instant::now() < deadline,
                "the peer's window never filled (outq {})",
                crate::sys::outq(fd).unwrap_or(0)
            );
            if unacked() < 64 << 10 {
                send(&mut b, 8 << 10).expect("room in the socket's send buffer");
                b.pump();
            }
            b.round();
        }
        assert!(
            !Transport::lane_idle(&mut b.tcp, conn, 0, false),
            "{} bytes unacknowledged, the last write {}: streaming",
            unacked(),
            lane(&b).2
        );
        assert!(
            Transport::lane_idle(&mut b.tcp, conn, 0, true),
            "nothing waits to be written: open to a sender of a large message"
        );

        // The peer reads everything: the lane is idle again once our node learns it
        // acknowledged (the I/O thread's acknowledgement poll).
        let written = lane(&b).0;
        theirs
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut got = 0u64;
        let mut buf = vec![0u8; 64 << 10];
        while got < written {
            got += theirs.read(&mut buf).expect("the peer reads") as u64;
        }
        assert_eq!(got, written, "the peer read exactly what our lane wrote");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !Transport::lane_idle(&mut b.tcp, conn, 0, false) {
            assert!(std::time::Instant::now() < deadline, "never idle again");
            b.collect(Duration::from_millis(1));
        }
        let c = b.tcp.conns[idx].as_ref().expect("the lane's connection");
        assert_eq!(c.acked, written, "the poll learnt every byte acknowledged");
        assert!(
            b.tcp
                .outs
                .iter()
                .any(|o| matches!(o, TcpOut::Acked { acked, .. } if *acked == written)),
            "the acknowledgement is reported to the engine"
        );
    }

    /// A request/response lane: the peer's bytes read while only our last write is not known
    /// acknowledged are its answer, whose segment carried TCP's acknowledgement: the lane is
    /// idle for the next send without asking TCP (`SIOCOUTQ`), the engine is not told (it
    /// frees messages on TCP's count only) and the acknowledgement poll comes 1 ms after the
    /// answer. With more than the last write outstanding, a read asks TCP as before.
    #[test]
    fn an_answer_on_the_lane_makes_it_idle_without_asking_tcp() {
        let (mut b, peer, sock, _, faddr) = Bench::with_fake_peer();
        let dest = SocketAddr::new(faddr, 5000);
        let conn = b.send_first(sock, dest, bytes::Bytes::from(vec![1u8; 64]));
        let (mut theirs, _) = peer.accept().expect("the attempt reaches the fake peer");
        theirs
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let idx = b.tcp.by_path[&(conn, 0)];
        let lane = |b: &Bench| {
            let c = b.tcp.conns[idx].as_ref().expect("the lane's connection");
            (c.written, c.acked, c.answered)
        };
        // Up, the first message written, and TCP's count of it learnt (the poll's timer).
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while b.stack.path_state(conn, 0).0 != PathState::Up
            || lane(&b).0 == 0
            || lane(&b).1 < lane(&b).0
        {
            assert!(
                std::time::Instant::now() < deadline,
                "never up and acknowledged"
            );
            b.round();
        }
        let mut got = 0u64;
        let mut buf = vec![0u8; 64 << 10];
        let mut read_all = |theirs: &mut TcpStream, upto: u64| {
            while got < upto {
                got += theirs.read(&mut buf).expect("the peer reads") as u64;
            }
        };
        read_all(&mut theirs, lane(&b).0);
        let mut seq = 0u64;
        let mut answer = |theirs: &mut TcpStream| {
            seq += 1;
            let mut frame = HeaderRepr::data(seq, 5000, 4000, 8).to_bytes().to_vec();
            frame.extend_from_slice(b"answered");
            theirs.write_all(&frame).expect("peer writes");
        };
        let send = |b: &mut Bench| {
            let now = b.now();
            b.stack
                .send(
                    now,
                    sock,
                    Some(dest),
                    bytes::Bytes::from(vec![2u8; 64]),
                    true,
                )
                .expect("send");
            b.settle();
        };

        // A request, read by the peer, then its answer.
        send(&mut b);
        let (written, acked, _) = lane(&b);
        assert!(
            written > acked,
            "the request went out ({written} > {acked})"
        );
        read_all(&mut theirs, written);
        answer(&mut theirs);
        b.collect_until("the answer was not taken", |b| lane(b).2 == written);
        assert_eq!(lane(&b).1, acked, "TCP was not asked, the engine not told");
        assert!(
            !b.tcp.outs.iter().any(|o| matches!(o, TcpOut::Acked { .. })),
            "no acknowledgement reported"
        );
        let poll = b.tcp.conns[idx].as_ref().and_then(|c| c.ack_poll);
        assert_eq!(
            poll.map(|(_, every)| every),
            Some(super::super::ACK_POLL_ANSWERED),
            "the acknowledgement poll moved from 50 us after the write to 1 ms after the answer"
        );
        assert!(
            Transport::lane_idle(&mut b.tcp, conn, 0, false),
            "the answered lane is idle"
        );
        assert_eq!(lane(&b).1, acked, "lane_idle did not ask TCP either");
        b.settle();

        // Many requests and answers: most are taken as answers, but TCP is asked again
        // before more than `ANSWERED_MAX` bytes (and one more write) wait for its count, which
        // the engine frees on (however slow the rounds, the 1 ms rule asks in at most every
        // other one).
        let mut taken = 0;
        for round in 0..100 {
            send(&mut b);
            let (written, _, _) = lane(&b);
            read_all(&mut theirs, written);
            answer(&mut theirs);
            b.collect_until(&format!("round {round}: no answer"), |b| {
                lane(b).2 == written || lane(b).1 == written
            });
            let (written, acked, answered) = lane(&b);
            taken += usize::from(answered == written && acked < written);
            assert!(
                written - acked <= super::super::ANSWERED_MAX + 200,
                "round {round}: {} bytes wait for TCP's count",
                written - acked
            );
            b.settle();
        }
        assert!(
            taken >= 40,
            "only {taken} of 100 answers taken without asking TCP"
        );

        // Two requests outstanding: an answer is not taken for both, TCP is asked.
        send(&mut b);
        send(&mut b);
        let (written, _, answered) = lane(&b);
        read_all(&mut theirs, written);
        answer(&mut theirs);
        b.collect_until("TCP's count never asked", |b| lane(b).1 == written);
        assert_eq!(lane(&b).2, answered, "no answer taken past two writes");
    }

    /// Found by faultnet (seeds 95084, 95086, 95089: 3 to 106 messages lost). A drained
    /// connection's last frames are read in a round whose reports also hold a connection
    /// accepted from the same peer, ahead of them (the listener's event came first). Offering
    /// that connection first reads the peer's draining connections to their end and applies
    /// it at once: the end of the drain reached the engine before the frames read earlier,
    /// which the engine then dropped (their epoch no longer read) after our TCP acknowledged
    /// them. The frames must reach the socket (exact bytes), and only then the drain end.
    #[test]
    fn frames_of_a_drain_read_before_an_accept_reach_the_engine_first() {
        let (mut b, peer, sock, laddr, faddr) = Bench::with_fake_peer();
        b.tcp.listen(laddr).expect("our listener on port 16385");

        // Our message makes our node (the smaller address) connect path 0; the peer accepts.
        let conn = b.send_first(
            sock,
            SocketAddr::new(faddr, 5000),
            bytes::Bytes::from_static(b"ours"),
        );
        let (mut theirs, _) = peer.accept().expect("the attempt reaches the fake peer");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while b.stack.path_state(conn, 0).0 != PathState::Up {
            assert!(std::time::Instant::now() < deadline, "path 0 never came up");
            b.round();
        }
        let idx = b.tcp.by_path[&(conn, 0)];

        // We drop the path (an operator's restart): the connection is drained.
        let now = b.now();
        b.stack.restart_conn(now, conn, DropReason::Restart);
        b.pump();
        assert!(matches!(
            b.tcp.conns[idx].as_ref().map(|c| c.state),
            Some(super::super::State::Draining(_))
        ));

        // The peer writes a message on the old connection and closes it; it also opens a
        // connection to us (as the larger address does, to ask us to connect back).
        let payload = b"the old connection's last message";
        let mut frame = HeaderRepr::data(1, 5000, 4000, payload.len() as u32)
            .to_bytes()
            .to_vec();
        frame.extend_from_slice(payload);
        theirs.write_all(&frame).expect("peer writes");
        drop(theirs);
        let to_us = SocketAddr::new(laddr, crate::wire::RDS_TCP_PORT);
        let fd = crate::sys::tcp_socket(&to_us).expect("socket");
        crate::sys::bind(fd.as_raw_fd(), SocketAddr::new(faddr, 0)).expect("bind");
        let _ = crate::sys::connect(fd.as_raw_fd(), to_us);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while b.tcp.conns[idx]
            .as_ref()
            .is_some_and(|c| crate::sys::inq(c.stream.as_raw_fd()).unwrap_or(0) < frame.len())
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the frame never arrived"
            );
            std::thread::sleep(Duration::from_millis(1));
        }

        // One round's reports in the order of its events: the listener's, then the draining
        // connection's (a short read: its frame, not yet its end).
        let now = b.now();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !b
            .tcp
            .outs
            .iter()
            .any(|o| matches!(o, TcpOut::Accepted { .. }))
        {
            assert!(std::time::Instant::now() < deadline, "nothing to accept");
            b.tcp
                .handle_event(super::super::TOKEN_LISTENER, crate::sys::EPOLLIN, now);
        }
        b.tcp.handle_event(
            super::super::TOKEN_CONN | idx as u64,
            crate::sys::EPOLLIN,
            now,
        );
        let outs = &b.tcp.outs;
        assert!(
            matches!(outs.last(), Some(TcpOut::Frames { frames, .. }) if frames.len() == 1),
            "{outs:?}"
        );
        b.settle();
        let got = match b.stack.recv(sock, 1 << 16, false) {
            Ok(Received::Data { msg, .. }) => msg,
            other => panic!("the drained connection's message was lost: {other:?}"),
        };
        assert_eq!(&got.payload[..], &payload[..]);
        assert_eq!(got.seq, 1);
        // The drain ended (the connection was read to its end), and the path reconnects.
        assert!(
            b.tcp
                .conns
                .iter()
                .flatten()
                .all(|c| !matches!(c.state, super::super::State::Draining(_))),
            "the drained connection is closed"
        );
        assert!(!b.stack.conn_infos()[0].paths[0].draining);
    }

    /// Found by faultnet (seeds 95210, 95216, 95229, 95231: 4 to 52 messages lost). Our
    /// attempt completes, the peer adopts it, writes to it (our TCP acknowledges) and resets
    /// it, all before our node looks at the attempt: the event then carries an error, and the
    /// transport reported the attempt failed and closed it unread. What it holds must be read.
    #[test]
    fn an_attempt_written_to_and_reset_before_its_event_is_read() {
        let (mut b, peer, sock, _, faddr) = Bench::with_fake_peer();
        let conn = b.send_first(
            sock,
            SocketAddr::new(faddr, 5000),
            bytes::Bytes::from_static(b"ours"),
        );
        let idx = b.tcp.by_path[&(conn, 0)];

        // The peer accepts, writes a message and resets the connection.
        let (mut theirs, _) = peer.accept().expect("the attempt reaches the fake peer");
        let payload = b"written, then the connection was reset";
        let mut frame = HeaderRepr::data(1, 5000, 4000, payload.len() as u32)
            .to_bytes()
            .to_vec();
        frame.extend_from_slice(payload);
        theirs.write_all(&frame).expect("peer writes");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let fd = b.tcp.conns[idx]
            .as_ref()
            .expect("attempt")
            .stream
            .as_raw_fd();
        while crate::sys::inq(fd).unwrap_or(0) < frame.len() {
            assert!(
                std::time::Instant::now() < deadline,
                "the frame never arrived"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        crate::sys::set_linger0(theirs.as_raw_fd()).expect("linger");
        drop(theirs);
        while crate::sys::peer_addr(fd).is_ok() {
            assert!(
                std::time::Instant::now() < deadline,
                "the reset never arrived"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(b.stack.path_state(conn, 0).0, PathState::Connecting);

        // Our node looks at the attempt only now.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let mut got = None;
        while got.is_none() && std::time::Instant::now() < deadline {
            b.round();
            if let Ok(Received::Data { msg, .. }) = b.stack.recv(sock, 1 << 16, false) {
                got = Some(msg);
            }
        }
        let got = got.expect("the message in the reset attempt reached our socket");
        assert_eq!(&got.payload[..], &payload[..]);
        assert_eq!(got.seq, 1);
    }
}

/// The tokens of the transport's listeners and connections are its own; the node's wake
/// token and IB's are not.
#[test]
fn owns_its_listener_and_connection_tokens_only() {
    use crate::node::transport::Transport;
    let epoll = Arc::new(Epoll::new().expect("epoll"));
    let tcp = Tcp::new(
        epoll,
        Arc::new(TcpStats::new()),
        Arc::new(Tap::default()),
        1,
    )
    .expect("transport");
    assert!(tcp.owns_token(TOKEN_LISTENER) && tcp.owns_token(TOKEN_LISTENER | 3));
    assert!(tcp.owns_token(TOKEN_CONN) && tcp.owns_token(TOKEN_CONN | TOKEN_MASK));
    assert!(!tcp.owns_token(TOKEN_WAKE));
    assert!(!tcp.owns_token(crate::node::ib::TOKEN_IB_CM));
    assert!(!tcp.owns_token(4 << 32), "IB's completion channels");
    assert_eq!(tcp.kind(), crate::proto::TransportKind::Tcp);
}
