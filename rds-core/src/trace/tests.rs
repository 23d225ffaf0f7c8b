//! Unit tests of the capture writer and reader; the helpers that build frames and read
//! captures back serve the node's tap tests too.

use std::net::{IpAddr, SocketAddr};

use bytes::Bytes;
use pcap_file::pcap::PcapReader;

use super::frame::RecordRef;
use super::*;

const T0: u64 = 1_700_000_000_123_456_789;

pub(crate) fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// An RDS header built field by field (independent of `crate::wire`), then `payload`.
pub(crate) fn frame(seq: u64, sport: u16, dport: u16, flags: u8, payload: &[u8]) -> Bytes {
    let mut f = vec![0u8; 48];
    f[0..8].copy_from_slice(&seq.to_be_bytes());
    f[16..20].copy_from_slice(&(payload.len() as u32).to_be_bytes());
    f[20..22].copy_from_slice(&sport.to_be_bytes());
    f[22..24].copy_from_slice(&dport.to_be_bytes());
    f[24] = flags;
    f.extend_from_slice(payload);
    Bytes::from(f)
}

pub(crate) fn pattern(n: usize, salt: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt))
        .collect()
}

pub(crate) fn cfg(mss: u16, hold_ns: u64) -> TcpCaptureConfig {
    TcpCaptureConfig {
        mss_v4: mss,
        mss_v6: mss,
        hold_ns,
        fixed_isn: Some(1000),
    }
}

fn write_tcp(cfg: TcpCaptureConfig, recs: &[TraceRecord]) -> Vec<u8> {
    let mut sink = PcapSink::ethernet(Vec::new(), cfg).unwrap();
    for r in recs {
        sink.write(r).unwrap();
    }
    sink.finish().unwrap()
}

/// (timestamp ns, captured bytes, length on the wire) of every packet, read with pcap-file.
pub(crate) fn packets(file: &[u8]) -> Vec<(u64, Vec<u8>, u32)> {
    let mut r = PcapReader::new(file).unwrap();
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        out.push((p.timestamp.as_nanos() as u64, p.data.to_vec(), p.orig_len));
    }
    out
}

/// A parsed synthesized IPv4 or IPv6 TCP segment.
#[derive(Debug)]
struct Seg {
    ts: u64,
    src: SocketAddr,
    dst: SocketAddr,
    seq: u32,
    ack: u32,
    flags: u8,
    payload: Vec<u8>,
    reported: usize,
    csum: u16,
    csum_ok: bool,
}

