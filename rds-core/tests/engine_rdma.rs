//! Engine tests of RDMA operations: control-data checks, the op riding the first fragment,
//! cookies, notifications, no retransmission, cancellation.

mod common;

use std::sync::Arc;

use bytes::Bytes;
use rds_core::proto::{Event, Received, SendError, SendExtras, SockId};
use rds_core::rdma::{LocalVec, RdmaArgs, RdmaBuffer, RdmaNotify, RdmaOp, RdmaStatus};
use rds_core::stats::Counter;
use rds_core::wire::MAX_MSG_SIZE;

use common::*;

// ---------------------------------------------------------------------------------------------
// RDMA operations (the transport's part, posting and completing them, is played by the test)

fn rdma_op(
    sock: SockId,
    cookie: u64,
    remote_addr: u64,
    lens: &[usize],
    notify: bool,
) -> Arc<RdmaOp> {
    let buf = RdmaBuffer::new(1 << 20).unwrap();
    let mut off = 0;
    let local = lens
        .iter()
        .map(|&len| {
            let v = LocalVec {
                buf: buf.clone(),
                off,
                len,
            };
            off += len;
            v
        })
        .collect();
    Arc::new(RdmaOp::new(
        sock,
        &RdmaArgs {
            cookie,
            remote_addr,
            local,
            write: true,
            notify,
            user_token: 0x5eed,
            ..RdmaArgs::default()
        },
    ))
}

fn send_op(
    p: &mut Pair,
    s: SockId,
    port: u16,
    payload: &[u8],
    ex: &SendExtras,
) -> Result<usize, SendError> {
    let (now, dest) = (p.now, p.dest(B, port));
    p.st(A).send_full(
        now,
        s,
        Some(dest),
        Bytes::copy_from_slice(payload),
        true,
        false,
        ex,
    )
}

fn notes(p: &mut Pair, s: Side, sock: SockId) -> Vec<RdmaNotify> {
    let mut v = Vec::new();
    while let Ok(Received::RdmaStatus(n)) = p.st(s).recv(sock, 0, false) {
        v.push(n);
    }
    v
}

#[test]
fn rdma_and_rdma_dest_need_the_ib_transport_and_valid_control_data() {
    let mut p = Pair::tcp();
    p.establish();
    let s = p.sock(A, 4000);
    let op = rdma_op(s, 1, 0, &[8], true);
    let ex = SendExtras {
        rdma: Some(op.clone()),
        rdma_dest: None,
        past_congestion: false,
    };
    assert_eq!(
        send_op(&mut p, s, 6000, b"x", &ex),
        Err(SendError::NotSupported)
    );
    let dest = SendExtras {
        rdma: None,
        rdma_dest: Some(7),
        past_congestion: false,
    };
    assert_eq!(
        send_op(&mut p, s, 6000, b"x", &dest),
        Err(SendError::NotSupported)
    );

    let mut p = Pair::ib();
    p.establish();
    let s = p.sock(A, 4000);
    let both = SendExtras {
        rdma: Some(op),
        rdma_dest: Some(7),
        past_congestion: false,
    };
    assert_eq!(
        send_op(&mut p, s, 6000, b"x", &both),
        Err(SendError::InvalidCtl)
    );
    let empty = SendExtras {
        rdma: Some(rdma_op(s, 1, 0, &[], true)),
        rdma_dest: None,
        past_congestion: false,
    };
    assert_eq!(
        send_op(&mut p, s, 6000, b"x", &empty),
        Err(SendError::InvalidCtl)
    );
    let big = SendExtras {
        rdma: Some(rdma_op(s, 1, 0, &[MAX_MSG_SIZE, 1], true)),
        rdma_dest: None,
        past_congestion: false,
    };
    assert_eq!(
        send_op(&mut p, s, 6000, b"x", &big),
        Err(SendError::MsgSize)
    );
    assert_eq!(p.stat(A, Counter::SendRdma), 0);
    assert!(p.st(A).queued_msgs(false).is_empty());
}

