//! `Socket::wait` on an embedded node (issue 19, item 2): the thread that waits for its
//! socket reads the transport itself, so a reply wakes that thread only; the I/O thread takes
//! over when nobody waits, several waiting threads are served, and a node shut down under a
//! waiting thread ends its wait (and makes the socket's descriptor readable); a readable
//! descriptor kept quiet while its owner receives itself shows what is left afterwards; a
//! sender blocked for room learns TCP's acknowledgements itself; a message another thread
//! delivers to a leader's socket wakes it.
//!
//! Addresses: 127.3.11.0/24.

use std::io::Write;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use rds_core::{CtlMode, Node, NodeConfig, RecvFlags, Socket};

const T: Duration = Duration::from_secs(10);
const ROUNDS: u32 = 2000;

fn node(ip: &str) -> Node {
    let mut cfg = NodeConfig::new([ip.parse().unwrap()]);
    cfg.ctl = CtlMode::Off;
    cfg.name = format!("lead-{ip}");
    Node::start(cfg).unwrap()
}

fn sock(n: &Node, addr: &str) -> Socket {
    let s = Socket::with_node(n);
    let addr: SocketAddr = addr.parse().unwrap();
    assert_eq!(s.bind(addr).unwrap(), addr);
    s.set_read_timeout(Some(T));
    s.set_write_timeout(Some(T));
    s
}

/// How a test thread waits for its socket.
#[derive(Clone, Copy)]
enum How {
    /// Its own poll of the socket's descriptor, as an application's poll loop does.
    Poll,
    /// `Socket::wait`.
    Wait,
    /// A blocking receive.
    Blocking,
}

/// Waits for a message on `s` as `how` says and takes it.
fn take(s: &Socket, how: How, buf: &mut [u8]) -> (usize, SocketAddr) {
    let deadline = Instant::now() + T;
    loop {
        let ready = match how {
            How::Wait => s.wait(true, false, Duration::from_millis(100)).unwrap().0,
            How::Poll => {
                rds_core::poll_readable(&[s.fd().unwrap()], Duration::from_millis(100)).unwrap()[0]
            }
            How::Blocking => return s.recv_from(buf).unwrap(),
        };
        if ready {
            let flags = RecvFlags {
                dontwait: true,
                ..RecvFlags::default()
            };
            match s.recv_msg(buf, flags) {
                Ok(m) => return (m.len, m.from.expect("a data message")),
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {}
                Err(e) => panic!("recv: {e}"),
            }
        }
        assert!(Instant::now() < deadline, "nothing came within {T:?}");
    }
}

/// `ROUNDS` requests from `a` to `b`, each answered before the next, both sides waiting as
/// `how` says; checks every request and answer.
fn ping_pong(a: &Socket, b: &Socket, how: How) {
    let (aa, ba) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let mut buf = [0u8; 64];
            for i in 0..ROUNDS {
                let (n, from) = take(b, how, &mut buf);
                assert_eq!((&buf[..n], from), (&i.to_be_bytes()[..], aa), "request {i}");
                b.send_to(&(!i).to_be_bytes(), aa).unwrap();
            }
        });
        let mut buf = [0u8; 64];
        for i in 0..ROUNDS {
            a.send_to(&i.to_be_bytes(), ba).unwrap();
            let (n, from) = take(a, how, &mut buf);
            assert_eq!(
                (&buf[..n], from),
                (&(!i).to_be_bytes()[..], ba),
                "answer {i}"
            );
        }
    });
}

