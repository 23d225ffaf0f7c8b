//! One ERF record → the RDS fragment over InfiniBand it carries: an ERF record of type 21
//! holding an RC SEND Only packet (with or without immediate data) is one frame, read
//! through the views of [`crate::trace::net`] (ERF, LRH, BTH). Other records and opcodes are
//! not RDS and are ignored.

use bytes::Bytes;

use super::error::PacketError;
use super::frame::{CapturedFrame, FrameLink};
use crate::trace::net::erf::{erf_timestamp_ns, ErfRecord, ERF_TYPE_INFINIBAND};
use crate::trace::net::ib::{
    BthPacket, LrhPacket, BTH_LEN, GRH_LEN, ICRC_LEN, IMMDT_LEN, LNH_IBA_GLOBAL, LNH_IBA_LOCAL,
    LRH_LEN, OP_RC_SEND_ONLY, OP_RC_SEND_ONLY_IMM, VCRC_LEN,
};
use crate::trace::record::Direction;
use crate::wire::{peek_len, FRAG_SIZE, HEADER_LEN};

/// The frame in ERF record `data` of capture packet `frame_no`, or `None` for a record that
/// is not an RDS fragment.
///
/// # Errors
/// A [`PacketError`] for a header cut short or a packet length shorter than its headers.
pub(super) fn frame(data: &[u8], frame_no: u64) -> Result<Option<CapturedFrame>, PacketError> {
    let truncated = |layer| move |_| PacketError::Truncated { layer };
    let erf = ErfRecord::new_checked(data).map_err(truncated("ERF"))?;
    let ts_ns = erf_timestamp_ns(erf.timestamp());
    let pkt = erf.payload().map_err(truncated("ERF extension"))?;
    if erf.record_type() != ERF_TYPE_INFINIBAND {
        return Ok(None);
    }
    let lrh = LrhPacket::new_checked(pkt).map_err(truncated("IB LRH"))?;
    let bth_at = match lrh.lnh() {
        LNH_IBA_LOCAL => LRH_LEN,
        LNH_IBA_GLOBAL => LRH_LEN + GRH_LEN,
        _ => return Ok(None),
    };
    let bth =
        BthPacket::new_checked(pkt.get(bth_at..).unwrap_or(&[])).map_err(truncated("IB BTH"))?;
    let start = match bth.opcode() {
        OP_RC_SEND_ONLY => bth_at + BTH_LEN,
        OP_RC_SEND_ONLY_IMM => bth_at + BTH_LEN + IMMDT_LEN,
        _ => return Ok(None),
    };
    // PktLen covers LRH through ICRC; the fragment is what lies between the transport
    // headers and the pad + ICRC.
    let words = usize::from(lrh.packet_len());
    let Some(frag_len) = (words * 4).checked_sub(start + bth.pad_count() + ICRC_LEN) else {
        return Err(PacketError::Malformed {
            layer: "IB LRH",
            what: "packet length shorter than its headers",
        });
    };
    let have = pkt.len().saturating_sub(start).min(frag_len);
    let frag = pkt.get(start..start + have).unwrap_or(&[]);
    // A snapped fragment is a shorter packet whose ERF wire length is the real one's.
    let wlen = usize::from(erf.wire_len());
    let mut orig_len = frag_len;
    let overhead = start + ICRC_LEN + VCRC_LEN;
    if wlen > pkt.len() && wlen > overhead && have == frag_len {
        orig_len =
            snapped_fragment_len(wlen - overhead, peek_len(frag), bth.solicited()).max(frag_len);
    }
    // The writer's convention: interface 0 for frames the local node sent, 1 for received.
    let dir = match erf.interface() {
        0 => Some(Direction::Tx),
        1 => Some(Direction::Rx),
        _ => None,
    };
    Ok(Some(CapturedFrame {
        frame_no,
        ts_ns,
        dir,
        lane: 0,
        link: FrameLink::Ib {
            slid: lrh.slid(),
            dlid: lrh.dlid(),
            dest_qpn: bth.dest_qp(),
            psn: bth.psn(),
            opcode: bth.opcode(),
            solicited: bth.solicited(),
        },
        orig_len: orig_len as u32,
        data: Bytes::copy_from_slice(frag),
    }))
}

/// The real length of a snapped IB fragment whose packet carried `padded` bytes of fragment
/// and pad on the wire: one of the four lengths that pad to it. A fragment other than the
/// last of its message carries 4096 payload bytes and the last one `h_len` modulo 4096; the
/// last one is the solicited one.
fn snapped_fragment_len(padded: usize, h_len: Option<u32>, solicited: bool) -> usize {
    let full = HEADER_LEN + FRAG_SIZE;
    let last = h_len.map(|l| {
        let l = l as usize;
        HEADER_LEN + if l == 0 { 0 } else { (l - 1) % FRAG_SIZE + 1 }
    });
    let fits = |n: usize| n <= padded && n + 3 >= padded;
    let order = if solicited {
        [last, Some(full)]
    } else {
        [Some(full), last]
    };
    order
        .into_iter()
        .flatten()
        .find(|&n| fits(n))
        .unwrap_or(padded)
}
