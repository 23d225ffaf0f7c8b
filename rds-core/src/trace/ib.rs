//! RDS-over-InfiniBand records → ERF type 21 records (LRH + BTH + fragment + ICRC + VCRC).

use std::collections::BTreeMap;

use super::crc::{crc16, crc32};
use super::frame::RecordRef;
use super::net::erf::{self, erf_timestamp, ErfRecord, ERF_TYPE_INFINIBAND};
use super::net::ib::{
    BthPacket, LrhPacket, BTH_LEN, BTH_RESERVED_AT, ICRC_LEN, LNH_IBA_LOCAL, LRH_LEN, LRH_VL_AT,
    OP_RC_SEND_ONLY, P_KEY_DEFAULT, VCRC_LEN,
};
use super::pcap::pcap_record_header;
use super::record::{Direction, Transport};
use crate::wire::{FRAG_SIZE, HEADER_LEN};

/// Largest RDS fragment over InfiniBand: the header plus [`FRAG_SIZE`] payload bytes.
pub const IB_MAX_FRAGMENT: usize = HEADER_LEN + FRAG_SIZE;

/// Length of the native IB packet (LRH through VCRC) that carries an RDS fragment of `frag`
/// bytes: LRH, BTH, the fragment padded to 4 bytes, ICRC and VCRC.
pub(crate) fn ib_packet_len(frag: usize) -> usize {
    LRH_LEN + BTH_LEN + frag.div_ceil(4) * 4 + ICRC_LEN + VCRC_LEN
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
        let words = (LRH_LEN + BTH_LEN + frag + pad + ICRC_LEN) / 4;
        let pkt_len = words * 4 + VCRC_LEN;

        out.reserve(16 + erf::HEADER_LEN + pkt_len);
        out.extend_from_slice(&pcap_record_header(
            rec.ts_ns,
            erf::HEADER_LEN + pkt_len,
            (erf::HEADER_LEN + wire_len) as u32,
        ));
        let at = out.len();
        let pkt = at + erf::HEADER_LEN;
        let bth = pkt + LRH_LEN;
        let payload = bth + BTH_LEN;
        out.resize(payload, 0);
        let mut e = ErfRecord::new_unchecked(&mut out[at..pkt]);
        e.set_timestamp(erf_timestamp(rec.ts_ns));
        e.set_record_type(ERF_TYPE_INFINIBAND);
        e.set_flags(erf::FLAG_VLEN, iface);
        e.set_record_len((erf::HEADER_LEN + pkt_len) as u16);
        e.set_loss_count(0);
        e.set_wire_len(wire_len as u16);
        // LRH: VL 0, LVer 0, SL 0.
        let mut l = LrhPacket::new_unchecked(&mut out[pkt..bth]);
        l.set_lnh(LNH_IBA_LOCAL);
        l.set_dlid(dlid);
        l.set_packet_len(words as u16);
        l.set_slid(slid);
        // BTH: MigReq 0, TVer 0, AckReq on every packet.
        let mut b = BthPacket::new_unchecked(&mut out[bth..payload]);
        b.set_opcode(OP_RC_SEND_ONLY);
        b.set_solicited(solicited);
        b.set_pad_count(pad);
        b.set_pkey(P_KEY_DEFAULT);
        b.set_dest_qp(dqpn);
        b.set_ack_req(true);
        b.set_psn(psn);
        for p in rec.bytes {
            out.extend_from_slice(p);
        }
        out.resize(payload + frag + pad, 0);
        // ICRC: the variant fields (LRH VL, BTH reserved byte) count as all ones.
        let mut masked = [0u8; LRH_LEN + BTH_LEN];
        masked.copy_from_slice(&out[pkt..payload]);
        masked[LRH_VL_AT] |= 0xf0;
        masked[LRH_LEN + BTH_RESERVED_AT] = 0xff;
        let icrc = crc32(&[&masked, &out[payload..]]);
        out.extend_from_slice(&icrc.to_le_bytes());
        let vcrc = crc16(&out[pkt..]);
        out.extend_from_slice(&vcrc.to_le_bytes());
        true
    }
}
