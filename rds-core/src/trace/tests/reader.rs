//! The capture reader: every link type it takes, errors it reports and goes on after, and
//! garbage it survives.

use super::*;

/// A captured packet: timestamp, captured bytes, length on the wire.
type Packet = (u64, Vec<u8>, u32);

/// A classic pcap file (nanosecond timestamps) of link type `linktype` holding `packets`.
fn pcap_file(linktype: u32, packets: &[Packet]) -> Vec<u8> {
    let mut f = vec![0x4d, 0x3c, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    f.extend_from_slice(&PCAP_SNAPLEN.to_le_bytes());
    f.extend_from_slice(&linktype.to_le_bytes());
    for (ts, data, orig_len) in packets {
        f.extend_from_slice(&((ts / 1_000_000_000) as u32).to_le_bytes());
        f.extend_from_slice(&((ts % 1_000_000_000) as u32).to_le_bytes());
        f.extend_from_slice(&(data.len() as u32).to_le_bytes());
        f.extend_from_slice(&orig_len.to_le_bytes());
        f.extend_from_slice(data);
    }
    f
}

/// Ethernet packets with their Ethernet header (first argument of `f`) and IP packet
/// (second) rewrapped by `f`, which adds `grow` bytes.
fn rewrap(eth: &[Packet], grow: i64, f: impl Fn(&[u8], &[u8]) -> Vec<u8>) -> Vec<Packet> {
    eth.iter()
        .map(|(ts, d, orig)| (*ts, f(&d[..14], &d[14..]), (i64::from(*orig) + grow) as u32))
        .collect()
}

/// The frames of a capture, all of which must read without error, and the reader's counts.
fn frames_of(file: &[u8]) -> (Vec<CapturedFrame>, ReadStats) {
    let mut r = PcapFrames::new(file).unwrap();
    let frames = r.by_ref().map(Result::unwrap).collect();
    (frames, r.stats())
}

/// The same RDS/TCP packets behind every IP link type the reader takes give the same frames:
/// raw IP (101, 228, 229), Linux cooked v1 and v2 (113, 276) and Ethernet with an 802.1ad
/// and an 802.1Q tag; IPv4 headers with options and IPv6 headers with a hop-by-hop options
/// header too. Only Ethernet has the MAC addresses that give the direction. Packets that are
/// not RDS (ARP, UDP) are counted as ignored.
#[test]
fn every_link_type_gives_the_same_frames() {
    let conns = [
        ("10.0.0.1:40000", "10.0.0.2:16385", 0u8),
        ("[fd00::1]:16385", "[fd00::2]:50007", 7),
    ];
    let mut recs = Vec::new();
    for i in 0..24u64 {
        let (l, p, lane) = conns[(i % 2) as usize];
        let dir = if i % 3 == 0 {
            Direction::Rx
        } else {
            Direction::Tx
        };
        let n = [0usize, 5, 1500, 9000][(i % 4) as usize];
        let mut r = tcp_rec(
            T0 + i * 10,
            dir,
            lane,
            l,
            p,
            frame(i, 4000, 5000, 0, &pattern(n, i as u8)),
        );
        if i % 5 == 4 {
            r = r.snapped(300);
        }
        recs.push(r);
    }
    let eth_file = write_tcp(cfg(1448, 5), &recs);
    let eth = packets(&eth_file);
    let (expected, st) = frames_of(&eth_file);
    assert_eq!(expected.len(), recs.len());
    assert!(expected.iter().all(|f| f.dir.is_some()));
    assert_eq!((st.frames, st.ignored, st.errors), (24, 0, 0));
    let undirected: Vec<CapturedFrame> = expected
        .iter()
        .map(|f| CapturedFrame {
            dir: None,
            ..f.clone()
        })
        .collect();

    let raw = rewrap(&eth, -14, |_, ip| ip.to_vec());
    for lt in [101, 228, 229] {
        assert_eq!(
            frames_of(&pcap_file(lt, &raw)).0,
            undirected,
            "link type {lt}"
        );
    }
    let sll = rewrap(&eth, 2, |eth, ip| {
        let mut p = vec![0, 4, 0, 1, 0, 6];
        p.extend_from_slice(&eth[6..12]);
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(&eth[12..14]);
        p.extend_from_slice(ip);
        p
    });
    assert_eq!(frames_of(&pcap_file(113, &sll)).0, undirected);
    let sll2 = rewrap(&eth, 6, |eth, ip| {
        let mut p = eth[12..14].to_vec();
        p.extend_from_slice(&[0, 0, 0, 0, 0, 2, 0, 1, 4, 6]);
        p.extend_from_slice(&eth[6..12]);
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(ip);
        p
    });
    assert_eq!(frames_of(&pcap_file(276, &sll2)).0, undirected);
    let tagged = rewrap(&eth, 8, |eth, ip| {
        let mut p = eth[..12].to_vec();
        p.extend_from_slice(&[0x88, 0xa8, 0x00, 0x07, 0x81, 0x00, 0x20, 0x05]);
        p.extend_from_slice(&eth[12..]);
        p.extend_from_slice(ip);
        p
    });
    assert_eq!(frames_of(&pcap_file(1, &tagged)).0, expected);

    // IP options: an IPv4 header of 24 bytes (IHL 6), an IPv6 hop-by-hop header of 8 bytes.
    let with_options: Vec<Packet> = eth
        .iter()
        .map(|(ts, d, orig)| {
            let (head, ip) = d.split_at(14);
            let mut p = head.to_vec();
            let grow = if ip[0] >> 4 == 4 {
                let total = u16::from_be_bytes([ip[2], ip[3]]) + 4;
                p.push(0x46);
                p.push(ip[1]);
                p.extend_from_slice(&total.to_be_bytes());
                p.extend_from_slice(&ip[4..20]);
                p.extend_from_slice(&[1, 1, 1, 0]); // NOP, NOP, NOP, end of options
                p.extend_from_slice(&ip[20..]);
                4
            } else {
                let plen = u16::from_be_bytes([ip[4], ip[5]]) + 8;
                p.extend_from_slice(&ip[..4]);
                p.extend_from_slice(&plen.to_be_bytes());
                p.push(0); // hop-by-hop options
                p.extend_from_slice(&ip[7..40]);
                p.extend_from_slice(&[ip[6], 0, 1, 4, 0, 0, 0, 0]); // then TCP; PadN
                p.extend_from_slice(&ip[40..]);
                8
            };
            (*ts, p, orig + grow)
        })
        .collect();
    assert_eq!(frames_of(&pcap_file(1, &with_options)).0, expected);

    // Not RDS: ARP over Ethernet, UDP over IPv4 and a TCP segment of other ports, between
    // the RDS packets; the frames are numbered by their packets.
    let mut mixed = Vec::new();
    let mut number = Vec::new();
    let mut arp = eth[0].1[..14].to_vec();
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    arp.extend_from_slice(&[0; 28]);
    let mut udp = eth[0].1[..54].to_vec();
    udp[14 + 9] = 17;
    let mut other = eth[0].1.clone();
    other[34..38].copy_from_slice(&[0x1f, 0x90, 0x1f, 0x91]); // 8080 -> 8081
    for (i, p) in eth.iter().enumerate() {
        mixed.push(p.clone());
        number.push(mixed.len() as u64);
        if i % 3 == 0 {
            for extra in [&arp, &udp, &other] {
                mixed.push((p.0, extra.clone(), extra.len() as u32));
            }
        }
    }
    let extras = (mixed.len() - eth.len()) as u64;
    let (frames, st) = frames_of(&pcap_file(1, &mixed));
    assert_eq!(
        (st.packets, st.frames, st.ignored, st.errors),
        (mixed.len() as u64, 24, extras, 0)
    );
    let renumbered: Vec<CapturedFrame> = expected
        .iter()
        .map(|f| CapturedFrame {
            frame_no: number[f.frame_no as usize - 1],
            ..f.clone()
        })
        .collect();
    assert_eq!(frames, renumbered);
}

// A small xorshift generator (deterministic garbage).
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