#[test]
fn a_waiting_thread_reads_its_own_replies() {
    let (na, nb) = (node("127.3.11.1"), node("127.3.11.2"));
    let a = sock(&na, "127.3.11.1:4000");
    let b = sock(&nb, "127.3.11.2:4000");

    // An application's own poll on the descriptors: the I/O thread reads every frame.
    ping_pong(&a, &b, How::Poll);
    let (a0, b0) = (na.frames_read(), nb.frames_read());
    assert!(
        a0.0 >= u64::from(ROUNDS) && b0.0 >= u64::from(ROUNDS),
        "{a0:?} {b0:?}"
    );
    assert_eq!((a0.1, b0.1), (0, 0), "no thread waited in Socket::wait");

    // Waiting in Socket::wait: the waiting threads read (nearly) all of them. The I/O thread
    // only reads what comes while a thread stays away from its wait for over a millisecond.
    ping_pong(&a, &b, How::Wait);
    for (n, before) in [(&na, a0), (&nb, b0)] {
        let now = n.frames_read();
        let (all, led) = (now.0 - before.0, now.1 - before.1);
        assert_eq!(all, u64::from(ROUNDS), "each frame is read once: {now:?}");
        assert!(
            led > all / 2,
            "only {led} of {all} frames read by the waiting thread"
        );
    }
}

#[test]
fn the_io_thread_takes_over_when_the_waiting_thread_leaves() {
    let (na, nb) = (node("127.3.11.11"), node("127.3.11.12"));
    let a1 = sock(&na, "127.3.11.11:4000");
    let a2 = sock(&na, "127.3.11.11:4001");
    let b = sock(&nb, "127.3.11.12:4000");
    let mut buf = [0u8; 64];
    // a1's thread leads while it waits, takes its message and leaves.
    b.send_to(b"one", a1.local_addr().unwrap()).unwrap();
    let (n, _) = take(&a1, How::Wait, &mut buf);
    assert_eq!(&buf[..n], b"one");
    // a2's thread waits the classic way (a blocking receive): the I/O thread must read its
    // messages now that nobody waits in Socket::wait.
    for i in 0..50u32 {
        b.send_to(&i.to_be_bytes(), a2.local_addr().unwrap())
            .unwrap();
        let (n, _) = a2.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], i.to_be_bytes());
    }
}

#[test]
fn several_waiting_threads_of_one_node_each_get_their_messages() {
    let (na, nb) = (node("127.3.11.21"), node("127.3.11.22"));
    let socks: Vec<Socket> = (0..3)
        .map(|i| sock(&na, &format!("127.3.11.21:{}", 4000 + i)))
        .collect();
    let b = sock(&nb, "127.3.11.22:4000");
    std::thread::scope(|sc| {
        for s in &socks {
            sc.spawn(move || {
                let mut buf = [0u8; 64];
                for i in 0..500u32 {
                    let (n, _) = take(s, How::Wait, &mut buf);
                    assert_eq!(&buf[..n], i.to_be_bytes(), "{:?}", s.local_addr());
                }
            });
        }
        for i in 0..500u32 {
            for s in &socks {
                b.send_to(&i.to_be_bytes(), s.local_addr().unwrap())
                    .unwrap();
            }
        }
    });
    for s in &socks {
        assert!(!s.readable(), "nothing more for {:?}", s.local_addr());
    }
}

#[test]
fn a_node_shut_down_ends_the_wait() {
    let na = node("127.3.11.31");
    let a = sock(&na, "127.3.11.31:4000");
    std::thread::scope(|sc| {
        let t = sc.spawn(|| {
            let start = Instant::now();
            let r = a.wait(true, false, Duration::from_secs(30)).unwrap();
            (r, start.elapsed())
        });
        std::thread::sleep(Duration::from_millis(200));
        na.shutdown();
        let (r, took) = t.join().unwrap();
        assert!(
            took < Duration::from_secs(10),
            "the wait went on for {took:?}"
        );
        // Readable, as a socket with an error is: the receive says why.
        assert_eq!(r, (true, false));
        let e = a.recv_msg(&mut [0u8; 8], RecvFlags::default()).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENETDOWN));
        // A thread that polls the descriptor (not through Socket::wait) wakes too.
        let polled = rds_core::poll_readable(&[a.fd().unwrap()], T).unwrap();
        assert_eq!(polled, [true]);
    });
}

