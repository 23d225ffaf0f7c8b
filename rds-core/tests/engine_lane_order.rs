//! The order in which the owning side (the smaller address) connects its RDS/TCP lanes.
//!
//! A peer that learnt no lane identity (no SPORT_IDX in its handshake: the base kernels, such
//! as Debian's 6.1) puts each connection it accepts into its first free slot, so our lanes
//! connect one at a time, in index order: lane i+1 only once lanes 0..=i are up. A peer with
//! SPORT_IDX (newer kernels, this stack) takes the lane from the source port, and the lanes
//! connect at once. The peer here is played by hand: its pongs are built from the wire
//! layout, with or without SPORT_IDX, and its transport answers every connect at once.

mod common;

use std::time::Duration;

use rds_core::proto::{ConnId, Event, PathState, Stack, TransportKind};
use rds_core::time::Instant;
use rds_core::tunables::Tunables;
use rds_core::wire::{ExtHeader, HeaderRepr};

use common::*;

/// Our node (A, the smaller address) and the peer's side of the handshake, played by hand.
struct Owner {
    st: Stack,
    now: Instant,
    conn: ConnId,
    /// The peer's next sequence number on lane 0 (its pongs).
    peer_seq: u64,
    /// Whether the peer's pongs carry SPORT_IDX.
    sport_idx: bool,
}

impl Owner {
    /// A socket of ours sends to B: lane 0 connects (the only event so far).
    fn new(sport_idx: bool, tun: Tunables) -> Owner {
        let mut st = stack(ADDR_A, TransportKind::Tcp, tun, SEED_A);
        let s = st.socket();
        st.bind(s, sa(ADDR_A, 4000)).unwrap();
        let now = Instant::ZERO + ms(1);
        st.send(now, s, Some(sa(ADDR_B, 5000)), b"x"[..].into(), true)
            .unwrap();
        let conn = st.find_conn(ADDR_A, ADDR_B, TransportKind::Tcp).unwrap();
        let mut o = Owner {
            st,
            now,
            conn,
            peer_seq: 1,
            sport_idx,
        };
        assert_eq!(o.connects(), [0]);
        o
    }

    /// The lanes of the Connect events since the last call, in order.
    fn connects(&mut self) -> Vec<usize> {
        let mut v = Vec::new();
        while let Some(e) = self.st.poll_event() {
            if let Event::Connect { conn, path, .. } = e {
                assert_eq!(conn, self.conn);
                v.push(path);
            }
        }
        v
    }

    /// The connection attempt of `path` succeeded.
    fn connected(&mut self, path: usize) {
        let (state, epoch) = self.st.path_state(self.conn, path);
        assert_eq!(state, PathState::Connecting, "lane {path}");
        assert!(self.st.handle_connected(self.now, self.conn, path, epoch));
    }

    /// The attempt of `path` failed (the peer reset it).
    fn failed(&mut self, path: usize) {
        let (state, epoch) = self.st.path_state(self.conn, path);
        assert_eq!(state, PathState::Connecting, "lane {path}");
        self.st
            .handle_connect_failed(self.now, self.conn, path, epoch);
    }

    /// The peer's pong to our probe arrives on lane 0: NPATHS=8, GEN_NUM, and SPORT_IDX if
    /// this peer has it.
    fn pong(&mut self) {
        let mut h = HeaderRepr::pong(self.peer_seq, 1);
        self.peer_seq += 1;
        h.push_ext(ExtHeader::Npaths(8)).unwrap();
        h.push_ext(ExtHeader::GenNum(0x6e6e)).unwrap();
        if self.sport_idx {
            h.push_ext(ExtHeader::SportIdx(0)).unwrap();
        }
        let (state, epoch) = self.st.path_state(self.conn, 0);
        assert_eq!(state, PathState::Up);
        self.st
            .handle_frame(self.now, self.conn, 0, epoch, frame(h, &[]))
            .unwrap();
    }

    /// The peer (or the network) ends the transport connection of `path`.
    fn drop_lane(&mut self, path: usize) {
        let (state, epoch) = self.st.path_state(self.conn, path);
        assert_eq!(state, PathState::Up, "lane {path}");
        self.st
            .handle_disconnected(self.now, self.conn, path, epoch);
    }

    /// Time passes and the due timers run.
    fn wait(&mut self, d: Duration) {
        self.now += d;
        let now = self.now;
        self.st.handle_timeout(now);
    }

    fn up(&self) -> Vec<usize> {
        (0..8)
            .filter(|&p| self.st.path_state(self.conn, p).0 == PathState::Up)
            .collect()
    }
}

fn sorted(mut v: Vec<usize>) -> Vec<usize> {
    v.sort_unstable();
    v
}

/// Lane 0 up, the pong, then every lane in turn: returns the Connect events seen after each
/// step (`[after the pong, after lane 1 up, ..., after lane 7 up]`).
fn ordered_fan_out(o: &mut Owner) -> Vec<Vec<usize>> {
    let mut steps = vec![o.connects()];
    o.pong();
    steps.push(o.connects());
    for lane in 1..8 {
        o.connected(lane);
        steps.push(o.connects());
    }
    steps
}

