//! The whole safe rdma-core layer over a real adapter (soft-RoCE in the lab guests): one
//! ignored test that connects to itself and sends, RDMA-writes and RDMA-reads.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use rds_core::ib::cm::{CmEvent, CmEventType, ConnParam, EventChannel};
use rds_core::ib::{
    self, Access, Cq, QpCap, QpInit, RecvWr, SendOp, SendWr, WcOpcode, WcStatus, WorkCompletion,
};

const STEP: Duration = Duration::from_secs(10);

fn next_event(ch: &EventChannel, what: &str) -> CmEvent {
    let deadline = Instant::now() + STEP;
    loop {
        if let Some(ev) = ch.get_event().expect("rdma_get_cm_event") {
            eprintln!("cm event {:?} status {} ({what})", ev.kind, ev.status);
            return ev;
        }
        assert!(
            Instant::now() < deadline,
            "no CM event within {STEP:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits for the channel event (after `req_notify`), then polls one completion.
fn next_completion(cq: &Cq, what: &str) -> WorkCompletion {
    let deadline = Instant::now() + STEP;
    let mut wc = [WorkCompletion::default(); 1];
    loop {
        if cq.poll(&mut wc).expect("poll_cq") == 1 {
            eprintln!(
                "wc {what}: {:?} {:?} len {}",
                wc[0].status(),
                wc[0].opcode(),
                wc[0].byte_len()
            );
            return wc[0];
        }
        assert!(
            Instant::now() < deadline,
            "no completion within {STEP:?} for {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn wait_channel(cq: &Cq, what: &str) {
    let deadline = Instant::now() + STEP;
    while !cq.get_event().expect("ibv_get_cq_event") {
        assert!(
            Instant::now() < deadline,
            "no channel event within {STEP:?} for {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// An IPv4 address of an active RoCE port (from its v4-mapped GIDs).
fn local_roce_ipv4(devs: &[ib::DeviceSummary]) -> Option<Ipv4Addr> {
    devs.iter()
        .filter(|d| d.usable_for_rds())
        .flat_map(|d| d.ports.iter())
        .flat_map(|p| p.gids.iter())
        .find_map(|g| g.to_ipv6().to_ipv4_mapped())
}

/// Run inside a lab guest that has `rxe0`:
/// `ib_device-<hash> --ignored --nocapture device_loopback_send_rdma_write_read`.
/// Connects to itself through the connection manager, then sends (with and without
/// immediate data), RDMA-writes and RDMA-reads, checking every byte and completion.
#[test]
#[ignore = "needs an RDMA device (runs in the lab guests, see the doc comment)"]
fn device_loopback_send_rdma_write_read() {
    let lib = ib::lib().expect("libraries");
    let devs = ib::availability().expect("an RDMA device");
    for d in &devs {
        eprintln!(
            "device: {d} gids {:?}",
            d.ports.iter().map(|p| &p.gids).collect::<Vec<_>>()
        );
    }
    let ip = local_roce_ipv4(&devs).expect("an active RoCE port with an IPv4 GID");
    let addr = SocketAddr::new(IpAddr::V4(ip), 18999);

    let ch = EventChannel::new(lib).expect("event channel");
    let listener = ch.create_id().expect("listener id");
    listener.bind(addr).expect("rdma_bind_addr");
    listener.listen(4).expect("rdma_listen");
    assert_eq!(listener.local_addr(), Some(addr));

    let client = ch.create_id().expect("client id");
    client
        .resolve_addr(None, addr, Duration::from_secs(2))
        .expect("rdma_resolve_addr");
    let ev = next_event(&ch, "addr resolved");
    assert_eq!(
        (ev.kind, ev.status, ev.id),
        (CmEventType::AddrResolved, 0, client.handle())
    );
    let ctx = client.context().expect("bound to a device");
    eprintln!("client on {} port {}", ctx.device_name(), client.port_num());
    client
        .resolve_route(Duration::from_secs(2))
        .expect("rdma_resolve_route");
    let ev = next_event(&ch, "route resolved");
    assert_eq!((ev.kind, ev.status), (CmEventType::RouteResolved, 0));

    let pd = ctx.alloc_pd().expect("ibv_alloc_pd");
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 0,
    };
    let c_scq = ctx.create_cq(32, true, 0).expect("client send cq");
    let c_rcq = ctx.create_cq(32, true, 0).expect("client recv cq");
    assert!(c_scq.fd().is_some() && c_scq.capacity() >= 32);
    let c_qp = client
        .create_qp(
            &pd,
            &QpInit {
                send_cq: &c_scq,
                recv_cq: &c_rcq,
                cap,
                sq_sig_all: false,
            },
        )
        .expect("rdma_create_qp (client)");
    assert!(c_qp.cap().max_send_wr >= 16);
    client
        .connect(&ConnParam {
            private_data: b"hello-req",
            responder_resources: 1,
            initiator_depth: 1,
            flow_control: false,
            retry_count: 7,
            rnr_retry_count: 7,
        })
        .expect("rdma_connect");

    let mut ev = next_event(&ch, "connect request");
    assert_eq!(ev.kind, CmEventType::ConnectRequest);
    assert_eq!(ev.listen_id, Some(listener.handle()));
    assert!(
        ev.private_data.starts_with(b"hello-req"),
        "{:?}",
        ev.private_data
    );
    assert_eq!(ev.conn.rnr_retry_count, 7);
    let server = ev.new_id.take().expect("the new id");
    assert_eq!(server.handle(), ev.id);
    assert_eq!(server.local_addr(), Some(addr));
    assert_eq!(server.peer_addr().map(|a| a.ip()), Some(IpAddr::V4(ip)));
    let sctx = server.context().expect("device of the request");
    assert_eq!(sctx.device_name(), ctx.device_name());
    let s_scq = sctx.create_cq(32, true, 0).expect("server send cq");
    let s_rcq = sctx.create_cq(32, true, 0).expect("server recv cq");
    let s_qp = server
        .create_qp(
            &pd,
            &QpInit {
                send_cq: &s_scq,
                recv_cq: &s_rcq,
                cap,
                sq_sig_all: false,
            },
        )
        .expect("rdma_create_qp (server)");

    // Receive buffers before accepting: two 64-byte slots.
    let s_recv = pd.reg_mr(128, Access::LOCAL_WRITE).expect("server recv mr");
    let sges = [s_recv.sge(0, 64).unwrap(), s_recv.sge(64, 64).unwrap()];
    s_qp.post_recv(&[
        RecvWr {
            wr_id: 100,
            sges: &sges[0..1],
        },
        RecvWr {
            wr_id: 101,
            sges: &sges[1..2],
        },
    ])
    .expect("post_recv");
    server
        .accept(&ConnParam {
            private_data: b"hello-rep",
            responder_resources: 1,
            initiator_depth: 1,
            flow_control: false,
            retry_count: 7,
            rnr_retry_count: 7,
        })
        .expect("rdma_accept");
    let mut established = 0;
    while established < 2 {
        let ev = next_event(&ch, "established");
        assert_eq!((ev.kind, ev.status), (CmEventType::Established, 0));
        if ev.id == client.handle() {
            assert!(
                ev.private_data.starts_with(b"hello-rep"),
                "{:?}",
                ev.private_data
            );
        } else {
            assert_eq!(ev.id, server.handle());
        }
        established += 1;
    }

    // SEND, solicited, through the channel.
    let mut c_mr = pd.reg_mr(256, Access::LOCAL_WRITE).expect("client mr");
    c_mr.write_at(0, b"ping").unwrap();
    s_rcq.req_notify(false).expect("req_notify");
    let sge = [c_mr.sge(0, 4).unwrap()];
    c_qp.post_send(&[SendWr {
        wr_id: 1,
        op: SendOp::Send,
        sges: &sge,
        signaled: true,
        solicited: true,
        fence: false,
    }])
    .expect("post_send");
    let wc = next_completion(&c_scq, "client send");
    assert_eq!(
        (wc.status(), wc.opcode(), wc.wr_id()),
        (WcStatus::Success, WcOpcode::Send, 1)
    );
    wait_channel(&s_rcq, "server recv");
    let wc = next_completion(&s_rcq, "server recv");
    assert_eq!(
        (wc.status(), wc.opcode(), wc.wr_id(), wc.byte_len()),
        (WcStatus::Success, WcOpcode::Recv, 100, 4)
    );
    assert!(wc.is_recv());
    assert_eq!(wc.imm_data(), None);
    assert_eq!(wc.qp_num(), s_qp.qp_num());
    let mut got = [0u8; 4];
    s_recv.read_at(0, &mut got).unwrap();
    assert_eq!(&got, b"ping");

    // SEND with immediate data.
    c_mr.write_at(8, b"imm!").unwrap();
    let sge = [c_mr.sge(8, 4).unwrap()];
    c_qp.post_send(&[SendWr {
        wr_id: 2,
        op: SendOp::SendWithImm(0x1234_5678),
        sges: &sge,
        signaled: true,
        solicited: false,
        fence: false,
    }])
    .expect("post_send imm");
    assert!(next_completion(&c_scq, "client send imm").is_success());
    let wc = next_completion(&s_rcq, "server recv imm");
    assert_eq!(
        (wc.wr_id(), wc.byte_len(), wc.imm_data()),
        (101, 4, Some(0x1234_5678))
    );
    s_recv.read_at(64, &mut got).unwrap();
    assert_eq!(&got, b"imm!");

    // RDMA WRITE into the server's region, then RDMA READ it back into the client's.
    let mut target = pd
        .reg_mr(
            4096,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .expect("target mr");
    target.write_at(2048, b"server-owned-bytes").unwrap();
    let payload: Vec<u8> = (0..100u8).collect();
    c_mr.write_at(16, &payload).unwrap();
    let sge = [c_mr.sge(16, 100).unwrap()];
    c_qp.post_send(&[SendWr {
        wr_id: 3,
        op: SendOp::RdmaWrite {
            remote_addr: target.addr() + 10,
            rkey: target.rkey(),
        },
        sges: &sge,
        signaled: true,
        solicited: false,
        fence: false,
    }])
    .expect("post rdma write");
    let wc = next_completion(&c_scq, "rdma write");
    assert_eq!(
        (wc.status(), wc.opcode(), wc.wr_id()),
        (WcStatus::Success, WcOpcode::RdmaWrite, 3)
    );
    let mut back = vec![0u8; 100];
    target.read_at(10, &mut back).unwrap();
    assert_eq!(back, payload);
    let mut zero = [0xffu8; 10];
    target.read_at(0, &mut zero).unwrap();
    assert_eq!(zero, [0u8; 10], "bytes before the write untouched");

    let sge = [c_mr.sge(128, 18).unwrap()];
    c_qp.post_send(&[SendWr {
        wr_id: 4,
        op: SendOp::RdmaRead {
            remote_addr: target.addr() + 2048,
            rkey: target.rkey(),
        },
        sges: &sge,
        signaled: true,
        solicited: false,
        fence: false,
    }])
    .expect("post rdma read");
    let wc = next_completion(&c_scq, "rdma read");
    assert_eq!(
        (wc.status(), wc.opcode(), wc.wr_id(), wc.byte_len()),
        (WcStatus::Success, WcOpcode::RdmaRead, 4, 18)
    );
    let mut read = [0u8; 18];
    c_mr.read_at(128, &mut read).unwrap();
    assert_eq!(&read, b"server-owned-bytes");

    // A bad rkey is a remote access error, not a crash.
    c_qp.post_send(&[SendWr {
        wr_id: 5,
        op: SendOp::RdmaWrite {
            remote_addr: target.addr(),
            rkey: target.rkey() ^ 0x5a5a_0000,
        },
        sges: &sge,
        signaled: true,
        solicited: false,
        fence: false,
    }])
    .expect("post bad write");
    let wc = next_completion(&c_scq, "bad rkey");
    assert_eq!(wc.wr_id(), 5);
    assert_eq!(wc.status(), WcStatus::RemAccessErr);

    // The error moved the QPs to the error state; tear the connection down. The passive side
    // answers the DREQ with its own rdma_disconnect (the DREP), as RDS does.
    client.disconnect().expect("rdma_disconnect (client)");
    let deadline = Instant::now() + STEP;
    let (mut client_down, mut server_down) = (false, false);
    while !(client_down && server_down) {
        assert!(
            Instant::now() < deadline,
            "disconnect events: client {client_down}, server {server_down}"
        );
        let Some(ev) = ch.get_event().expect("events") else {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        };
        eprintln!("cm event {:?} for {:?}", ev.kind, ev.id);
        if ev.kind != CmEventType::Disconnected {
            continue;
        }
        if ev.id == server.handle() {
            server_down = true;
            server.disconnect().expect("rdma_disconnect (server)");
        } else {
            assert_eq!(ev.id, client.handle());
            client_down = true;
        }
    }
    s_qp.set_error_state().expect("modify to ERR");
    // Server receive queue is empty (both receives consumed): nothing is flushed.
    let mut wcs = [WorkCompletion::default(); 4];
    assert_eq!(s_rcq.poll(&mut wcs).expect("poll"), 0);
    // Drop order is enforced by the handles: QPs first (they hold CQs, PD and ids).
    drop(c_qp);
    drop(s_qp);
    drop(server);
    drop(client);
    drop(listener);
}