#[test]
fn rdma_op_rides_the_first_fragment_and_names_its_key() {
    let mut p = Pair::ib();
    p.establish();
    let s = p.sock(A, 4000);
    let rb = p.sock(B, 6000);
    // Cookie: rkey 0x11223344, page offset 0x10; remote_addr 0x20 → peer address 0x30.
    let op = rdma_op(s, 0x10_1122_3344, 0x20, &[3000, 5000], true);
    assert_eq!(
        (op.rkey, op.remote_addr, op.bytes),
        (0x1122_3344, 0x30, 8000)
    );
    let ex = SendExtras {
        rdma: Some(op.clone()),
        rdma_dest: None,
        past_congestion: false,
    };
    assert_eq!(send_op(&mut p, s, 6000, &[5; 10_000], &ex), Ok(10_000));
    assert_eq!(p.stat(A, Counter::SendRdma), 1);
    assert_eq!(p.stat(A, Counter::SendRdmaBytes), 8000);
    let out = p.tx(A, 0);
    assert_eq!(out.len(), 3, "10000 bytes in three fragments");
    assert!(out[0].rdma.as_ref().is_some_and(|r| Arc::ptr_eq(&r.0, &op)));
    assert!(out[1].rdma.is_none() && out[2].rdma.is_none());
    for t in &out {
        // RDMA extension: type 2, BE rkey, then the NONE terminator.
        assert_eq!(&t.hdr[32..38], &[2, 0x11, 0x22, 0x33, 0x44, 0]);
    }
    // A read's bytes count as received (the initiator's view, as the kernel counts).
    let mut args = RdmaArgs {
        cookie: 5,
        local: vec![LocalVec {
            buf: RdmaBuffer::new(100).unwrap(),
            off: 0,
            len: 100,
        }],
        ..RdmaArgs::default()
    };
    args.write = false;
    let read = SendExtras {
        rdma: Some(Arc::new(RdmaOp::new(s, &args))),
        rdma_dest: None,
        past_congestion: false,
    };
    send_op(&mut p, s, 6001, b"r", &read).unwrap();
    assert_eq!(p.stat(A, Counter::SendRdma), 2);
    assert_eq!(p.stat(A, Counter::SendRdmaBytes), 8000);
    assert_eq!(p.stat(A, Counter::RecvRdmaBytes), 100);
    p.rx(B, 0, &out).unwrap();
    let evs = p.take_events(B);
    assert!(evs.contains(&Event::RdmaUnuse {
        sock: rb,
        rkey: 0x1122_3344
    }));
    assert_eq!(p.recv_all(B, rb).len(), 1);
}

#[test]
fn rdma_dest_cookie_reaches_the_receiver() {
    let mut p = Pair::ib();
    p.establish();
    let s = p.sock(A, 4000);
    let rb = p.sock(B, 6000);
    let ex = SendExtras {
        rdma: None,
        rdma_dest: Some(0x0000_0abc_dead_beef),
        past_congestion: false,
    };
    send_op(&mut p, s, 6000, b"offer", &ex).unwrap();
    let out = p.tx(A, 0);
    assert_eq!(
        &out[0].hdr[32..42],
        &[3, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0x0a, 0xbc, 0]
    );
    p.rx(B, 0, &out).unwrap();
    let got = p.recv_all(B, rb);
    assert_eq!(got[0].rdma_dest, Some(0x0000_0abc_dead_beef));
}

