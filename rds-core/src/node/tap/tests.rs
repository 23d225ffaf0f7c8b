//! Unit tests of the trace tap: the queue's bounds, filters and chunks, and the records the
//! front end writes.

use super::*;
use crate::trace::tests::{cfg, frame, packets, pattern, sa};
use crate::trace::{encode_record, Capture, CaptureLink};

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[test]
fn bounded_queue_counts_drops_and_snaps() {
    let tap = Tap::default();
    assert!(!tap.enabled());
    tap.start(48 + 4, 2, TapFilter::default()).unwrap();
    assert_eq!(tap.start(100, 2, TapFilter::default()), Err(TapError::Busy));
    let hdr = [0u8; 48];
    for _ in 0..3 {
        tap.record_tcp(
            Dir::Tx,
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            3,
            addr("10.0.0.1:40003"),
            addr("10.0.0.2:16385"),
            [(&hdr[..], &Bytes::from_static(&[1, 2, 3, 4, 5, 6]))],
        );
    }
    let st = tap.stop();
    assert_eq!((st.captured, st.dropped), (2, 1));
    let frames = tap.take(10, Duration::ZERO).unwrap();
    assert_eq!(frames.len(), 2);
    assert_eq!(frames[0].orig_len, 54);
    assert_eq!(&frames[0].data[48..], &[1, 2, 3, 4]);
    assert_eq!(frames[0].lane, 3);
    assert!(tap.take(10, Duration::ZERO).is_none());
    // A new session may start after the old one ended.
    tap.start(100, 2, TapFilter::default()).unwrap();
}

#[test]
fn queued_bytes_are_bounded() {
    let tap = Tap::default();
    tap.start(usize::MAX, 1 << 16, TapFilter::default())
        .unwrap();
    let hdr = [0u8; 48];
    let payload = Bytes::from(vec![7u8; 1 << 20]);
    let per = REC_HDR_LEN + 48 + (1 << 20);
    let fit = MAX_QUEUED_BYTES / per;
    let rec = |tap: &Tap| {
        tap.record_tcp(
            Dir::Tx,
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            0,
            addr("10.0.0.1:40000"),
            addr("10.0.0.2:16385"),
            [(&hdr[..], &payload)],
        )
    };
    for _ in 0..fit + 3 {
        rec(&tap);
    }
    assert_eq!(
        tap.stats(),
        TapStats {
            captured: fit as u64,
            dropped: 3
        }
    );
    // Taking frames makes room again.
    let two = tap.take(2, Duration::ZERO).unwrap();
    assert_eq!(two.len(), 2);
    assert_eq!(two[1].data.len(), 48 + (1 << 20));
    rec(&tap);
    rec(&tap);
    rec(&tap);
    assert_eq!(
        tap.stats(),
        TapStats {
            captured: fit as u64 + 2,
            dropped: 4
        }
    );
    tap.stop();
}

#[test]
fn filters() {
    let tap = Tap::default();
    tap.start(
        1000,
        10,
        TapFilter {
            peer: Some("10.0.0.2".parse().unwrap()),
            port: Some(4000),
        },
    )
    .unwrap();
    let mut hdr = [0u8; 48];
    hdr[20..22].copy_from_slice(&4000u16.to_be_bytes());
    let l: IpAddr = "10.0.0.1".parse().unwrap();
    for peer in ["10.0.0.2", "10.0.0.3"] {
        tap.record(
            Dir::Rx,
            l,
            peer.parse().unwrap(),
            0,
            Transport::Loopback,
            &hdr,
            &[],
        );
    }
    hdr[20..22].copy_from_slice(&4001u16.to_be_bytes());
    tap.record(
        Dir::Rx,
        l,
        "10.0.0.2".parse().unwrap(),
        0,
        Transport::Loopback,
        &hdr,
        &[],
    );
    assert_eq!(tap.stats().captured, 1);
}

