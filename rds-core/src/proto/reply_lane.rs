//! Answers on the request's lane (multipath RDS/TCP): per socket, the lane on which recent
//! peers' messages arrived, and the lane that then carries the socket's messages to each.
//!
//! A socket's messages ride the lane its port hashes to, so a request from socket A and the
//! answer from socket B would travel two TCP connections, and neither TCP could carry its
//! acknowledgement on the other direction's data (about twice the segments per round trip). A
//! socket that hears from a peer before it ever sent to it sends to it on the lane the peer's
//! message came on instead, and keeps that lane.
//!
//! A socket never moves its messages to a peer from one lane to another. RDS delivers each
//! (socket, destination) pair in order, and the lanes are independent streams. That the
//! socket's earlier messages were acknowledged by TCP does not make a move safe: TCP
//! acknowledges bytes that reached the peer's kernel, and a peer of this stack may read them
//! much later than a newer lane's (an accepted connection held unread until it has a lane, one
//! being read to its end, a read budget, another thread reading) — the simulator reorders
//! messages within a few hundred seeds when a socket moves once nothing is unacknowledged. So
//! the lane is decided at the socket's first message to the peer: the lane the peer was heard
//! on, if it is up (else the hash lane), and from then on it stays, also when it goes down
//! (its messages wait for it, as on the hash lane).
//!
//! Whether the socket sent to a peer before is kept without a list of peers: every message
//! that rides the hash lane sets one bit of a 256-bit filter indexed by a hash of its
//! destination. A peer whose bit is set is treated as already served on the hash lane (a
//! false positive only loses the shared lane, never the order).
//!
//! Bounds: a socket remembers at most [`REPLY_LANES_MAX`] peers. An entry is either heard (a
//! peer's lane, nothing sent yet) or bound (messages sent on a lane other than the hash lane:
//! kept until the socket closes, since forgetting it would move the peer back to the hash
//! lane). A heard peer replaces the least recently heard unbound entry; when all are bound, it
//! is not remembered and the socket answers it on the hash lane. A peer sending from many
//! ports only recycles unbound entries. Sixteen entries rather than the last peer only: a
//! socket that answers several peers in turn (one per remote task in `rds-stress -t N`, a
//! server's clients) would forget each before answering it. An entry is about 48 bytes,
//! allocated when a peer is first heard; the filter is 32 bytes.

use std::net::{IpAddr, SocketAddr};

/// Peers one socket remembers at most.
pub const REPLY_LANES_MAX: usize = 16;

/// Bits of the filter of destinations served on the hash lane.
const FILTER_BITS: usize = 256;

/// A remembered peer of a socket ([`crate::proto::Stack::reply_lanes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyLane {
    /// The peer's address and port.
    pub peer: SocketAddr,
    /// The lane its last message arrived on.
    pub heard: usize,
    /// The lane the socket's messages to it ride, once it sent one (`None`: nothing sent).
    pub bound: Option<usize>,
}

/// The connection's lanes as a socket's send sees them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lanes {
    /// The agreed number of lanes (more than 1).
    pub n: usize,
    /// The socket's hash lane on this connection.
    pub hash: usize,
}

impl Lanes {
    /// Where messages queued on `lane` are now: a lane at or above `n` was folded onto
    /// `lane & (n - 1)` when the number of lanes fell (`Stack::rehome_lane`).
    fn fold(self, lane: usize) -> usize {
        if lane < self.n {
            lane
        } else {
            lane & (self.n.max(1) - 1)
        }
    }
}

/// The lane chosen for one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pick {
    pub lane: usize,
    /// The socket's first message to the peer binds it to a lane other than its hash lane.
    pub binds: bool,
}

impl Pick {
    /// The hash lane.
    pub(crate) fn hash(lane: usize) -> Self {
        Pick { lane, binds: false }
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    peer: SocketAddr,
    heard: u8,
    bound: Option<u8>,
    /// Last time heard, for replacing the least recently heard unbound entry.
    used: u64,
}

/// One socket's remembered peers (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct ReplyLanes {
    entries: Vec<Entry>,
    /// Destinations the socket sent to on its hash lane (a filter: see the module docs).
    hashed: [u64; FILTER_BITS / 64],
    clock: u64,
}