#[test]
fn lanes_connect_one_by_one_in_index_order_to_a_peer_without_sport_idx() {
    let mut o = Owner::new(false, Tunables::default());
    o.connected(0);
    // Nothing before the pong (lanes above 0 wait for the peer to know the lanes), then one
    // lane per lane up, in index order.
    let steps = ordered_fan_out(&mut o);
    let want: Vec<Vec<usize>> = vec![
        vec![],
        vec![1],
        vec![2],
        vec![3],
        vec![4],
        vec![5],
        vec![6],
        vec![7],
        vec![],
    ];
    assert_eq!(steps, want);
    assert_eq!(o.up(), (0..8).collect::<Vec<_>>());
    assert_eq!(o.st.npaths(o.conn), 8);

    // Every lane dropped at once (the peer's reset): lane 0 first, and after the pong to the
    // new probe the others one by one again.
    for lane in 0..8 {
        o.drop_lane(lane);
    }
    assert_eq!(o.connects(), Vec::<usize>::new());
    // Reconnect timers run (the first attempt at once; gated lanes stay quiet).
    for _ in 0..5 {
        o.wait(ms(1));
        let c = o.connects();
        if !c.is_empty() {
            assert_eq!(c, [0], "only lane 0 reconnects first");
            break;
        }
    }
    assert_eq!(o.st.path_state(o.conn, 0).0, PathState::Connecting);
    // Long after every backoff, still only lane 0 is on its way.
    o.wait(Duration::from_secs(3));
    assert_eq!(o.connects(), Vec::<usize>::new());
    o.connected(0);
    assert_eq!(o.connects(), Vec::<usize>::new());
    let steps = ordered_fan_out(&mut o);
    assert_eq!(steps, want);

    // A lane whose attempt fails keeps the lanes above it waiting through its backoff; it
    // starts the next one when it comes up.
    for lane in [2, 5] {
        o.drop_lane(lane);
    }
    // A lane above 0 dropped: we probe again before lanes reconnect.
    assert_eq!(o.connects(), Vec::<usize>::new());
    o.pong();
    assert_eq!(o.connects(), [2]);
    // Two failures: the first retries at once, the second after a random backoff.
    for _ in 0..2 {
        o.failed(2);
        assert_eq!(o.connects(), Vec::<usize>::new());
        let mut waited = Duration::ZERO;
        let again = loop {
            o.wait(Duration::from_micros(100));
            waited += Duration::from_micros(100);
            let c = o.connects();
            if !c.is_empty() || waited > Duration::from_secs(2) {
                break c;
            }
        };
        assert_eq!(
            again,
            [2],
            "after its backoff lane 2 again; lane 5 still waits"
        );
    }
    o.connected(2);
    assert_eq!(o.connects(), [5]);
    o.connected(5);
    assert_eq!(o.connects(), Vec::<usize>::new());
    assert_eq!(o.up(), (0..8).collect::<Vec<_>>());

    // A message for a lane that is down does not jump the order either: lanes 3 and 6 drop,
    // a socket hashing to lane 6 sends, and lane 6 connects only after lane 3.
    for lane in [3, 6] {
        o.drop_lane(lane);
    }
    let port = port_on_lane(SEED_A, 6, 6000);
    let s = o.st.socket();
    o.st.bind(s, sa(ADDR_A, port)).unwrap();
    let now = o.now;
    o.st.send(now, s, Some(sa(ADDR_B, 5000)), b"6"[..].into(), true)
        .unwrap();
    assert_eq!(o.connects(), Vec::<usize>::new());
    o.pong();
    assert_eq!(o.connects(), [3]);
    o.connected(3);
    assert_eq!(o.connects(), [6]);
}

#[test]
fn lanes_connect_at_once_to_a_peer_with_sport_idx() {
    let mut o = Owner::new(true, Tunables::default());
    o.connected(0);
    assert_eq!(o.connects(), Vec::<usize>::new());
    o.pong();
    // All at once (the lane with a message queued first).
    assert_eq!(sorted(o.connects()), (1..8).collect::<Vec<_>>());
    for lane in 1..8 {
        o.connected(lane);
    }
    assert_eq!(o.connects(), Vec::<usize>::new());
    // After every lane dropped: lane 0, then the others together on the pong.
    for lane in 0..8 {
        o.drop_lane(lane);
    }
    o.wait(ms(1));
    assert_eq!(o.connects(), [0]);
    o.connected(0);
    o.pong();
    assert_eq!(sorted(o.connects()), (1..8).collect::<Vec<_>>());
    // Two lanes dropped: both reconnect on the pong, neither waits for the other.
    for lane in 1..8 {
        o.connected(lane);
    }
    for lane in [2, 5] {
        o.drop_lane(lane);
    }
    o.pong();
    assert_eq!(o.connects(), [2, 5]);
}

#[test]
fn one_lane_offered_means_one_lane_used_and_announced() {
    let tun = Tunables {
        mprds_paths: 1,
        ..Tunables::default()
    };
    let mut o = Owner::new(false, tun);
    o.connected(0);
    // Our probe announces NPATHS=1.
    let probe = rds_core::proto::driver::Frames::new(&mut o.st, o.now, o.conn, 0)
        .find_map(|t| {
            let h = HeaderRepr::from_bytes(&t.hdr).unwrap();
            h.is_probe_ping().then_some(h)
        })
        .expect("a probe ping on lane 0");
    assert_eq!(probe.exts().next(), Some(ExtHeader::Npaths(1)));
    // The peer offers 8: we use 1, and connect nothing more.
    o.pong();
    assert_eq!(o.st.npaths(o.conn), 1);
    assert_eq!(o.connects(), Vec::<usize>::new());
    // Every socket's messages go on lane 0.
    for port in 7000..7032u16 {
        let s = o.st.socket();
        o.st.bind(s, sa(ADDR_A, port)).unwrap();
        let now = o.now;
        o.st.send(now, s, Some(sa(ADDR_B, 5000)), b"y"[..].into(), true)
            .unwrap();
    }
    assert!(o.st.queued_msgs(false).iter().all(|m| m.path == 0));
    assert_eq!(o.connects(), Vec::<usize>::new());
    assert_eq!(o.up(), [0]);
}