/// Frames go into chunks of CHUNK_SIZE; batches come out whole and in order, and take()
/// splits them at `max` frames.
#[test]
fn chunks_batches_and_split() {
    let tap = Tap::default();
    tap.start(MAX_SNAPLEN, 1 << 16, TapFilter::default())
        .unwrap();
    let payload = Bytes::from(vec![9u8; 1000]);
    let per = REC_HDR_LEN + 48 + 1000;
    let n = CHUNK_SIZE / per + 5;
    for i in 0..n {
        let mut hdr = [0u8; 48];
        hdr[..8].copy_from_slice(&(i as u64).to_be_bytes());
        tap.record_tcp(
            Dir::Tx,
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            1,
            addr("10.0.0.1:40001"),
            addr("10.0.0.2:16385"),
            [(&hdr[..], &payload)],
        );
    }
    // One full chunk is ready at once, the rest comes at the timeout.
    let b = tap.take_batches(Duration::from_secs(5)).unwrap();
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].frames as usize, CHUNK_SIZE / per);
    assert_eq!(b[0].data.len(), (CHUNK_SIZE / per) * per);
    tap.recycle(b.into_iter().next().unwrap().data);
    let three = tap.take(3, Duration::ZERO).unwrap();
    let seqs: Vec<u64> = three
        .iter()
        .map(|f| u64::from_be_bytes(f.data[..8].try_into().unwrap()))
        .collect();
    assert_eq!(seqs, [n as u64 - 5, n as u64 - 4, n as u64 - 3]);
    let rest = tap.take_batches(Duration::ZERO).unwrap();
    assert_eq!(rest.iter().map(|b| b.frames).sum::<u32>(), 2);
    assert_eq!(tap.take_batches(Duration::ZERO).unwrap(), vec![]);
    tap.stop();
    assert!(tap.take_batches(Duration::ZERO).is_none());
}

/// Records received frames with payloads long and short into `tap` (snap length 48 + 700);
/// returns the records `encode_record` writes for them (timestamps zero) and how many.
fn record_mix(tap: &Tap) -> (Vec<u8>, u32) {
    let mut want = Vec::new();
    let mut frames = 0;
    for (i, len) in [0usize, 10, 255, 256, 1000, 5, 70_000, 300]
        .iter()
        .enumerate()
    {
        let mut hdr = [0u8; 48];
        hdr[..8].copy_from_slice(&(i as u64).to_be_bytes());
        let payload: Bytes = (0..*len).map(|x| (x * 31 + i) as u8).collect();
        let (local, peer) = endpoints();
        record_rx(tap, 1, [(&hdr[..], &payload)]);
        let keep = (*len).min(700);
        let mut data = hdr.to_vec();
        data.extend_from_slice(&payload[..keep]);
        let f = TapFrame {
            ts_ns: 0,
            dir: Dir::Rx,
            laddr: local.ip(),
            faddr: peer.ip(),
            lane: 1,
            transport: Transport::Tcp { local, peer },
            orig_len: (48 + len) as u32,
            data: data.into(),
        };
        encode_record(&mut want, &f);
        frames += 1;
    }
    (want, frames)
}

/// Long payloads are kept by reference and short ones copied; the batches come out as the
/// same records `encode_record` writes, cut at the snap length, whatever the mix.
#[test]
fn shared_payloads_flatten_to_the_same_records() {
    let tap = Tap::default();
    tap.start(48 + 700, 1 << 16, TapFilter::default()).unwrap();
    let (want, frames) = record_mix(&tap);
    let b = tap.take_batches(Duration::ZERO).unwrap();
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].frames, frames);
    // The timestamps differ: compare with them zeroed.
    assert_eq!(without_ts(b[0].data.clone()), want);
}

/// A chunk read in place gives the records of the flattened batch, field by field, with
/// the payloads kept by reference as the second piece of their bytes.
#[test]
fn chunk_records_read_in_place_are_the_flattened_records() {
    let tap = Tap::default();
    tap.start(48 + 700, 1 << 16, TapFilter::default()).unwrap();
    let (want, frames) = record_mix(&tap);
    let chunks = tap.take_chunks(Duration::ZERO).unwrap();
    assert_eq!(chunks.len(), 1);
    let c = &chunks[0];
    assert_eq!(c.frames(), frames);
    // Kept by reference: the payloads of 256 bytes and more.
    assert_eq!(c.shared_count(), 4);
    let mut got = Vec::new();
    let mut pieces = Vec::new();
    let mut last_ts = 0;
    for f in c.records() {
        let f = f.unwrap();
        let [a, b] = f.bytes();
        pieces.push((a.len(), b.len()));
        let mut data = a.to_vec();
        data.extend_from_slice(b);
        assert!(f.ts_ns() >= last_ts && f.ts_ns() > 0);
        last_ts = f.ts_ns();
        let mut frame = f.with_data(data.into());
        frame.ts_ns = 0;
        encode_record(&mut got, &frame);
    }
    assert_eq!(got, want);
    let kept = |p: usize| (48, p);
    assert_eq!(
        pieces,
        [
            (48, 0),
            (58, 0),
            (303, 0),
            kept(256),
            kept(700),
            (53, 0),
            kept(700),
            kept(300)
        ]
    );
    // The same bytes as the flattened chunk.
    let flat = chunks.into_iter().next().unwrap().into_batch();
    assert_eq!(without_ts(flat.data), want);
}

