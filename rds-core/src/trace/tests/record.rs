//! Trace records: what the writers refuse, tap frames, records in two pieces, and a tap
//! batch through the flow cache.

use super::super::frame::RecordRef;
use super::*;

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