fn internet_sum(parts: &[&[u8]]) -> u16 {
    let mut all = Vec::new();
    for p in parts {
        all.extend_from_slice(p);
    }
    if all.len() % 2 == 1 {
        all.push(0);
    }
    let mut s: u32 = 0;
    for w in all.chunks(2) {
        s += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

fn segs(file: &[u8]) -> Vec<Seg> {
    packets(file)
        .into_iter()
        .map(|(ts, d, orig)| {
            let (src_ip, dst_ip, tcp, pseudo): (IpAddr, IpAddr, usize, Vec<u8>) = if d[12..14]
                == [0x08, 0x00]
            {
                let ip = &d[14..34];
                assert_eq!(internet_sum(&[ip]), 0xffff, "IPv4 header checksum");
                let s: [u8; 4] = ip[12..16].try_into().unwrap();
                let t: [u8; 4] = ip[16..20].try_into().unwrap();
                let tcp_len = u16::from_be_bytes([ip[2], ip[3]]) - 20;
                let mut ps = ip[12..20].to_vec();
                ps.extend_from_slice(&[0, 6]);
                ps.extend_from_slice(&tcp_len.to_be_bytes());
                (s.into(), t.into(), 34, ps)
            } else {
                assert_eq!(d[12..14], [0x86, 0xdd]);
                let ip = &d[14..54];
                let s: [u8; 16] = ip[8..24].try_into().unwrap();
                let t: [u8; 16] = ip[24..40].try_into().unwrap();
                let mut ps = ip[8..40].to_vec();
                ps.extend_from_slice(&u32::from(u16::from_be_bytes([ip[4], ip[5]])).to_be_bytes());
                ps.extend_from_slice(&[0, 0, 0, 6]);
                (s.into(), t.into(), 54, ps)
            };
            let t = &d[tcp..];
            let be16 = |o: usize| u16::from_be_bytes([t[o], t[o + 1]]);
            let be32 = |o: usize| u32::from_be_bytes([t[o], t[o + 1], t[o + 2], t[o + 3]]);
            assert_eq!(t[12], 0x50);
            Seg {
                ts,
                src: SocketAddr::new(src_ip, be16(0)),
                dst: SocketAddr::new(dst_ip, be16(2)),
                seq: be32(4),
                ack: be32(8),
                flags: t[13],
                payload: t[20..].to_vec(),
                reported: orig as usize - tcp - 20,
                csum: be16(16),
                csum_ok: internet_sum(&[&pseudo, t]) == 0xffff,
            }
        })
        .collect()
}

fn tcp_rec(ts: u64, dir: Direction, lane: u8, local: &str, peer: &str, f: Bytes) -> TraceRecord {
    TraceRecord::tcp(ts, dir, lane, sa(local), sa(peer), f)
}

#[test]
fn ipv4_segment_byte_exact() {
    let rec = tcp_rec(
        T0,
        Direction::Tx,
        0,
        "10.0.0.1:40000",
        "10.0.0.2:16385",
        frame(1, 4000, 5000, 0, b"ABCD"),
    );
    let file = write_tcp(cfg(1448, 0), &[rec]);
    #[rustfmt::skip]
    let expected: Vec<u8> = vec![
        // pcap file header: nanosecond magic, 2.4, zone 0, accuracy 0, snaplen 262144, Ethernet
        0x4d, 0x3c, 0xb2, 0xa1, 0x02, 0x00, 0x04, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x04, 0x00, 0x01, 0x00, 0x00, 0x00,
        // record header: 1700000000 s, 123456789 ns, 106 captured, 106 on the wire
        0x00, 0xf1, 0x53, 0x65, 0x15, 0xcd, 0x5b, 0x07,
        0x6a, 0x00, 0x00, 0x00, 0x6a, 0x00, 0x00, 0x00,
        // Ethernet: peer MAC, local MAC, IPv4
        0x02, 0x01, 0x0a, 0x00, 0x00, 0x02,
        0x02, 0x00, 0x0a, 0x00, 0x00, 0x01,
        0x08, 0x00,
        // IPv4: IHL 5, total 92, ID 1, DF, TTL 64, TCP, checksum 0x2699, 10.0.0.1 -> 10.0.0.2
        0x45, 0x00, 0x00, 0x5c, 0x00, 0x01, 0x40, 0x00,
        0x40, 0x06, 0x26, 0x99, 0x0a, 0x00, 0x00, 0x01,
        0x0a, 0x00, 0x00, 0x02,
        // TCP: 40000 -> 16385, seq 1000, ack 1000, offset 5, ACK|PSH, window 65535,
        // checksum 0x0fd1, urgent 0
        0x9c, 0x40, 0x40, 0x01, 0x00, 0x00, 0x03, 0xe8,
        0x00, 0x00, 0x03, 0xe8, 0x50, 0x18, 0xff, 0xff,
        0x0f, 0xd1, 0x00, 0x00,
        // RDS header: seq 1, ack 0, len 4, 4000 -> 5000, flags 0, credit 0, padding,
        // csum 0, no extensions
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x04, 0x0f, 0xa0, 0x13, 0x88,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        // payload
        b'A', b'B', b'C', b'D',
    ];
    assert_eq!(file, expected);
}

#[test]
fn ipv6_segment_headers_and_checksum() {
    let rec = tcp_rec(
        T0,
        Direction::Rx,
        2,
        "[fd00::1]:16385",
        "[fd00::2:a0b:c0d]:40002",
        frame(9, 1, 0, 0, &[]),
    );
    let file = write_tcp(cfg(1428, 0), &[rec]);
    let p = packets(&file);
    assert_eq!(p.len(), 1);
    let d = &p[0].1;
    #[rustfmt::skip]
    let expected_headers: Vec<u8> = vec![
        // received: from the peer's MAC (02:01 + last 4 address bytes) to ours (02:00 ...)
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01,
        0x02, 0x01, 0x0a, 0x0b, 0x0c, 0x0d,
        0x86, 0xdd,
        // IPv6: version 6, class 0, flow 0, payload 68, TCP, hop limit 64
        0x60, 0x00, 0x00, 0x00, 0x00, 0x44, 0x06, 0x40,
        0xfd, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x02, 0x0a, 0x0b, 0x0c, 0x0d,
        0xfd, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01,
        // TCP 40002 -> 16385, seq 1000, ack 1000, ACK|PSH
        0x9c, 0x42, 0x40, 0x01, 0x00, 0x00, 0x03, 0xe8,
        0x00, 0x00, 0x03, 0xe8, 0x50, 0x18, 0xff, 0xff,
    ];
    assert_eq!(&d[..expected_headers.len()], &expected_headers[..]);
    assert_eq!(d.len(), 14 + 40 + 20 + 48);
    let s = segs(&file);
    assert!(s[0].csum_ok);
    assert_ne!(s[0].csum, 0);
}

/// Reassembles one direction of a synthesized capture and checks sequence continuity.
fn stream_of(s: &[Seg], src: SocketAddr) -> Vec<u8> {
    let mut out = Vec::new();
    let mut next: Option<u32> = None;
    let mut dst = None;
    for seg in s.iter().filter(|g| g.src == src) {
        assert_eq!(*dst.get_or_insert(seg.dst), seg.dst, "one connection");
        if let Some(n) = next {
            assert_eq!(seg.seq, n, "contiguous sequence numbers");
        }
        next = Some(seg.seq.wrapping_add(seg.reported as u32));
        out.extend_from_slice(&seg.payload);
    }
    out
}

#[test]
fn mss_splitting_and_sequence_continuity() {
    let sizes = [0usize, 1, 17, 52, 100, 300, 1000, 4096];
    let mut recs = Vec::new();
    let mut expected = Vec::new();
    for (i, n) in sizes.iter().enumerate() {
        let f = frame(i as u64 + 1, 4000, 5000, 0, &pattern(*n, i as u8));
        expected.extend_from_slice(&f);
        recs.push(tcp_rec(
            T0 + i as u64,
            Direction::Tx,
            0,
            "10.0.0.1:40000",
            "10.0.0.2:16385",
            f,
        ));
    }
    let file = write_tcp(cfg(100, 1_000_000), &recs);
    let s = segs(&file);
    assert_eq!(stream_of(&s, sa("10.0.0.1:40000")), expected);
    // Every segment but the last ends at a multiple of the MSS (offset from the ISN).
    let total = expected.len();
    for seg in &s {
        let off = seg.seq.wrapping_sub(1000) as usize;
        assert!(seg.csum_ok);
        assert!(seg.reported <= 100);
        if off + seg.reported != total {
            assert_eq!(
                (off + seg.reported) % 100,
                0,
                "cut at a multiple of the MSS"
            );
            assert_eq!(seg.reported, 100 - off % 100);
        }
    }
    assert_eq!(s.len(), total.div_ceil(100));
    // PSH exactly on segments that end at a frame end.
    let mut ends = std::collections::HashSet::new();
    let mut at = 0;
    for n in sizes {
        at += 48 + n;
        ends.insert(at);
    }
    for seg in &s {
        let end = seg.seq.wrapping_sub(1000) as usize + seg.reported;
        assert_eq!(seg.flags & 0x08 != 0, ends.contains(&end), "PSH at {end}");
        assert_eq!(seg.flags & 0x10, 0x10);
    }
}

#[test]
fn header_straddles_segments_and_timestamps_follow_the_newest_record() {
    // MSS 1448: the first frame is 1418 bytes, so the second header's first 30 bytes end
    // segment 1 and its other 18 bytes start segment 2. 4466 bytes in all.
    let a = frame(1, 4000, 5000, 0, &pattern(1370, 1));
    let b = frame(2, 4000, 5000, 0, &pattern(3000, 2));
    let recs = [
        tcp_rec(
            T0,
            Direction::Tx,
            0,
            "10.0.0.1:40000",
            "10.0.0.2:16385",
            a.clone(),
        ),
        tcp_rec(
            T0 + 500,
            Direction::Tx,
            0,
            "10.0.0.1:40000",
            "10.0.0.2:16385",
            b.clone(),
        ),
    ];
    let file = write_tcp(cfg(1448, 1_000_000), &recs);
    let s = segs(&file);
    let lens: Vec<usize> = s.iter().map(|g| g.payload.len()).collect();
    assert_eq!(lens, vec![1448, 1448, 1448, 4466 - 3 * 1448]);
    assert_eq!(&s[0].payload[1418..], &b[..30]);
    assert_eq!(&s[1].payload[..18], &b[30..48]);
    // Segment 1 was completed by the second record; the tail was flushed at the end.
    assert_eq!(
        s.iter().map(|g| g.ts).collect::<Vec<_>>(),
        vec![T0 + 500; 4]
    );
    // The reader puts frame 1 in packet 1 and frame 2 in packet 4.
    let frames: Vec<_> = PcapFrames::new(&file[..])
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(frames.len(), 2);
    assert_eq!((frames[0].frame_no, frames[0].data.clone()), (1, a));
    assert_eq!((frames[1].frame_no, frames[1].data.clone()), (4, b));
    assert_eq!(frames[0].ts_ns, T0 + 500);
}

#[test]
fn hold_time_and_ack_numbers() {
    // A ping at T0 and its pong 5 ms later: the ping's segment is not held past the hold time.
    let ping = frame(1, 4000, 0, 0, &[]);
    let pong = frame(1, 0, 4000, 0, &[]);
    let data = frame(2, 4000, 5000, 0, &pattern(10, 3));
    let recs = [
        tcp_rec(
            T0,
            Direction::Tx,
            0,
            "10.0.0.1:40000",
            "10.0.0.2:16385",
            ping,
        ),
        tcp_rec(
            T0 + 5_000_000,
            Direction::Rx,
            0,
            "10.0.0.1:40000",
            "10.0.0.2:16385",
            pong,
        ),
        tcp_rec(
            T0 + 5_000_100,
            Direction::Tx,
            0,
            "10.0.0.1:40000",
            "10.0.0.2:16385",
            data,
        ),
    ];
    let mut c = cfg(1448, 1_000_000);
    c.fixed_isn = None;
    let file = write_tcp(c, &recs);
    let s = segs(&file);
    let view: Vec<(SocketAddr, u64, usize)> =
        s.iter().map(|g| (g.src, g.ts, g.payload.len())).collect();
    assert_eq!(
        view,
        vec![
            (sa("10.0.0.1:40000"), T0, 48),
            (sa("10.0.0.2:16385"), T0 + 5_000_000, 48),
            (sa("10.0.0.1:40000"), T0 + 5_000_100, 58),
        ]
    );
    // Hashed ISNs differ per direction; ACKs are the other side's next sequence number.
    let (c2s, s2c) = (s[0].seq, s[1].seq);
    assert_ne!(c2s, s2c);
    assert_eq!(s[0].ack, s2c);
    assert_eq!(s[1].ack, c2s.wrapping_add(48));
    assert_eq!(s[2].seq, c2s.wrapping_add(48));
    assert_eq!(s[2].ack, s2c.wrapping_add(48));
}

#[test]
fn snapped_frame_is_one_cut_segment_then_a_gap() {
    let big = frame(5, 4000, 5000, 0, &pattern(100_000, 4));
    let after = frame(6, 4000, 5000, 0, &pattern(20, 5));
    let small = frame(7, 4000, 5000, 0, &pattern(500, 6));
    let l = "10.0.0.1:40000";
    let p = "10.0.0.2:16385";
    let recs = [
        tcp_rec(
            T0,
            Direction::Tx,
            0,
            l,
            p,
            frame(4, 4000, 5000, 0, &pattern(30, 7)),
        ),
        tcp_rec(T0 + 1, Direction::Tx, 0, l, p, big.clone()).snapped(200),
        tcp_rec(T0 + 2, Direction::Tx, 0, l, p, after.clone()),
        tcp_rec(T0 + 3, Direction::Tx, 0, l, p, small.clone()).snapped(100),
        tcp_rec(T0 + 4, Direction::Tx, 0, l, p, after.clone()),
    ];
    let file = write_tcp(cfg(1448, 1_000_000), &recs);
    let s = segs(&file);
    let view: Vec<(u32, usize, usize, bool)> = s
        .iter()
        .map(|g| (g.seq - 1000, g.payload.len(), g.reported, g.csum == 0))
        .collect();
    assert_eq!(
        view,
        vec![
            // the held 78-byte frame goes first, complete, with a checksum
            (0, 78, 78, false),
            // the snapped frame: 200 bytes captured of an MSS-sized segment; no checksum
            (78, 200, 1448, true),
            // the next frame starts at the snapped frame's end
            (78 + 100_048, 68, 68, false),
            // a snapped frame shorter than the MSS reports the whole frame
            (78 + 100_048 + 68, 100, 548, true),
            (78 + 100_048 + 68 + 548, 68, 68, false),
        ]
    );
    assert!(s.iter().filter(|g| g.csum != 0).all(|g| g.csum_ok));
    let pk = packets(&file);
    assert_eq!((pk[1].1.len(), pk[1].2), (54 + 200, 54 + 1448));

    let frames: Vec<_> = PcapFrames::new(&file[..])
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let view: Vec<(u64, u32, usize, bool)> = frames
        .iter()
        .map(|f| (f.frame_no, f.orig_len, f.data.len(), f.is_truncated()))
        .collect();
    assert_eq!(
        view,
        vec![
            (1, 78, 78, false),
            (2, 100_048, 200, true),
            (3, 68, 68, false),
            (4, 548, 100, true),
            (5, 68, 68, false),
        ]
    );
    assert_eq!(frames[1].data, big.slice(..200));
    assert_eq!(frames[3].data, small.slice(..100));
    assert_eq!(frames[1].header().unwrap().seq, 5);
}

#[test]
fn very_long_snap_keeps_the_segment_cut() {
    let big = frame(5, 4000, 5000, 0, &pattern(200_000, 4));
    let rec = tcp_rec(
        T0,
        Direction::Tx,
        0,
        "10.0.0.1:40000",
        "10.0.0.2:16385",
        big,
    )
    .snapped(100_000);
    let file = write_tcp(cfg(1448, 0), &[rec]);
    let s = segs(&file);
    assert_eq!((s[0].payload.len(), s[0].reported), (65494, 65495));
}

#[test]
fn round_trip_lanes_directions_families() {
    let mut recs = Vec::new();
    let mut ts = T0;
    let conns = [
        ("10.0.0.1:40000", "10.0.0.2:16385", 0u8),
        ("10.0.0.1:40001", "10.0.0.2:16385", 1),
        ("10.0.0.1:40003", "10.0.0.2:16385", 3),
        ("[fd00::1]:16385", "[fd00::2]:50007", 7),
    ];
    for i in 0..60u64 {
        let (l, p, lane) = conns[(i % 4) as usize];
        let dir = if i % 3 == 0 {
            Direction::Rx
        } else {
            Direction::Tx
        };
        let n = [0usize, 5, 48, 1500, 9000, 70_000][(i % 6) as usize];
        let f = frame(i, 4000 + i as u16, 5000, 0, &pattern(n, i as u8));
        let mut r = tcp_rec(ts, dir, lane, l, p, f);
        if i % 13 == 12 {
            r = r.snapped(300);
        }
        recs.push(r);
        ts += 2_000_000; // beyond the hold time: each record's tail is its own segment
    }
    let file = write_tcp(TcpCaptureConfig::default(), &recs);
    let mut back: Vec<TraceRecord> = PcapFrames::new(&file[..])
        .unwrap()
        .map(|f| f.unwrap().to_record().unwrap())
        .collect();
    back.sort_by_key(|r| r.ts_ns);
    assert_eq!(back, recs);
}

#[test]
fn erf_record_byte_exact() {
    // An IB ACK-only frame with its header checksum, solicited, received from the peer.
    let mut f = vec![0u8; 48];
    f[8..16].copy_from_slice(&7u64.to_be_bytes());
    let c = crate::wire::checksum(&f);
    f[30..32].copy_from_slice(&c.to_be_bytes());
    let rec = TraceRecord::ib(
        1_700_000_000_500_000_000,
        Direction::Rx,
        "10.1.0.1".parse().unwrap(),
        "10.1.0.2".parse().unwrap(),
        Transport::Ib {
            local_qpn: 0x000123,
            peer_qpn: 0x000456,
            local_lid: 1,
            peer_lid: 2,
            solicited: true,
        },
        Bytes::from(f.clone()),
    );
    let mut sink = PcapSink::erf(Vec::new()).unwrap();
    sink.write(&rec).unwrap();
    let file = sink.finish().unwrap();
    assert_eq!(&file[20..24], &[197, 0, 0, 0]);
    let p = packets(&file);
    assert_eq!(p.len(), 1);
    let d = &p[0].1;
    #[rustfmt::skip]
    let mut expected: Vec<u8> = vec![
        // ERF: timestamp 1700000000 s + 0x80000000 / 2^32, type 21, flags varlen | iface 1,
        // rlen 90, loss 0, wlen 74
        0x00, 0x00, 0x00, 0x80, 0x00, 0xf1, 0x53, 0x65,
        0x15, 0x05, 0x00, 0x5a, 0x00, 0x00, 0x00, 0x4a,
        // LRH: VL 0, LNH 2, DLID 1 (local), PktLen 18 words, SLID 2 (peer)
        0x00, 0x02, 0x00, 0x01, 0x00, 0x12, 0x00, 0x02,
        // BTH: SEND Only, SE, pad 0, P_Key ffff, DestQP 0x123 (local), AckReq, PSN 0
        0x04, 0x80, 0xff, 0xff, 0x00, 0x00, 0x01, 0x23,
        0x80, 0x00, 0x00, 0x00,
    ];
    expected.extend_from_slice(&f);
    assert_eq!(&d[..expected.len()], &expected[..]);
    assert_eq!(d.len(), expected.len() + 6);
    assert_eq!(p[0].2, 90);
    // CRCs against a bitwise reference: ICRC over LRH..payload with VL and BTH byte 4 set to
    // ones, VCRC over LRH..ICRC; both least significant byte first.
    let pkt = &d[16..];
    let mut masked = pkt[..68].to_vec();
    masked[0] |= 0xf0;
    masked[12] = 0xff;
    let mut c32 = !0u32;
    for b in &masked {
        c32 ^= u32::from(*b);
        for _ in 0..8 {
            c32 = if c32 & 1 == 1 {
                (c32 >> 1) ^ 0xEDB8_8320
            } else {
                c32 >> 1
            };
        }
    }
    assert_eq!(&pkt[68..72], &(!c32).to_le_bytes());
    let mut c16 = !0u16;
    for b in &pkt[..72] {
        c16 ^= u16::from(*b);
        for _ in 0..8 {
            c16 = if c16 & 1 == 1 {
                (c16 >> 1) ^ 0xD008
            } else {
                c16 >> 1
            };
        }
    }
    assert_eq!(&pkt[72..74], &(!c16).to_le_bytes());
}

#[test]
fn erf_padding_psn_and_reader() {
    let ib = |solicited| Transport::Ib {
        local_qpn: 0x10,
        peer_qpn: 0xabcdef,
        local_lid: 0x11,
        peer_lid: 0x22,
        solicited,
    };
    let l: IpAddr = "10.1.0.1".parse().unwrap();
    let p: IpAddr = "10.1.0.2".parse().unwrap();
    let recs = vec![
        TraceRecord::ib(
            T0,
            Direction::Tx,
            l,
            p,
            ib(false),
            frame(1, 4000, 5000, 0, &pattern(4096, 1)).slice(..48 + 4096),
        ),
        TraceRecord::ib(
            T0 + 1,
            Direction::Tx,
            l,
            p,
            ib(true),
            frame(1, 4000, 5000, 0, &pattern(5, 2)),
        ),
        TraceRecord::ib(
            T0 + 2,
            Direction::Rx,
            l,
            p,
            ib(true),
            frame(1, 0, 4000, 0, &[]),
        ),
        TraceRecord::ib(
            T0 + 3,
            Direction::Tx,
            l,
            p,
            ib(true),
            frame(2, 4000, 5000, 0, &pattern(3001, 3)),
        )
        .snapped(64),
    ];
    // The first record claims h_len 4096 for a 4096-byte fragment, the second h_len 5.
    let mut sink = PcapSink::erf(Vec::new()).unwrap();
    for r in &recs {
        sink.write(r).unwrap();
    }
    let file = sink.finish().unwrap();
    let pk = packets(&file);
    let bth = |i: usize| &pk[i].1[16 + 8..16 + 20];
    // pad counts: 4144 % 4 = 0, 53 -> 3, 48 -> 0
    assert_eq!(bth(0)[1], 0x00);
    assert_eq!(bth(1)[1], 0x80 | 0x30);
    assert_eq!(bth(2)[1], 0x80);
    // PSN counts per sending QP: Tx 0, 1, 2; Rx 0. DestQP is the receiver's.
    assert_eq!(&bth(0)[5..8], &[0xab, 0xcd, 0xef]);
    assert_eq!(&bth(2)[5..8], &[0x00, 0x00, 0x10]);
    let psns: Vec<u32> = (0..4)
        .map(|i| u32::from_be_bytes(bth(i)[8..12].try_into().unwrap()) & 0xffffff)
        .collect();
    assert_eq!(psns, vec![0, 1, 0, 2]);
    // The snapped fragment is a complete packet of its 64 captured bytes (ERF header,
    // LRH + BTH, fragment, ICRC + VCRC); the ERF wire length is the real packet's (fragment
    // of 3049 bytes padded to 3052).
    assert_eq!(
        (pk[3].1.len(), pk[3].2),
        (16 + 20 + 64 + 6, 16 + 20 + 3052 + 6)
    );
    assert_eq!(&pk[3].1[10..12], &[0, 16 + 20 + 64 + 6]);
    assert_eq!(&pk[3].1[14..16], &((20 + 3052 + 6) as u16).to_be_bytes());
    assert_eq!(&pk[3].1[16 + 4..16 + 6], &[0, (20 + 64 + 4) / 4]);

    let frames: Vec<_> = PcapFrames::new(&file[..])
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(frames.len(), 4);
    for (f, r) in frames.iter().zip(&recs) {
        assert_eq!(f.ts_ns, r.ts_ns);
        assert_eq!(f.dir, Some(r.dir));
        assert_eq!(f.orig_len, r.orig_len);
        assert_eq!(f.data, r.data);
    }
    assert_eq!(
        frames[2].link,
        FrameLink::Ib {
            slid: 0x22,
            dlid: 0x11,
            dest_qpn: 0x10,
            psn: 0,
            opcode: 4,
            solicited: true
        }
    );
}

#[test]
fn invalid_records_are_refused() {
    let good = tcp_rec(
        T0,
        Direction::Tx,
        0,
        "10.0.0.1:40000",
        "10.0.0.2:16385",
        frame(1, 1, 2, 0, b"xy"),
    );
    let mut sink = PcapSink::ethernet(Vec::new(), TcpCaptureConfig::default()).unwrap();
    let mut r = good.clone();
    r.orig_len = 51;
    assert!(matches!(
        sink.write(&r),
        Err(TraceError::Record(RecordError::LengthMismatch {
            h_len: 2,
            orig_len: 51
        }))
    ));
    let mut r = good.clone();
    r.data.truncate(40);
    assert!(matches!(
        sink.write(&r),
        Err(TraceError::Record(RecordError::HeaderNotCaptured(40)))
    ));
    let mut r = good.clone();
    r.lane = 8;
    assert!(matches!(
        sink.write(&r),
        Err(TraceError::Record(RecordError::BadLane(8)))
    ));
    let mut r = good.clone();
    r.transport = Transport::Tcp {
        local: sa("10.0.0.1:40000"),
        peer: sa("[::1]:16385"),
    };
    assert!(matches!(
        sink.write(&r),
        Err(TraceError::Record(RecordError::MixedAddressFamilies))
    ));
    let mut r = good.clone();
    r.ts_ns = (u64::from(u32::MAX) + 1) * 1_000_000_000;
    assert!(matches!(sink.write(&r), Err(TraceError::Timestamp(_))));
    let ib = TraceRecord::ib(
        T0,
        Direction::Tx,
        good.local,
        good.peer,
        Transport::Ib {
            local_qpn: 1,
            peer_qpn: 5,
            local_lid: 1,
            peer_lid: 2,
            solicited: false,
        },
        frame(1, 1, 2, 0, b"xy"),
    );
    assert!(matches!(
        sink.write(&ib),
        Err(TraceError::WrongLink {
            record: "ib",
            sink: "ethernet"
        })
    ));
    let mut esink = PcapSink::erf(Vec::new()).unwrap();
    assert!(matches!(
        esink.write(&ib),
        Err(TraceError::Record(RecordError::BadQpn(1)))
    ));
    assert!(matches!(
        esink.write(&good),
        Err(TraceError::WrongLink { .. })
    ));
    sink.write(&good).unwrap();
    assert_eq!(sink.stats().records, 1);
    assert!(PcapSink::ethernet(Vec::new(), cfg(0, 0)).is_err());
}

/// A small xorshift generator (deterministic garbage).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn read_all(file: &[u8]) -> usize {
    match PcapFrames::new(file) {
        Ok(r) => r.count(),
        Err(_) => 0,
    }
}

#[test]
fn reader_survives_garbage() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    // A valid capture of both kinds to mutate.
    let mut recs = Vec::new();
    for i in 0..20u64 {
        let n = [0usize, 7, 3000, 40_000][(i % 4) as usize];
        recs.push(tcp_rec(
            T0 + i * 10,
            if i % 2 == 0 {
                Direction::Tx
            } else {
                Direction::Rx
            },
            0,
            "10.0.0.1:40000",
            "10.0.0.2:16385",
            frame(i, 4000, 5000, 0, &pattern(n, i as u8)),
        ));
    }
    let tcp_file = write_tcp(cfg(536, 1000), &recs);
    let mut esink = PcapSink::erf(Vec::new()).unwrap();
    for i in 0..10u32 {
        esink
            .write(&TraceRecord::ib(
                T0,
                Direction::Tx,
                recs[0].local,
                recs[0].peer,
                Transport::Ib {
                    local_qpn: 2,
                    peer_qpn: 3 + i,
                    local_lid: 1,
                    peer_lid: 2,
                    solicited: true,
                },
                frame(u64::from(i), 1, 2, 0, &pattern(i as usize * 300, 1)),
            ))
            .unwrap();
    }
    let erf_file = esink.finish().unwrap();
    assert!(read_all(&tcp_file) > 0);
    for base in [&tcp_file, &erf_file] {
        for round in 0..400 {
            let mut f = base.clone();
            let flips = 1 + (rng.next() % 40) as usize;
            for _ in 0..flips {
                // Mostly hit headers: packets start every ~1.5 KiB.
                let at = if round % 2 == 0 {
                    24 + (rng.next() as usize % (f.len() - 24))
                } else {
                    (rng.next() as usize % 200).min(f.len() - 1)
                };
                f[at] = rng.next() as u8;
            }
            if round % 7 == 0 {
                let cut = rng.next() as usize % f.len();
                f.truncate(cut);
            }
            read_all(&f);
        }
    }
    // Pure garbage behind each supported link type, and garbage files.
    for lt in [1u32, 101, 113, 197, 228, 229, 276, 999] {
        for _ in 0..50 {
            let mut f = tcp_file[..24].to_vec();
            f[20..24].copy_from_slice(&lt.to_le_bytes());
            for _ in 0..(rng.next() % 30) {
                let len = (rng.next() % 120) as u32;
                f.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
                f.extend_from_slice(&len.to_le_bytes());
                f.extend_from_slice(&(len + (rng.next() % 3) as u32).to_le_bytes());
                for _ in 0..len {
                    f.push(rng.next() as u8);
                }
            }
            read_all(&f);
        }
    }
    for n in 0..64 {
        let f: Vec<u8> = (0..n * 7).map(|_| rng.next() as u8).collect();
        read_all(&f);
    }
}