/// The TCP endpoints of the tests' frames: local, peer.
fn endpoints() -> (SocketAddr, SocketAddr) {
    (addr("10.0.0.1:40001"), addr("10.0.0.2:16385"))
}

/// Records received frames of [`endpoints`] on `lane`.
fn record_rx<'a>(
    tap: &Tap,
    lane: usize,
    frames: impl IntoIterator<Item = (impl AsRef<[u8]>, &'a Bytes)>,
) {
    let (local, peer) = endpoints();
    tap.record_tcp(Dir::Rx, local.ip(), peer.ip(), lane, local, peer, frames);
}

/// Records with their timestamps zeroed (frames recorded separately differ only there).
fn without_ts(mut b: Vec<u8>) -> Vec<u8> {
    let mut off = 0;
    while off < b.len() {
        b[off + 8..off + 16].fill(0);
        let cap = u32::from_le_bytes(b[off..off + 4].try_into().unwrap()) as usize;
        off += REC_HDR_LEN + cap;
    }
    b
}

/// A transmit pass gathered in `TxFrames` records exactly what `record_tcp` records, at
/// any snap length; a payload is referenced only when the snap length keeps enough of it.
#[test]
fn tx_frames_record_what_record_tcp_does() {
    let (local, peer) = endpoints();
    let payloads: Vec<Bytes> = [0usize, 10, 255, 256, 1000, 70_000]
        .iter()
        .map(|len| (0..*len).map(|x| (x * 7) as u8).collect())
        .collect();
    let hdr = |i: usize| {
        let mut h = [0u8; 48];
        h[..8].copy_from_slice(&(i as u64).to_be_bytes());
        h
    };
    for snaplen in [48, 48 + 100, 48 + 256, 48 + 700, MAX_SNAPLEN] {
        let tap = Tap::default();
        tap.start(snaplen, 1 << 16, TapFilter::default()).unwrap();
        let mut tx = TxFrames::default();
        assert!(tx.is_empty());
        for (i, p) in payloads.iter().enumerate() {
            let unique = p.is_unique();
            tx.push(&tap, &hdr(i), p);
            let referenced = p.len().min(snaplen - 48) >= SHARE_MIN;
            assert_eq!(
                unique && !p.is_unique(),
                referenced,
                "snaplen {snaplen} len {}",
                p.len()
            );
        }
        assert!(!tx.is_empty());
        tx.record(&tap, local.ip(), peer.ip(), 2, local, peer);
        assert!(tx.is_empty());
        tap.record_tcp(
            Dir::Tx,
            local.ip(),
            peer.ip(),
            2,
            local,
            peer,
            payloads.iter().enumerate().map(|(i, p)| (hdr(i), p)),
        );
        let b = tap.take_batches(Duration::ZERO).unwrap();
        assert_eq!(b.len(), 1);
        let n = payloads.len();
        assert_eq!(b[0].frames as usize, 2 * n);
        let all = without_ts(b[0].data.clone());
        let mut direct = 0;
        for _ in 0..n {
            let cap = u32::from_le_bytes(all[direct..direct + 4].try_into().unwrap());
            direct += REC_HDR_LEN + cap as usize;
        }
        assert_eq!(all[..direct], all[direct..], "snaplen {snaplen}");
        tap.stop();
    }
}

/// Once the queue is full, frames are counted as dropped without the lock until the
/// consumer takes records; the count ends with the session and nothing is lost from it.
#[test]
fn a_full_queue_counts_drops_without_the_lock() {
    let peer = endpoints().1;
    let payload = Bytes::from_static(&[1; 8]);
    let rec = |tap: &Tap, n: usize| record_rx(tap, 0, (0..n).map(|_| ([0u8; 48], &payload)));
    let tap = Tap::default();
    tap.start(100, 2, TapFilter::default()).unwrap();
    rec(&tap, 3);
    let full = |tap: &Tap| tap.overflow.load(Ordering::Relaxed) & OVERFLOW_FULL != 0;
    assert!(full(&tap));
    rec(&tap, 4);
    assert_eq!(tap.overflow.load(Ordering::Relaxed) & OVERFLOW_COUNT, 4);
    assert_eq!(
        tap.stats(),
        TapStats {
            captured: 2,
            dropped: 5
        }
    );
    // Taking makes room: the next frames are queued again.
    assert_eq!(tap.take(1, Duration::ZERO).unwrap().len(), 1);
    assert!(!full(&tap));
    rec(&tap, 2);
    assert!(full(&tap));
    let st = tap.stop();
    assert_eq!(
        st,
        TapStats {
            captured: 3,
            dropped: 6
        }
    );
    // After the stop nothing more is counted.
    rec(&tap, 5);
    assert_eq!(tap.stats(), st);
    let mut left = 0;
    while let Some(f) = tap.take(10, Duration::ZERO) {
        left += f.len();
    }
    assert_eq!(left, 2);

    // With a filter, every frame goes through it: no lock-free count.
    tap.start(
        100,
        1,
        TapFilter {
            peer: Some(peer.ip()),
            port: None,
        },
    )
    .unwrap();
    rec(&tap, 2);
    assert!(!full(&tap));
    assert_eq!(
        tap.stop(),
        TapStats {
            captured: 1,
            dropped: 1
        }
    );
}