/// The filter bit of a destination.
fn bit(peer: SocketAddr) -> usize {
    let ip = match peer.ip() {
        IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => u128::from(v6),
    };
    let mut h = (ip as u64) ^ ((ip >> 64) as u64) ^ (u64::from(peer.port()) << 48);
    // A 64-bit finaliser (splitmix64's), so that neighbouring ports spread over the bits.
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^= h >> 31;
    (h as usize) % FILTER_BITS
}

impl ReplyLanes {
    fn find(&self, peer: SocketAddr) -> Option<usize> {
        self.entries.iter().position(|e| e.peer == peer)
    }

    fn hashed(&self, peer: SocketAddr) -> bool {
        let b = bit(peer);
        self.hashed[b / 64] & (1 << (b % 64)) != 0
    }

    /// A message from `peer` reached the socket on `lane`.
    pub(crate) fn heard(&mut self, peer: SocketAddr, lane: usize) {
        self.clock += 1;
        let heard = u8::try_from(lane).unwrap_or(u8::MAX);
        if let Some(i) = self.find(peer) {
            let e = &mut self.entries[i];
            e.heard = heard;
            e.used = self.clock;
            return;
        }
        // Already served on the hash lane: nothing to remember.
        if self.hashed(peer) {
            return;
        }
        let e = Entry {
            peer,
            heard,
            bound: None,
            used: self.clock,
        };
        if self.entries.len() < REPLY_LANES_MAX {
            self.entries.push(e);
        } else if let Some(i) = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.bound.is_none())
            .min_by_key(|(_, e)| e.used)
            .map(|(i, _)| i)
        {
            self.entries[i] = e;
        }
    }

    /// The lane for a message to `peer`; `up` tells whether a lane is up.
    pub(crate) fn pick(&self, peer: SocketAddr, lanes: Lanes, up: impl Fn(usize) -> bool) -> Pick {
        let Some(e) = self.find(peer).map(|i| &self.entries[i]) else {
            return Pick::hash(lanes.hash);
        };
        if let Some(l) = e.bound {
            return Pick::hash(lanes.fold(usize::from(l)));
        }
        let heard = usize::from(e.heard);
        if heard < lanes.n && up(heard) && heard != lanes.hash {
            Pick {
                lane: heard,
                binds: true,
            }
        } else {
            Pick::hash(lanes.hash)
        }
    }

    /// A message to `peer` was queued as `pick` chose.
    pub(crate) fn sent(&mut self, peer: SocketAddr, pick: Pick) {
        let i = self.find(peer);
        if pick.binds {
            if let Some(i) = i {
                self.entries[i].bound = Some(u8::try_from(pick.lane).unwrap_or(u8::MAX));
            }
            return;
        }
        match i {
            // Bound to a lane: it stays there.
            Some(i) if self.entries[i].bound.is_some() => {}
            // The hash lane, from now on for good: the filter says so, the entry can go.
            Some(i) => {
                self.entries.swap_remove(i);
                self.mark_hashed(peer);
            }
            None => self.mark_hashed(peer),
        }
    }

    fn mark_hashed(&mut self, peer: SocketAddr) {
        let b = bit(peer);
        self.hashed[b / 64] |= 1 << (b % 64);
    }

    /// The remembered peers, in slot order.
    pub(crate) fn entries(&self) -> impl Iterator<Item = ReplyLane> + '_ {
        self.entries.iter().map(|e| ReplyLane {
            peer: e.peer,
            heard: usize::from(e.heard),
            bound: e.bound.map(usize::from),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn peer(port: u16) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), port)
    }

    const L: Lanes = Lanes { n: 8, hash: 5 };

    fn all_up(_: usize) -> bool {
        true
    }

    fn send(r: &mut ReplyLanes, port: u16, up: impl Fn(usize) -> bool) -> usize {
        let p = r.pick(peer(port), L, up);
        r.sent(peer(port), p);
        p.lane
    }

    #[test]
    fn heard_first_binds_to_the_heard_lane_for_good() {
        let mut r = ReplyLanes::default();
        r.heard(peer(1), 2);
        assert_eq!(
            r.pick(peer(1), L, all_up),
            Pick {
                lane: 2,
                binds: true
            }
        );
        assert_eq!(send(&mut r, 1, all_up), 2);
        // Heard later on another lane, or lane 2 down: the messages stay on lane 2.
        r.heard(peer(1), 6);
        assert_eq!(send(&mut r, 1, all_up), 2);
        assert_eq!(send(&mut r, 1, |l| l != 2), 2);
        assert_eq!(
            r.entries().collect::<Vec<_>>(),
            [ReplyLane {
                peer: peer(1),
                heard: 6,
                bound: Some(2)
            }]
        );
    }

    #[test]
    fn sent_first_stays_on_the_hash_lane() {
        let mut r = ReplyLanes::default();
        assert_eq!(send(&mut r, 1, all_up), 5);
        r.heard(peer(1), 2);
        assert_eq!(r.entries().count(), 0, "nothing to remember");
        assert_eq!(send(&mut r, 1, all_up), 5);
        // Heard first but the lane is down at the first send: the hash lane, for good.
        r.heard(peer(3), 2);
        assert_eq!(send(&mut r, 3, |l| l != 2), 5);
        assert_eq!(r.entries().count(), 0);
        r.heard(peer(3), 2);
        assert_eq!(send(&mut r, 3, all_up), 5);
        // Heard on the hash lane itself: the same.
        r.heard(peer(4), 5);
        assert_eq!(send(&mut r, 4, all_up), 5);
        r.heard(peer(4), 1);
        assert_eq!(send(&mut r, 4, all_up), 5);
        // Lanes at or above n are not used.
        r.heard(peer(9), 7);
        let four = Lanes { n: 4, hash: 1 };
        assert_eq!(r.pick(peer(9), four, all_up), Pick::hash(1));
    }

    #[test]
    fn fewer_lanes_fold_a_bound_lane() {
        let mut r = ReplyLanes::default();
        r.heard(peer(1), 6);
        assert_eq!(send(&mut r, 1, all_up), 6);
        // Down to 4 lanes: lane 6's messages went to lane 2; later ones follow them there.
        let four = Lanes { n: 4, hash: 1 };
        assert_eq!(r.pick(peer(1), four, all_up), Pick::hash(2));
    }

    #[test]
    fn bounded_and_bound_entries_stay() {
        let mut r = ReplyLanes::default();
        r.heard(peer(1), 2);
        assert_eq!(send(&mut r, 1, all_up), 2);
        // Never the hash lane 5 (a peer heard there needs no entry once answered).
        let lane = |port: u16| [0, 1, 2, 3, 4, 6, 7][usize::from(port % 7)];
        for port in 100..10_100 {
            r.heard(peer(port), lane(port));
        }
        let e: Vec<_> = r.entries().collect();
        assert_eq!(e.len(), REPLY_LANES_MAX);
        assert!(e.iter().any(|x| x.peer == peer(1) && x.bound == Some(2)));
        // The others are the most recently heard peers.
        for port in 10_100 - (REPLY_LANES_MAX as u16 - 1)..10_100 {
            assert!(e.iter().any(|x| x.peer == peer(port)), "{port}");
        }
        // Every entry bound: a newcomer is not remembered and gets the hash lane.
        for port in 10_100 - (REPLY_LANES_MAX as u16 - 1)..10_100 {
            send(&mut r, port, all_up);
        }
        assert!(r.entries().all(|x| x.bound == Some(x.heard)));
        r.heard(peer(7), 4);
        assert!(r.entries().all(|x| x.peer != peer(7)));
        assert!(r.entries().count() <= REPLY_LANES_MAX);
        assert_eq!(send(&mut r, 7, all_up), 5);
    }

    #[test]
    fn the_filter_spreads_neighbouring_ports() {
        let bits: std::collections::BTreeSet<usize> = (4000..4064).map(|p| bit(peer(p))).collect();
        assert!(bits.len() > 48, "{}", bits.len());
    }
}
