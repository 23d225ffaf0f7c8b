//! Unit tests of the capture writer and reader, by subject: `tcp` (the RDS/TCP segments the
//! Ethernet writer synthesizes), `ib` (the ERF records of the IB writer), `record` (trace
//! records: what the writers refuse, tap frames, the flow cache), `reader` (the reader on every
//! link type, on errors and on garbage). The header views have their own tests beside them
//! (`trace::net`). The helpers here, which build frames and read captures back, serve the
//! node's tap tests too.

mod ib;
mod reader;
mod record;
mod tcp;

use std::net::SocketAddr;

use bytes::Bytes;
use pcap_file::pcap::PcapReader;

use super::*;

pub(crate) const T0: u64 = 1_700_000_000_123_456_789;

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

pub(crate) fn write_tcp(cfg: TcpCaptureConfig, recs: &[TraceRecord]) -> Vec<u8> {
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

pub(crate) fn tcp_rec(
    ts: u64,
    dir: Direction,
    lane: u8,
    local: &str,
    peer: &str,
    f: Bytes,
) -> TraceRecord {
    TraceRecord::tcp(ts, dir, lane, sa(local), sa(peer), f)
}
