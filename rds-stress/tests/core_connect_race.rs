//! Regression test for an rds-core bug seen by rds-stress (fixed in e77c012): when two
//! nodes start sending to each other at the same moment, the first RDS/TCP connection is
//! reset (`conn_reset`, `tcp_listen_closed_stale`) and messages the peer's TCP already acked
//! (`send_drop_acked`) never reached the receiving socket (about 1 round in 40 before the fix).
//! rds-stress still pings the peer (port 0) before its tasks start.

use rds_core::{CtlMode, Node, NodeConfig, Socket};
use std::time::Duration;
#[test]
fn simultaneous_first_sends_lose_messages() {
    let mut lost = 0;
    for round in 0..40 {
        let mk = |ip: &str| {
            let mut c = NodeConfig::new([ip.parse().unwrap()]);
            c.ctl = CtlMode::Off;
            Node::start(c).unwrap()
        };
        let a = mk("127.50.60.1");
        let b = mk("127.50.60.2");
        let sa = Socket::with_node(&a);
        sa.bind("127.50.60.1:4001".parse().unwrap()).unwrap();
        let sb = Socket::with_node(&b);
        sb.bind("127.50.60.2:4001".parse().unwrap()).unwrap();
        sa.set_nonblocking(true);
        sb.set_nonblocking(false);
        let back: std::net::SocketAddr = "127.50.60.1:4001".parse().unwrap();
        let sb2 = Socket::with_node(&b);
        sb2.bind("127.50.60.2:4002".parse().unwrap()).unwrap();
        sb2.set_nonblocking(true);
        let sa2 = Socket::with_node(&a);
        sa2.bind("127.50.60.1:4002".parse().unwrap()).unwrap();
        sa2.set_nonblocking(true);
        let h = std::thread::spawn(move || {
            for i in 0u8..4 {
                let _ = sb2.send_to(&[i; 100], back);
            }
            sb2
        });
        for i in 0u8..4 {
            let _ = sa2.send_to(&[i; 100], "127.50.60.2:4002".parse().unwrap());
        }
        sb.set_read_timeout(Some(Duration::from_secs(5)));
        let dst = "127.50.60.2:4001".parse().unwrap();
        for i in 0u8..4 {
            let _ = sa.send_to(&[i; 100], dst).unwrap();
        }
        let _sb2 = h.join().unwrap();
        let mut buf = [0u8; 200];
        let mut got = vec![];
        for _ in 0..4 {
            match sb.recv_from(&mut buf) {
                Ok((_, _)) => got.push(buf[0]),
                Err(_) => break,
            }
        }
        if got != vec![0, 1, 2, 3] {
            lost += 1;
            eprintln!(
                "round {round}: got {got:?} stats a={:?}",
                a.stats()
                    .into_iter()
                    .filter(|x| x.1 != 0)
                    .collect::<Vec<_>>()
            );
            eprintln!(
                "b={:?}",
                b.stats()
                    .into_iter()
                    .filter(|x| x.1 != 0)
                    .collect::<Vec<_>>()
            );
        }
        a.shutdown();
        b.shutdown();
    }
    assert_eq!(lost, 0);
}
