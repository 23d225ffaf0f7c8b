//! One packet of an IP link (Ethernet, raw IP, Linux cooked) → the TCP segment of an RDS/TCP
//! stream it carries, through the views of [`crate::trace::net`]: the link layer, IPv4 or
//! IPv6, TCP. Packets of other protocols and ports are not RDS and are ignored; a header cut
//! short or with an impossible length is a [`PacketError`].

use std::net::{IpAddr, SocketAddr};

use super::error::PacketError;
use super::reassembly::{FlowKey, Segment};
use crate::trace::net::ethernet::{ethertype, EthernetFrame};
use crate::trace::net::ipv4::{self, Ipv4Packet};
use crate::trace::net::ipv6::{self, Ipv6Packet};
use crate::trace::net::sll::{Sll2Packet, SllPacket};
use crate::trace::net::tcp::{self, TcpPacket};
use crate::trace::net::vlan::VlanTag;
use crate::trace::net::{self, ip_version, IP_PROTO_TCP};
use crate::trace::record::Direction;
use crate::wire::RDS_TCP_PORT;

/// The link layers that carry IP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum IpLink {
    /// Ethernet II, with up to [`MAX_TAGS`] VLAN tags.
    Ethernet,
    /// The IP packet itself.
    Raw,
    /// Linux cooked v1.
    Sll,
    /// Linux cooked v2.
    Sll2,
}

/// VLAN tags stepped over (802.1ad and 802.1Q).
const MAX_TAGS: usize = 2;

const IPV4_LENGTHS: &str = "header or total length out of range";
const TCP_OFFSET: &str = "data offset out of range";

/// What the link layer found.
struct IpPacket<'a> {
    /// Captured bytes of the IP packet (no link-layer padding).
    bytes: &'a [u8],
    /// Length of the IP packet on the wire, as far as the link layer knows.
    wire_len: u64,
    dir: Option<Direction>,
}

/// What the IP layer found.
struct TcpBytes<'a> {
    src: IpAddr,
    dst: IpAddr,
    /// Captured bytes of the TCP segment.
    bytes: &'a [u8],
    /// Length of the TCP segment on the wire.
    wire_len: u64,
}

/// The RDS/TCP segment in a packet of `link` whose captured bytes are `data` and whose
/// length on the wire is `wire` (at least `data.len()`): its stream and the segment, or
/// `None` for a packet that is not RDS/TCP.
///
/// # Errors
/// A [`PacketError`] for a header cut short or with an impossible field.
pub(super) fn segment(
    link: IpLink,
    data: &[u8],
    wire: u64,
) -> Result<Option<(FlowKey, Segment<'_>)>, PacketError> {
    let ip = match link {
        IpLink::Ethernet => ethernet(data, wire)?,
        IpLink::Raw => Some(IpPacket {
            bytes: data,
            wire_len: wire,
            dir: None,
        }),
        IpLink::Sll => {
            let p = SllPacket::new_checked(data).map_err(truncated("Linux cooked"))?;
            cooked(p.protocol(), data, p.payload(), wire)
        }
        IpLink::Sll2 => {
            let p = Sll2Packet::new_checked(data).map_err(truncated("Linux cooked"))?;
            cooked(p.protocol(), data, p.payload(), wire)
        }
    };
    let Some(ip) = ip else {
        return Ok(None);
    };
    let tcp = match ip_version(ip.bytes).map_err(truncated("IP"))? {
        4 => ipv4(ip.bytes, ip.wire_len)?,
        6 => ipv6(ip.bytes, ip.wire_len)?,
        _ => {
            return Err(PacketError::Malformed {
                layer: "IP",
                what: "version is neither 4 nor 6",
            })
        }
    };
    match tcp {
        Some(t) => tcp_segment(t, ip.dir),
        None => Ok(None),
    }
}

/// A view's error as the [`PacketError`] of `layer`, for a check that can only find the
/// header cut short.
fn truncated(layer: &'static str) -> impl Fn(net::Error) -> PacketError {
    move |_| PacketError::Truncated { layer }
}

/// A view's error as the [`PacketError`] of `layer`; `what` says what is malformed.
fn header_error(layer: &'static str, what: &'static str) -> impl Fn(net::Error) -> PacketError {
    move |e| match e {
        net::Error::Truncated => PacketError::Truncated { layer },
        net::Error::Malformed => PacketError::Malformed { layer, what },
    }
}

/// Direction from the synthetic MAC addresses of [`crate::trace::node_mac`]: `02:00:..` is the
/// capturing node, `02:01:..` its peer.
fn mac_direction(dst: [u8; 6], src: [u8; 6]) -> Option<Direction> {
    match ([dst[0], dst[1]], [src[0], src[1]]) {
        ([0x02, 0x01], [0x02, 0x00]) => Some(Direction::Tx),
        ([0x02, 0x00], [0x02, 0x01]) => Some(Direction::Rx),
        _ => None,
    }
}

