//! The RDS/TCP segments of the Ethernet writer: exact bytes, segment boundaries, sequence
//! and ACK numbers, checksums, hold times, snapped frames, and the reader on its output.

use std::net::{IpAddr, SocketAddr};

use super::*;

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
