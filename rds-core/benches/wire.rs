//! Header codec benchmarks: encode + decode of the 48-byte header, the checksum, extension
//! iteration and the congestion map. `cargo bench -p rds-core --bench wire`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rds_core::wire::{
    checksum, CongMap, ExtHeader, HeaderPacket, HeaderRepr, CONG_MAP_BYTES, HEADER_LEN,
};

fn probe() -> HeaderRepr {
    let mut h = HeaderRepr::data(1, 1, 0, 0);
    for e in [
        ExtHeader::Npaths(8),
        ExtHeader::GenNum(0x1122_3344),
        ExtHeader::SportIdx(0),
    ] {
        h.push_ext(e).unwrap();
    }
    h
}

fn header(c: &mut Criterion) {
    let mut g = c.benchmark_group("header");
    g.throughput(Throughput::Elements(1));
    let data = HeaderRepr::data(0x0102_0304_0506_0708, 4000, 5000, 64);
    g.bench_function("encode+decode", |b| {
        let mut buf = [0u8; HEADER_LEN];
        b.iter(|| {
            black_box(&data).emit(&mut buf);
            let p = HeaderPacket::new_checked(black_box(&buf[..])).unwrap();
            black_box(HeaderRepr::parse(&p))
        })
    });
    g.bench_function("encode", |b| {
        let mut buf = [0u8; HEADER_LEN];
        b.iter(|| {
            black_box(&data).emit(&mut buf);
            black_box(buf[0])
        })
    });
    let bytes = data.to_bytes();
    g.bench_function("decode", |b| {
        b.iter(|| {
            let p = HeaderPacket::new_checked(black_box(&bytes[..])).unwrap();
            black_box(HeaderRepr::parse(&p))
        })
    });
    g.bench_function("checksum", |b| b.iter(|| checksum(black_box(&bytes[..]))));
    g.bench_function("encode_checksummed+verify", |b| {
        let mut buf = [0u8; HEADER_LEN];
        b.iter(|| {
            black_box(&data).emit_checksummed(&mut buf);
            HeaderPacket::new_checked(&buf[..]).unwrap().checksum_ok()
        })
    });
    let pr = probe();
    g.bench_function("ext_iterate_probe", |b| {
        b.iter(|| black_box(&pr).exts().count())
    });
    g.finish();
}

fn cong_map(c: &mut Criterion) {
    let mut g = c.benchmark_group("cong_map");
    g.throughput(Throughput::Bytes(CONG_MAP_BYTES as u64));
    let mut m = CongMap::new();
    for p in (0..65535u16).step_by(97) {
        m.set(p);
    }
    let bytes = m.to_bytes();
    g.bench_function("to_bytes", |b| b.iter(|| black_box(&m).to_bytes()));
    g.bench_function("from_bytes", |b| {
        b.iter(|| CongMap::from_bytes(black_box(&bytes)).unwrap())
    });
    let empty = CongMap::new();
    g.bench_function("uncongested_mask", |b| {
        b.iter(|| CongMap::uncongested_mask(black_box(&m), black_box(&empty)))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = header, cong_map
}
criterion_main!(benches);