/// A leader sleeps in its epoll set, which does not hold its socket's eventfds: a message
/// that another thread delivers to its socket (a sender on the same node: the engine delivers
/// it in the sender's thread) wakes it through the node's leader eventfd, whenever it comes
/// (before the leader's last look at its socket, during its sleep), 300 times; a message
/// that arrives for another socket of the node does not end the wait.
#[test]
fn a_message_another_thread_delivers_wakes_the_leader() {
    let na = node("127.3.11.81");
    let a = sock(&na, "127.3.11.81:4000");
    let b = sock(&na, "127.3.11.81:4001");
    let c = sock(&na, "127.3.11.81:4002");
    let (aa, ca) = (a.local_addr().unwrap(), c.local_addr().unwrap());
    let mut buf = [0u8; 16];
    for round in 0..300u32 {
        std::thread::scope(|sc| {
            let t = sc.spawn(|| {
                let start = Instant::now();
                let r = a.wait(true, false, Duration::from_secs(30)).unwrap();
                (r, start.elapsed())
            });
            // From at once to a few hundred microseconds later: the leader may not sleep
            // yet, or sleep already.
            std::thread::sleep(Duration::from_micros(u64::from(round % 7) * 60));
            if round % 10 == 0 {
                b.send_to(b"other", ca).unwrap();
            }
            b.send_to(&round.to_be_bytes(), aa).unwrap();
            let (r, took) = t.join().unwrap();
            assert_eq!(r, (true, false), "round {round}");
            assert!(
                took < Duration::from_secs(10),
                "round {round}: the wait went on for {took:?}"
            );
        });
        let (n, _) = a.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], round.to_be_bytes());
        if round % 10 == 0 {
            let (n, _) = c.recv_from(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"other");
        }
    }
    assert!(!a.readable() && !c.readable());
    // With nothing for it, the wait lasts its time out (another socket's message included).
    std::thread::scope(|sc| {
        let t = sc.spawn(|| a.wait(true, false, Duration::from_millis(300)).unwrap());
        std::thread::sleep(Duration::from_millis(50));
        b.send_to(b"other", ca).unwrap();
        assert_eq!(t.join().unwrap(), (false, false));
    });
}

/// Also: a wait without end (`Duration::MAX`) is accepted.
#[test]
fn another_descriptor_ends_the_wait() {
    let na = node("127.3.11.41");
    let a = sock(&na, "127.3.11.41:4000");
    let (r, w) = std::os::unix::net::UnixStream::pair().unwrap();
    std::thread::scope(|sc| {
        let t = sc.spawn(|| {
            let start = Instant::now();
            let got = a
                .wait_or(true, false, Some(r.as_raw_fd()), Duration::MAX)
                .unwrap();
            (got, start.elapsed())
        });
        std::thread::sleep(Duration::from_millis(100));
        (&w).write_all(b"x").unwrap();
        let (got, took) = t.join().unwrap();
        assert_eq!(got, (false, false), "the socket itself has nothing");
        assert!(
            took < Duration::from_secs(10),
            "the wait went on for {took:?}"
        );
    });
    // The socket still leads its own wait afterwards: a message ends the next one.
    std::io::Read::read_exact(&mut &r, &mut [0u8; 1]).unwrap();
    let b = sock(&na, "127.3.11.41:4001");
    b.send_to(b"m", a.local_addr().unwrap()).unwrap();
    let got = a
        .wait_or(true, false, Some(r.as_raw_fd()), Duration::from_secs(10))
        .unwrap();
    assert_eq!(got, (true, false));
}

#[test]
fn a_blocking_receive_leads_when_it_waits_for_an_answer_only() {
    let (na, nb) = (node("127.3.11.51"), node("127.3.11.52"));
    let a = sock(&na, "127.3.11.51:4000");
    let b = sock(&nb, "127.3.11.52:4000");
    let ba = b.local_addr().unwrap();
    // Requests and answers with blocking receives on both sides: each side sent before it
    // waits, so its wait reads the transport.
    ping_pong(&a, &b, How::Blocking);
    let (all, led) = na.frames_read();
    assert!(all >= u64::from(ROUNDS), "{all}");
    assert!(
        led > all / 2,
        "only {led} of {all} answers read by the waiting thread"
    );

    // A sink (it only receives) leaves the transport to the I/O thread, which reads ahead.
    // b's last answer still counts as sent: one empty wait uses it up.
    b.set_read_timeout(Some(Duration::from_millis(50)));
    let e = b.recv_from(&mut [0u8; 8]).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ETIMEDOUT));
    b.set_read_timeout(Some(T));
    let before = nb.frames_read();
    std::thread::scope(|sc| {
        sc.spawn(|| {
            for i in 0..ROUNDS {
                a.send_to(&i.to_be_bytes(), ba).unwrap();
            }
        });
        let mut buf = [0u8; 64];
        for i in 0..ROUNDS {
            let (n, _) = b.recv_from(&mut buf).unwrap();
            assert_eq!(&buf[..n], i.to_be_bytes(), "message {i}");
        }
    });
    let after = nb.frames_read();
    assert_eq!(after.0 - before.0, u64::from(ROUNDS));
    assert_eq!(
        after.1, before.1,
        "the sink's waits read nothing themselves"
    );
}