/// The IB entry point records what the ERF writer needs.
#[test]
fn ib_fragments() {
    let tap = Tap::default();
    let l: IpAddr = "10.1.0.1".parse().unwrap();
    let p: IpAddr = "10.1.0.2".parse().unwrap();
    let qps = IbQps {
        local_qpn: 0x11,
        peer_qpn: 0x22,
        local_lid: 1,
        peer_lid: 2,
    };
    // Not enabled: nothing is recorded (and no lock is taken).
    tap.record_ib(Dir::Tx, l, p, 0, qps, true, &[0; 48], &[]);
    tap.start(MAX_SNAPLEN, 16, TapFilter::default()).unwrap();
    tap.record_ib(Dir::Tx, l, p, 0, qps, true, &[5; 48], &[]);
    tap.record_ib(Dir::Rx, l, p, 0, qps, false, &[6; 48], &[7; 4096]);
    tap.stop();
    let f = tap.take(10, Duration::ZERO).unwrap();
    assert_eq!(f.len(), 2);
    assert_eq!(
        f[0].transport,
        Transport::Ib {
            local_qpn: 0x11,
            peer_qpn: 0x22,
            local_lid: 1,
            peer_lid: 2,
            solicited: true
        }
    );
    assert_eq!(
        (f[0].dir, f[0].orig_len, f[0].data.len()),
        (Dir::Tx, 48, 48)
    );
    assert_eq!((f[1].dir, f[1].orig_len), (Dir::Rx, 48 + 4096));
    assert_eq!(&f[1].data[48..], &[7; 4096][..]);
}

/// A capture file written from the tap's chunks read in place is byte for byte the file
/// written from the same chunks flattened, at snap lengths that keep payloads by reference
/// whole, cut, or not at all; over two lanes and both directions.
#[test]
fn chunks_read_in_place_write_the_file_of_their_flattened_batches() {
    let local = sa("10.1.0.1:40001");
    let peer = sa("10.1.0.2:16385");
    let local2 = sa("10.1.0.1:40002");
    for snaplen in [48 + 100_000, 48 + 300, 128] {
        let tap = Tap::default();
        tap.start(snaplen, 1 << 16, TapFilter::default()).unwrap();
        let mut tx = TxFrames::default();
        for (i, len) in [0usize, 100, 255, 256, 1000, 1448, 3000, 70_000, 300]
            .into_iter()
            .enumerate()
        {
            let f = frame(i as u64 + 1, 4000, 5000, 0, &pattern(len, i as u8));
            let hdr: [u8; 48] = f[..48].try_into().unwrap();
            let payload = f.slice(48..);
            tx.push(&tap, &hdr, &payload);
            tx.record(&tap, local.ip(), peer.ip(), i % 2, local, peer);
            let (l, p) = if i % 2 == 0 {
                (local, peer)
            } else {
                (local2, peer)
            };
            tap.record_tcp(Dir::Rx, l.ip(), p.ip(), i % 2, l, p, [(&hdr[..], &payload)]);
        }
        let chunks = tap.take_chunks(std::time::Duration::ZERO).unwrap();
        assert!(!chunks.is_empty());
        let new = || Capture::new(Vec::new(), CaptureLink::Tcp, None, cfg(1448, 0)).unwrap();
        let (mut in_place, mut flat) = (new(), new());
        for c in chunks {
            in_place.write_chunk(&c).unwrap();
            flat.write_batch(&c.into_batch().data).unwrap();
        }
        let (a, ta) = in_place.finish().unwrap();
        let (b, tb) = flat.finish().unwrap();
        assert_eq!(ta, tb);
        assert_eq!(ta.written, 18, "snap length {snaplen}");
        assert_eq!(a, b, "snap length {snaplen}");
        assert!(packets(&a).len() >= 18);
    }
}