#[test]
fn reader_reports_errors_and_keeps_going() {
    // Frame 1 complete, then a segment whose h_len is 16 MiB, then a new segment with a
    // valid frame.
    let good = frame(1, 4000, 5000, 0, b"abc");
    let rec = tcp_rec(
        T0,
        Direction::Tx,
        0,
        "10.0.0.1:40000",
        "10.0.0.2:16385",
        good.clone(),
    );
    let mut file = write_tcp(cfg(1448, 0), std::slice::from_ref(&rec));
    let one = packets(&file)[0].1.clone();
    let add = |file: &mut Vec<u8>, pkt: &[u8]| {
        file.extend_from_slice(&[0; 8]);
        file.extend_from_slice(&(pkt.len() as u32).to_le_bytes());
        file.extend_from_slice(&(pkt.len() as u32).to_le_bytes());
        file.extend_from_slice(pkt);
    };
    // Same stream, next sequence number, bogus h_len.
    let mut bad = one.clone();
    let seq = u32::from_be_bytes(bad[38..42].try_into().unwrap()).wrapping_add(51);
    bad[38..42].copy_from_slice(&seq.to_be_bytes());
    bad[54 + 16..54 + 20].copy_from_slice(&(16u32 << 20).to_be_bytes());
    add(&mut file, &bad);
    let mut next = one.clone();
    let seq = seq.wrapping_add(51);
    next[38..42].copy_from_slice(&seq.to_be_bytes());
    add(&mut file, &next);
    // A packet too short for Ethernet.
    add(&mut file, &[1, 2, 3]);
    let mut r = PcapFrames::new(&file[..]).unwrap();
    let items: Vec<_> = r.by_ref().collect();
    assert_eq!(items.len(), 4);
    assert_eq!(items[0].as_ref().unwrap().data, good);
    assert!(matches!(
        items[1],
        Err(ReadError::Packet { frame_no: 2, error: PacketError::ImplausibleLength { h_len } }) if h_len == 16 << 20
    ));
    assert_eq!(items[2].as_ref().unwrap().frame_no, 3);
    assert!(matches!(
        items[3],
        Err(ReadError::Packet {
            frame_no: 4,
            error: PacketError::Truncated { layer: "Ethernet" }
        })
    ));
    assert_eq!(
        r.stats(),
        ReadStats {
            packets: 4,
            frames: 2,
            ignored: 0,
            errors: 2
        }
    );
    // A file cut inside a record ends with a fatal error.
    let cut = &file[..file.len() - 2];
    let last = PcapFrames::new(cut).unwrap().last().unwrap();
    assert!(last.unwrap_err().is_fatal());
    assert!(matches!(
        PcapFrames::new(&b"not a pcap file at all.."[..]),
        Err(ReadError::Pcap(_))
    ));
}

