//! Capture benchmarks, at the default snap length and at 128 bytes:
//! - `capture`: one batch of RDS/TCP trace records (1 KiB messages on four lanes, as
//!   `capture_overhead` sends them) turned into pcap packets by [`rds_core::trace::Capture`];
//! - `pipeline`: the tap's data-path side and the session thread's side of a capture file.
//!
//! `cargo bench -p rds-core --bench trace`.

use std::hint::black_box;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rds_core::node::tap::{Tap, TapFilter, TxFrames, CHUNK_SIZE};
use rds_core::trace::{
    encode_record, Capture, CaptureLink, Direction, TapFrame, TcpCaptureConfig, Transport,
};
use rds_core::wire::{HeaderRepr, HEADER_LEN};

/// One chunk's worth of records: `size`-byte messages on four lanes, cut at `snaplen`.
fn batch(size: usize, snaplen: usize) -> (Vec<u8>, u64) {
    let local: IpAddr = "127.7.9.1".parse().unwrap();
    let peer: IpAddr = "127.7.9.2".parse().unwrap();
    let mut out = Vec::new();
    let mut n = 0u64;
    let payload = vec![0x5au8; size];
    while out.len() + 88 + snaplen.min(HEADER_LEN + size) <= CHUNK_SIZE {
        let lane = (n % 4) as u8;
        let mut frame = vec![0u8; HEADER_LEN];
        HeaderRepr::data(
            n / 4 + 1,
            20000 + u16::from(lane),
            20000 + u16::from(lane),
            size as u32,
        )
        .emit(&mut frame[..]);
        frame.extend_from_slice(&payload);
        let orig_len = frame.len() as u32;
        frame.truncate(snaplen);
        encode_record(
            &mut out,
            &TapFrame {
                ts_ns: 1_800_000_000_000_000_000 + n * 1500,
                dir: Direction::Tx,
                laddr: local,
                faddr: peer,
                lane,
                transport: Transport::Tcp {
                    local: SocketAddr::new(local, 40000 + u16::from(lane)),
                    peer: SocketAddr::new(peer, 16385),
                },
                orig_len,
                data: Bytes::from(frame),
            },
        );
        n += 1;
    }
    (out, n)
}

/// An output that copies what it is given into a 4 MiB buffer, wrapping around, as the
/// node's capture file gathers bytes for its writer thread.
struct Gather {
    buf: Vec<u8>,
    at: usize,
}

impl std::io::Write for Gather {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let n = b.len().min(self.buf.len() - self.at);
        self.buf[self.at..self.at + n].copy_from_slice(&b[..n]);
        self.at = (self.at + n) % self.buf.len();
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A capture of RDS/TCP frames into a [`Gather`].
fn capture_file() -> Capture<Gather> {
    let out = Gather {
        buf: vec![0; 4 << 20],
        at: 0,
    };
    Capture::new(out, CaptureLink::Tcp, None, TcpCaptureConfig::default()).unwrap()
}

fn capture(c: &mut Criterion) {
    let mut g = c.benchmark_group("capture");
    for (name, snaplen) in [("1k_whole", 1 << 20), ("1k_snap128", 128)] {
        let (data, n) = batch(1024, snaplen);
        g.throughput(Throughput::Elements(n));
        let mut cap = capture_file();
        g.bench_function(name, |b| {
            b.iter(|| cap.write_batch(black_box(&data[..])).unwrap())
        });
    }
    g.finish();
}

/// The whole path of a capture file: transmit passes of eight 1 KiB frames recorded through
/// [`TxFrames`] (as the TCP transport does), and every 512 frames the session thread's part:
/// the chunks taken ([`Tap::take_chunks`]) and written by [`Capture::write_chunk`].
fn pipeline(c: &mut Criterion) {
    let mut g = c.benchmark_group("pipeline");
    let local = SocketAddr::new("127.7.9.1".parse().unwrap(), 40001);
    let peer = SocketAddr::new("127.7.9.2".parse().unwrap(), 16385);
    let payload = Bytes::from(vec![0x5au8; 1024]);
    let mut hdr = [0u8; HEADER_LEN];
    HeaderRepr::data(1, 20000, 20000, 1024).emit(&mut hdr[..]);
    for (name, snaplen) in [("1k_whole", 1 << 20), ("1k_snap128", 128)] {
        let t = Tap::default();
        t.start(snaplen, 1 << 20, TapFilter::default()).unwrap();
        let mut frames = TxFrames::default();
        let mut cap = capture_file();
        g.throughput(Throughput::Elements(512));
        g.bench_function(name, |b| {
            b.iter(|| {
                for _ in 0..64 {
                    for _ in 0..8 {
                        frames.push(&t, &hdr, &payload);
                    }
                    frames.record(&t, local.ip(), peer.ip(), 1, local, peer);
                }
                for chunk in t.take_chunks(Duration::ZERO).unwrap() {
                    cap.write_chunk(&chunk).unwrap();
                    t.recycle_chunk(chunk);
                }
            })
        });
        t.stop();
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = capture, pipeline
}
criterion_main!(benches);
