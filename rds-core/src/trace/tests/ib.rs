//! The ERF records of the IB writer: exact bytes and CRCs, padding, PSNs, snapped
//! fragments, and the reader on its output.

use std::net::IpAddr;

use bytes::Bytes;

use super::*;

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