#[test]
fn rdma_notifications_come_first_and_once() {
    let mut p = Pair::ib();
    p.establish();
    let s = p.sock(A, 4000);
    let ra = p.sock(A, 4001);
    let sb = p.sock(B, 6001);
    p.send(B, sb, 4001, b"data")
        .unwrap_or_else(|e| panic!("{e}"));
    p.run();
    let op = rdma_op(s, 1, 0, &[8], true);
    p.st(A).rdma_complete(&op, RdmaStatus::Success);
    p.st(A).rdma_complete(&op, RdmaStatus::Dropped);
    assert_eq!(
        notes(&mut p, A, s),
        [RdmaNotify {
            user_token: 0x5eed,
            status: RdmaStatus::Success
        }]
    );
    // Without NOTIFY_ME: success is silent; a failure is reported only with RDS_RECVERR.
    let quiet = rdma_op(s, 1, 0, &[8], false);
    p.st(A).rdma_complete(&quiet, RdmaStatus::Success);
    p.st(A).rdma_complete(&quiet, RdmaStatus::RemoteError);
    assert!(notes(&mut p, A, s).is_empty());
    p.st(A).set_recverr(s, true);
    let q2 = rdma_op(s, 1, 0, &[8], false);
    p.st(A).rdma_complete(&q2, RdmaStatus::RemoteError);
    assert!(p.st(A).readable(s));
    // A notification is returned before queued data (peek leaves it).
    let n = rdma_op(ra, 1, 0, &[8], true);
    p.st(A).rdma_complete(&n, RdmaStatus::OtherError);
    assert!(matches!(
        p.st(A).recv(ra, 100, true),
        Ok(Received::RdmaStatus(_))
    ));
    assert!(matches!(
        p.st(A).recv(ra, 100, false),
        Ok(Received::RdmaStatus(RdmaNotify {
            status: RdmaStatus::OtherError,
            ..
        }))
    ));
    assert_eq!(p.recv_all(A, ra).len(), 1);
    assert_eq!(
        notes(&mut p, A, s),
        [RdmaNotify {
            user_token: 0x5eed,
            status: RdmaStatus::RemoteError
        }]
    );
}

#[test]
fn rdma_ops_are_never_retransmitted() {
    let mut p = Pair::ib();
    p.establish();
    let s = p.sock(A, 4000);
    let rb = p.sock(B, 6000);
    let op = rdma_op(s, 1, 0, &[8], true);
    let ex = SendExtras {
        rdma: Some(op),
        rdma_dest: None,
        past_congestion: false,
    };
    send_op(&mut p, s, 6000, b"with-op", &ex).unwrap();
    p.send(A, s, 6000, b"plain").unwrap();
    let out = p.tx(A, 0);
    assert_eq!(out.len(), 2);
    let _ = p.tx(B, 0);
    // Both sent, neither acknowledged, then the connection drops.
    p.cut(0);
    assert_eq!(
        notes(&mut p, A, s),
        [RdmaNotify {
            user_token: 0x5eed,
            status: RdmaStatus::Dropped
        }]
    );
    p.wire.clear();
    p.run();
    let resent: Vec<Bytes> = p
        .wired_from(A, 4000)
        .iter()
        .map(|w| w.payload.clone())
        .collect();
    assert_eq!(resent, [Bytes::from_static(b"plain")]);
    let got: Vec<Bytes> = p.recv_all(B, rb).into_iter().map(|m| m.payload).collect();
    assert_eq!(got, [Bytes::from_static(b"plain")]);
    let snd = p.sock_info(A, s).snd_bytes;
    assert_eq!(snd, 0, "the dropped message gave its buffer space back");
}

#[test]
fn cancel_reports_rdma_ops_canceled() {
    let mut p = Pair::ib();
    p.establish();
    let s = p.sock(A, 4000);
    let op = rdma_op(s, 1, 0, &[8], true);
    let ex = SendExtras {
        rdma: Some(op),
        rdma_dest: None,
        past_congestion: false,
    };
    send_op(&mut p, s, 6000, b"x", &ex).unwrap();
    let dest = p.dest(B, 6000);
    assert_eq!(p.st(A).cancel_sent_to(s, dest), 1);
    assert_eq!(
        notes(&mut p, A, s),
        [RdmaNotify {
            user_token: 0x5eed,
            status: RdmaStatus::Canceled
        }]
    );
}