/// While the owner of the readable descriptor has a thread waiting to receive itself
/// (`Socket::quiet_rx_fd`, the preload library's blocking `recvmsg`), messages that arrive
/// do not write the descriptor; what is left when the guard drops does, and a socket
/// drained shows nothing.
#[test]
fn a_quiet_descriptor_shows_what_is_left_when_the_wait_ends() {
    let (na, nb) = (node("127.3.11.61"), node("127.3.11.62"));
    let a = sock(&na, "127.3.11.61:4000");
    let b = sock(&nb, "127.3.11.62:4000");
    let ba = b.local_addr().unwrap();
    let fd = b.fd().unwrap();
    let polls = || rds_core::poll_readable(&[fd], Duration::ZERO).unwrap()[0];
    let mut buf = [0u8; 16];
    for round in 0..100u32 {
        {
            let _quiet = b.quiet_rx_fd().expect("an embedded socket");
            a.send_to(&round.to_be_bytes(), ba).unwrap();
            a.send_to(b"left over", ba).unwrap();
            let (n, _) = b.recv_from(&mut buf).unwrap();
            assert_eq!(&buf[..n], round.to_be_bytes());
            // The second message arrives (the socket's flags say so) with nobody of the
            // library polling: the descriptor stays quiet.
            let end = Instant::now() + T;
            while !b.readable() {
                assert!(
                    Instant::now() < end,
                    "round {round}: the second message is missing"
                );
                std::thread::sleep(Duration::from_micros(200));
            }
            assert!(!polls(), "round {round}: written while quiet");
        }
        assert!(polls(), "round {round}: the message left over is not shown");
        let (n, _) = b.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"left over");
        assert!(!polls(), "round {round}: drained but shown readable");
    }
}

/// A sender blocked for room in its send buffer (a blocking call's wait, as the preload
/// library's `sendmsg`: it does not lead) learns TCP's acknowledgements itself at short
/// intervals (`tcp_acks_by_waiter`) instead of waiting for the I/O thread's poll and the
/// wake-up it sends (the I/O thread leaves its timed polls to it meanwhile); every message
/// arrives, in order.
#[test]
fn a_sender_waiting_for_room_learns_acknowledgements_itself() {
    let (na, nb) = (node("127.3.11.71"), node("127.3.11.72"));
    let tx = sock(&na, "127.3.11.71:4000");
    tx.set_send_buffer_size(16 << 10);
    let rx = sock(&nb, "127.3.11.72:4000");
    let to: SocketAddr = "127.3.11.72:4000".parse().unwrap();
    const N: u32 = 3000;
    let waits = std::thread::scope(|s| {
        s.spawn(|| {
            let mut buf = [0u8; 2048];
            for i in 0..N {
                let (n, _) = rx.recv_from(&mut buf).unwrap();
                assert_eq!(&buf[..4], i.to_be_bytes(), "message {i} of {n} bytes");
            }
        });
        let mut waits = 0u32;
        let mut msg = vec![0u8; 2048];
        for i in 0..N {
            msg[..4].copy_from_slice(&i.to_be_bytes());
            loop {
                match tx.send_bytes(msg.clone().into(), Some(to), true) {
                    Ok(_) => break,
                    Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                        waits += 1;
                        tx.wait_interruptible(false, true, Duration::from_secs(10))
                            .unwrap();
                    }
                    // The receiver fell behind: its map wakes the sender.
                    Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                        let soon = Instant::now() + Duration::from_secs(10);
                        tx.wait_uncongested(Some(to), Some(soon)).unwrap();
                    }
                    Err(e) => panic!("send {i}: {e}"),
                }
            }
        }
        waits
    });
    // The I/O thread leaves its timed polls to a waiter: most waits end by its own ask
    // (racing the I/O thread's polls, a handful of 375 did, some runs none).
    assert_waiters_asked(&na, waits);
}

