//! RDS-over-InfiniBand records → ERF type 21 records (LRH + BTH + fragment + ICRC + VCRC).

use std::collections::BTreeMap;

use super::crc::{crc16, crc32};
use super::frame::RecordRef;
use super::pcap::pcap_record_header;
use super::record::{Direction, Transport};
use crate::wire::{FRAG_SIZE, HEADER_LEN};

/// ERF record type of an InfiniBand packet starting with its LRH.
pub const ERF_TYPE_INFINIBAND: u8 = 21;
/// Largest RDS fragment over InfiniBand: the header plus [`FRAG_SIZE`] payload bytes.
pub const IB_MAX_FRAGMENT: usize = HEADER_LEN + FRAG_SIZE;

/// ERF header length (no extension headers).
pub(crate) const ERF_LEN: usize = 16;
/// Local Route Header length.
pub(crate) const LRH_LEN: usize = 8;
/// Base Transport Header length.
pub(crate) const BTH_LEN: usize = 12;
/// LRH "link next header": IBA transport header (BTH) follows directly.
pub(crate) const LNH_IBA_LOCAL: u8 = 2;
/// LRH "link next header": a GRH follows.
pub(crate) const LNH_IBA_GLOBAL: u8 = 3;
/// BTH opcode RC SEND Only.
pub(crate) const OP_RC_SEND_ONLY: u8 = 0x04;
/// BTH opcode RC SEND Only with Immediate.
pub(crate) const OP_RC_SEND_ONLY_IMM: u8 = 0x05;
/// ERF flags: varying-length record.
const ERF_FLAG_VLEN: u8 = 0x04;
const P_KEY_DEFAULT: u16 = 0xffff;

/// The ERF timestamp of `ts_ns`: seconds in the high 32 bits, the binary fraction of a second
/// in the low 32 bits.
pub(crate) fn erf_timestamp(ts_ns: u64) -> u64 {
    let secs = ts_ns / 1_000_000_000;
    let frac = ((ts_ns % 1_000_000_000) << 32) / 1_000_000_000;
    (secs << 32) | frac
}

/// Inverse of [`erf_timestamp`]: exact for values it produced (rounds the fraction up).
pub(crate) fn erf_timestamp_ns(ts: u64) -> u64 {
    let secs = ts >> 32;
    let frac = ts & 0xffff_ffff;
    let ns = (frac * 1_000_000_000).div_ceil(1 << 32);
    secs.saturating_mul(1_000_000_000).saturating_add(ns)
}

/// Length of the native IB packet (LRH through VCRC) that carries an RDS fragment of `frag`
/// bytes: LRH, BTH, the fragment padded to 4 bytes, ICRC and VCRC.
pub(crate) fn ib_packet_len(frag: usize) -> usize {
    LRH_LEN + BTH_LEN + frag.div_ceil(4) * 4 + 4 + 2
}

/// Builds the ERF records of IB fragments, keeping a PSN per sending queue pair.
#[derive(Debug, Default)]
pub(crate) struct IbSynth {
    /// Next PSN per (SLID, DLID, destination QP).
    psn: BTreeMap<(u16, u16, u32), u32>,
}

impl IbSynth {
    /// Appends the pcap record of the ERF record of a (validated) IB record to `out`; returns
    /// whether it did (not for other transports).
    pub(crate) fn push(&mut self, rec: &RecordRef<'_>, out: &mut Vec<u8>) -> bool {
        let Transport::Ib {
            local_qpn,
            peer_qpn,
            local_lid,
            peer_lid,
            solicited,
        } = rec.transport
        else {
            return false;
        };
        let (slid, dlid, dqpn, iface) = match rec.dir {
            Direction::Tx => (local_lid, peer_lid, peer_qpn, 0u8),
            Direction::Rx => (peer_lid, local_lid, local_qpn, 1u8),
        };
        let psn_slot = self.psn.entry((slid, dlid, dqpn)).or_insert(0);
        let psn = *psn_slot & 0xff_ffff;
        *psn_slot = psn_slot.wrapping_add(1) & 0xff_ffff;

        // The packet on the wire, and the one written: a snapped fragment is written as a
        // complete, self-consistent packet carrying only the captured bytes (Wireshark's IB
        // dissector hands no payload on unless the whole LRH-declared packet is there), and
        // the ERF wire length keeps the real packet's size.
        let wire_len = ib_packet_len(rec.orig_len as usize);
        let frag = rec.len();
        let pad = (4 - frag % 4) % 4;
        // LRH PktLen counts 4-byte words from the LRH through the ICRC.
        let words = (LRH_LEN + BTH_LEN + frag + pad + 4) / 4;
        let pkt_len = words * 4 + 2;

        out.reserve(16 + ERF_LEN + pkt_len);
        out.extend_from_slice(&pcap_record_header(
            rec.ts_ns,
            ERF_LEN + pkt_len,
            (ERF_LEN + wire_len) as u32,
        ));
        out.extend_from_slice(&erf_timestamp(rec.ts_ns).to_le_bytes());
        out.push(ERF_TYPE_INFINIBAND);
        out.push(ERF_FLAG_VLEN | iface);
        out.extend_from_slice(&((ERF_LEN + pkt_len) as u16).to_be_bytes());
        out.extend_from_slice(&0u16.to_be_bytes()); // loss counter
        out.extend_from_slice(&(wire_len as u16).to_be_bytes());
        let pkt = out.len();
        // LRH: VL 0, LVer 0, SL 0, LNH 2.
        out.push(0x00);
        out.push(LNH_IBA_LOCAL);
        out.extend_from_slice(&dlid.to_be_bytes());
        out.extend_from_slice(&((words & 0x7ff) as u16).to_be_bytes());
        out.extend_from_slice(&slid.to_be_bytes());
        // BTH: opcode, SE | M | PadCnt | TVer, P_Key, reserved, DestQP, AckReq | PSN.
        out.push(OP_RC_SEND_ONLY);
        out.push((u8::from(solicited) << 7) | ((pad as u8) << 4));
        out.extend_from_slice(&P_KEY_DEFAULT.to_be_bytes());
        out.push(0);
        out.extend_from_slice(&(dqpn & 0xff_ffff).to_be_bytes()[1..]);
        out.extend_from_slice(&((1u32 << 31) | psn).to_be_bytes());
        for p in rec.bytes {
            out.extend_from_slice(p);
        }
        out.resize(pkt + LRH_LEN + BTH_LEN + frag + pad, 0);
        // ICRC: the variant fields (LRH VL, BTH reserved byte) count as all ones.
        let mut masked = [0u8; LRH_LEN + BTH_LEN];
        masked.copy_from_slice(&out[pkt..pkt + LRH_LEN + BTH_LEN]);
        masked[0] |= 0xf0;
        masked[LRH_LEN + 4] = 0xff;
        let icrc = crc32(&[&masked, &out[pkt + LRH_LEN + BTH_LEN..]]);
        out.extend_from_slice(&icrc.to_le_bytes());
        let vcrc = crc16(&out[pkt..]);
        out.extend_from_slice(&vcrc.to_le_bytes());
        true
    }
}