#[test]
fn tap_frames_convert() {
    let f = TapFrame {
        ts_ns: 5,
        dir: Direction::Rx,
        laddr: "10.0.0.1".parse().unwrap(),
        faddr: "10.0.0.2".parse().unwrap(),
        lane: 3,
        transport: Transport::Tcp {
            local: sa("10.0.0.1:40003"),
            peer: sa("10.0.0.2:16385"),
        },
        orig_len: 100,
        data: frame(1, 2, 3, 0, &[0; 52]).slice(..60),
    };
    let r = TraceRecord::from_tap(&f).unwrap();
    assert_eq!(
        (r.dir, r.lane, r.orig_len, r.data.len()),
        (Direction::Rx, 3, 100, 60)
    );
    assert!(r.is_truncated());
    r.validate().unwrap();
    let lo = TapFrame {
        transport: Transport::Loopback,
        ..f
    };
    assert_eq!(TraceRecord::from_tap(&lo), None);
}

/// The captured bytes of a record in two pieces, cut at any range, give the same bytes as one
/// piece.
#[test]
fn record_pieces_cut_anywhere() {
    let (a, b) = (pattern(5, 1), pattern(7, 2));
    let whole = [a.clone(), b.clone()].concat();
    for split in [
        (&a[..], &b[..]),
        (&whole[..], &[][..]),
        (&[][..], &whole[..]),
    ] {
        let r = RecordRef {
            ts_ns: T0,
            dir: Direction::Tx,
            lane: 0,
            transport: Transport::Tcp {
                local: sa("10.0.0.1:40000"),
                peer: sa("10.0.0.2:16385"),
            },
            orig_len: 12,
            bytes: [split.0, split.1],
            flow: None,
        };
        assert_eq!(r.len(), 12);
        for from in 0..=12 {
            for to in from..=12 {
                let [x, y] = r.range(from, to);
                assert_eq!([x, y].concat(), &whole[from..to], "{from}..{to}");
            }
        }
    }
}