fn ethernet(data: &[u8], wire: u64) -> Result<Option<IpPacket<'_>>, PacketError> {
    let frame = EthernetFrame::new_checked(data).map_err(truncated("Ethernet"))?;
    let mut ether = frame.ethertype();
    let mut payload = frame.payload();
    for _ in 0..MAX_TAGS {
        if ethertype::is_tag(ether) {
            let tag = VlanTag::new_checked(payload).map_err(truncated("Ethernet"))?;
            ether = tag.ethertype();
            payload = tag.payload();
        }
    }
    if ether != ethertype::IPV4 && ether != ethertype::IPV6 {
        return Ok(None);
    }
    Ok(Some(IpPacket {
        bytes: payload,
        wire_len: wire - (data.len() - payload.len()) as u64,
        dir: mac_direction(frame.dst_addr(), frame.src_addr()),
    }))
}

/// The IP packet after a Linux cooked header: `payload` of `data`, whose protocol is
/// `protocol`.
fn cooked<'a>(protocol: u16, data: &[u8], payload: &'a [u8], wire: u64) -> Option<IpPacket<'a>> {
    if protocol != ethertype::IPV4 && protocol != ethertype::IPV6 {
        return None;
    }
    Some(IpPacket {
        bytes: payload,
        wire_len: wire - (data.len() - payload.len()) as u64,
        dir: None,
    })
}

fn ipv4(b: &[u8], wire: u64) -> Result<Option<TcpBytes<'_>>, PacketError> {
    let ip = Ipv4Packet::new_checked(b).map_err(truncated("IPv4"))?;
    let ihl = ip.header_len();
    // Captures on a sending host with segmentation offload may show total length 0.
    let total = match ip.total_len() {
        0 => wire,
        n => u64::from(n),
    };
    if ihl < ipv4::HEADER_LEN || total < ihl as u64 {
        return Err(PacketError::Malformed {
            layer: "IPv4",
            what: IPV4_LENGTHS,
        });
    }
    ip.check_header_len()
        .map_err(header_error("IPv4", IPV4_LENGTHS))?;
    if ip.more_frags() || ip.frag_offset() != 0 || ip.protocol() != IP_PROTO_TCP {
        // IP fragments are not reassembled; other protocols are not RDS.
        return Ok(None);
    }
    // The segment ends where the packet does or where the capture does (ihl <= both).
    let end = total.min(b.len() as u64) as usize;
    Ok(Some(TcpBytes {
        src: IpAddr::V4(ip.src_addr()),
        dst: IpAddr::V4(ip.dst_addr()),
        bytes: &ip.payload()[..end - ihl],
        wire_len: total - ihl as u64,
    }))
}

fn ipv6(b: &[u8], wire: u64) -> Result<Option<TcpBytes<'_>>, PacketError> {
    let ip = Ipv6Packet::new_checked(b).map_err(truncated("IPv6"))?;
    let total = match ip.payload_len() {
        0 => wire.max(ipv6::HEADER_LEN as u64),
        n => ipv6::HEADER_LEN as u64 + u64::from(n),
    };
    let (next, off) = ip.upper_layer().map_err(truncated("IPv6 extension"))?;
    if next != IP_PROTO_TCP {
        // Fragments (44) and other protocols.
        return Ok(None);
    }
    if off as u64 > total || off > b.len() {
        return Err(PacketError::Malformed {
            layer: "IPv6",
            what: "extension headers exceed the packet",
        });
    }
    // The segment ends where the packet does or where the capture does (off <= both).
    let end = total.min(b.len() as u64) as usize;
    Ok(Some(TcpBytes {
        src: IpAddr::V6(ip.src_addr()),
        dst: IpAddr::V6(ip.dst_addr()),
        bytes: &b[off..end],
        wire_len: total - off as u64,
    }))
}

fn tcp_segment(
    t: TcpBytes<'_>,
    dir: Option<Direction>,
) -> Result<Option<(FlowKey, Segment<'_>)>, PacketError> {
    let seg = TcpPacket::new_checked(t.bytes).map_err(truncated("TCP"))?;
    let (sport, dport) = (seg.src_port(), seg.dst_port());
    if sport != RDS_TCP_PORT && dport != RDS_TCP_PORT {
        return Ok(None);
    }
    let doff = seg.header_len();
    if doff < tcp::HEADER_LEN || doff as u64 > t.wire_len {
        return Err(PacketError::Malformed {
            layer: "TCP",
            what: TCP_OFFSET,
        });
    }
    seg.check_header_len()
        .map_err(header_error("TCP", TCP_OFFSET))?;
    let client = if sport == RDS_TCP_PORT { dport } else { sport };
    let key = (SocketAddr::new(t.src, sport), SocketAddr::new(t.dst, dport));
    Ok(Some((
        key,
        Segment {
            seq: seg.seq_number(),
            flags: seg.flags(),
            payload: seg.payload(),
            reported: t.wire_len - doff as u64,
            dir,
            lane: (client % 8) as u8,
        },
    )))
}