/// A socket answering on the lane its peer's requests came on, whose send buffer holds a few
/// answers (`rds-stress` sizes its buffers to its depth), waits for room in its own leading
/// wait (an event loop's `Socket::wait`): it asks TCP for acknowledgements before it sleeps
/// (`tcp_acks_by_waiter`). On that lane reads are taken as answers, so the lane's count of
/// TCP's acknowledgements comes from a timed poll up to a millisecond later; a waiter that
/// did not ask waited for it (`rds-stress --loopback -d 1` ran at a sixth of its rate in about
/// one run of six). Every request is answered, in order.
#[test]
fn an_answering_socket_waiting_for_room_asks_for_acknowledgements_before_it_sleeps() {
    let (na, nb) = (node("127.3.11.81"), node("127.3.11.82"));
    let answers = sock(&na, "127.3.11.81:4000");
    // The smallest buffer there is (the kernel's floor: 2304 bytes, nine answers).
    answers.set_send_buffer_size(1);
    assert_eq!(answers.send_buffer_size(), 4608);
    answers.set_nonblocking(true);
    let asks = sock(&nb, "127.3.11.82:4000");
    let (a, b): (SocketAddr, SocketAddr) = (
        "127.3.11.81:4000".parse().unwrap(),
        "127.3.11.82:4000".parse().unwrap(),
    );
    const N: u32 = 1000;
    const LEN: usize = 256;
    let waits = std::thread::scope(|s| {
        s.spawn(|| {
            let mut buf = [0u8; LEN];
            for i in 0..N {
                let mut req = [0u8; LEN];
                req[..4].copy_from_slice(&i.to_be_bytes());
                asks.send_to(&req, a).unwrap();
                let (n, from) = asks.recv_from(&mut buf).unwrap();
                assert_eq!((n, from), (LEN, a));
                assert_eq!(&buf[..4], i.to_be_bytes(), "answer {i}");
            }
        });
        let mut waits = 0u32;
        let mut buf = [0u8; LEN];
        for i in 0..N {
            loop {
                match answers.recv_from(&mut buf) {
                    Ok((n, from)) => {
                        assert_eq!((n, from), (LEN, b));
                        break;
                    }
                    Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                        answers.wait(true, false, T).unwrap();
                    }
                    Err(e) => panic!("request {i}: {e}"),
                }
            }
            assert_eq!(&buf[..4], i.to_be_bytes(), "request {i}");
            loop {
                match answers.send_to(&buf, b) {
                    Ok(_) => break,
                    Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                        waits += 1;
                        let (_, w) = answers.wait(false, true, T).unwrap();
                        assert!(w, "answer {i}: no room after {T:?}");
                    }
                    Err(e) => panic!("answer {i}: {e}"),
                }
            }
        }
        waits
    });
    assert_waiters_asked(&na, waits);
}

/// The send buffer of a socket of node `n` filled (`waits` waits for room), and at least half
/// of those waits ended by the waiting thread learning TCP's acknowledgements itself
/// (`tcp_acks_by_waiter`).
fn assert_waiters_asked(n: &Node, waits: u32) {
    let by_waiter = n
        .stats()
        .into_iter()
        .find(|(k, _)| *k == "tcp_acks_by_waiter")
        .expect("the counter")
        .1;
    assert!(waits > 0, "the send buffer never filled");
    assert!(
        by_waiter * 2 >= u64::from(waits),
        "{waits} waits for room, only {by_waiter} learnt an acknowledgement themselves"
    );
}