/// A batch of tap records read through the flow cache writes the file of the same records
/// written one by one (no cache): flows interleaved record by record, both directions, IPv4
/// and IPv6, a reconnect whose new connection alternates with the old one in the same cache
/// slot (direction and lane), and records the capture leaves out (loopback, IB, a bad lane,
/// which shares a slot with lane 1) in between.
#[test]
fn a_batch_through_the_flow_cache_writes_the_file_of_its_records_one_by_one() {
    let tcp = |l: &str, p: &str| Transport::Tcp {
        local: sa(l),
        peer: sa(p),
    };
    let flows = [
        (Direction::Tx, 0, tcp("10.2.0.1:40000", "10.2.0.2:16385")),
        (Direction::Tx, 1, tcp("10.2.0.1:40001", "10.2.0.2:16385")),
        (Direction::Rx, 0, tcp("10.2.0.1:40000", "10.2.0.2:16385")),
        (Direction::Tx, 0, tcp("10.2.0.1:40008", "10.2.0.2:16385")),
        (Direction::Tx, 0, tcp("10.2.0.1:40000", "10.2.0.2:16385")),
        (Direction::Tx, 0, tcp("10.2.0.1:40008", "10.2.0.2:16385")),
        (Direction::Rx, 2, tcp("[fd00::1]:40002", "[fd00::2]:16385")),
        (Direction::Tx, 0, Transport::Loopback),
        (Direction::Tx, 9, tcp("10.2.0.1:40009", "10.2.0.2:16385")),
        (Direction::Tx, 1, tcp("10.2.0.1:40001", "10.2.0.2:16385")),
        (
            Direction::Tx,
            0,
            Transport::Ib {
                local_qpn: 7,
                peer_qpn: 8,
                local_lid: 1,
                peer_lid: 2,
                solicited: false,
            },
        ),
        (Direction::Tx, 2, tcp("[fd00::1]:40002", "[fd00::2]:16385")),
    ];
    let mut frames = Vec::new();
    for round in 0..3u64 {
        for (k, (dir, lane, transport)) in flows.iter().enumerate() {
            let n = round * flows.len() as u64 + k as u64;
            let payload = pattern(100 + (n as usize * 37) % 2000, n as u8);
            let data = frame(n + 1, 4000, 5000, 0, &payload);
            let (laddr, faddr) = match transport {
                Transport::Tcp { local, peer } => (local.ip(), peer.ip()),
                _ => ("10.2.0.1".parse().unwrap(), "10.2.0.2".parse().unwrap()),
            };
            frames.push(TapFrame {
                ts_ns: T0 + n * 1000,
                dir: *dir,
                laddr,
                faddr,
                lane: *lane,
                transport: *transport,
                orig_len: data.len() as u32,
                // Every third frame cut at 128 bytes.
                data: if n % 3 == 0 { data.slice(..128) } else { data },
            });
        }
    }
    let mut batch = Vec::new();
    for f in &frames {
        encode_record(&mut batch, f);
    }
    let mut cap = Capture::new(Vec::new(), CaptureLink::Tcp, None, cfg(1448, 5000)).unwrap();
    cap.write_batch(&batch).unwrap();
    let (file, tally) = cap.finish().unwrap();

    let mut sink = PcapSink::ethernet(Vec::new(), cfg(1448, 5000)).unwrap();
    let mut written = 0;
    for f in &frames {
        let Some(r) = TraceRecord::from_tap(f).filter(|r| sink.accepts(r)) else {
            continue;
        };
        if sink.write(&r).is_ok() {
            written += 1;
        }
    }
    let reference = sink.finish().unwrap();
    // Per round: nine TCP records written, the bad lane refused, loopback and IB left out.
    assert_eq!(written, 27);
    assert_eq!(
        (tally.written, tally.other, tally.invalid),
        (27, 6, 3),
        "{tally:?}"
    );
    assert_eq!(file, reference);
    assert!(packets(&file).len() >= 27);
}
