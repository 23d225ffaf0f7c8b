//! [`PcapFrames`]: a pcap capture → RDS frames (for `rds-trace -r`).

use std::collections::{HashMap, VecDeque};
use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use bytes::Bytes;
use pcap_file::pcap::{PcapReader, RawPcapPacket};
use pcap_file::{PcapError, TsResolution};

use super::frame::TraceRecord;
use super::ib::{
    erf_timestamp_ns, BTH_LEN, ERF_LEN, ERF_TYPE_INFINIBAND, LNH_IBA_GLOBAL, LNH_IBA_LOCAL,
    LRH_LEN, OP_RC_SEND_ONLY, OP_RC_SEND_ONLY_IMM,
};
use super::pcap::{LINKTYPE_ERF, LINKTYPE_ETHERNET};
use super::record::{Direction, Transport};
use crate::wire::{HeaderRepr, HEADER_LEN, MAX_MSG_SIZE, RDS_TCP_PORT};

const LINKTYPE_RAW: u32 = 101;
const LINKTYPE_LINUX_SLL: u32 = 113;
const LINKTYPE_IPV4: u32 = 228;
const LINKTYPE_IPV6: u32 = 229;
const LINKTYPE_LINUX_SLL2: u32 = 276;

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86DD;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88A8;

const TCP_FIN: u8 = 0x01;
const TCP_SYN: u8 = 0x02;
const TCP_RST: u8 = 0x04;

/// How a [`CapturedFrame`] travelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameLink {
    /// RDS/TCP.
    Tcp {
        /// Sender's TCP endpoint.
        src: SocketAddr,
        /// Receiver's TCP endpoint.
        dst: SocketAddr,
    },
    /// RDS over InfiniBand: one RC SEND Only packet.
    Ib {
        /// Source LID.
        slid: u16,
        /// Destination LID.
        dlid: u16,
        /// Destination queue pair (the receiver's QP).
        dest_qpn: u32,
        /// Packet sequence number.
        psn: u32,
        /// BTH opcode (0x04 SEND Only or 0x05 SEND Only with Immediate).
        opcode: u8,
        /// The solicited-event bit.
        solicited: bool,
    },
}

/// One RDS frame read back from a capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedFrame {
    /// Number (1-based, as Wireshark counts) of the capture packet that completed the frame:
    /// the one carrying its last captured byte. Wireshark shows the frame's RDS fields there.
    pub frame_no: u64,
    /// Timestamp of that packet, nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// Direction relative to the capturing node, when the capture records it (MAC convention
    /// of Ethernet captures, interface number of ERF captures; see the module documentation).
    pub dir: Option<Direction>,
    /// Lane: TCP client port % 8 (0 for IB).
    pub lane: u8,
    /// Transport endpoints.
    pub link: FrameLink,
    /// Length of the frame on the wire: `48 + h_len` over TCP, the fragment length over IB.
    pub orig_len: u32,
    /// The captured bytes of the frame: header and payload, possibly cut short.
    pub data: Bytes,
}

impl CapturedFrame {
    /// Whether bytes of the frame are missing from the capture.
    pub fn is_truncated(&self) -> bool {
        (self.data.len() as u64) < u64::from(self.orig_len)
    }

    /// The RDS header, if its 48 bytes were captured.
    pub fn header(&self) -> Option<HeaderRepr> {
        HeaderRepr::from_bytes(&self.data).ok()
    }

    /// The sender's IP address (TCP only).
    pub fn src_ip(&self) -> Option<IpAddr> {
        match self.link {
            FrameLink::Tcp { src, .. } => Some(src.ip()),
            FrameLink::Ib { .. } => None,
        }
    }

    /// The receiver's IP address (TCP only).
    pub fn dst_ip(&self) -> Option<IpAddr> {
        match self.link {
            FrameLink::Tcp { dst, .. } => Some(dst.ip()),
            FrameLink::Ib { .. } => None,
        }
    }

    /// The trace record this frame came from, for RDS/TCP frames whose direction is known.
    /// (IB frames do not carry the sender's QP number, so they cannot be turned back.)
    pub fn to_record(&self) -> Option<TraceRecord> {
        let FrameLink::Tcp { src, dst } = self.link else {
            return None;
        };
        let (local, peer) = match self.dir? {
            Direction::Tx => (src, dst),
            Direction::Rx => (dst, src),
        };
        Some(TraceRecord {
            ts_ns: self.ts_ns,
            dir: self.dir?,
            local: local.ip(),
            peer: peer.ip(),
            lane: self.lane,
            transport: Transport::Tcp { local, peer },
            orig_len: self.orig_len,
            data: self.data.clone(),
        })
    }
}

/// A problem with one packet or one TCP stream; reading goes on after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    /// A protocol header is cut short in the capture.
    #[error("{layer} header truncated")]
    Truncated {
        /// Which header.
        layer: &'static str,
    },
    /// A protocol header has an impossible field.
    #[error("malformed {layer} header: {what}")]
    Malformed {
        /// Which header.
        layer: &'static str,
        /// What is wrong.
        what: &'static str,
    },
    /// Bytes of a TCP stream are missing where an RDS header was due, so frame boundaries are
    /// uncertain until the next frame is found; `partial_header` header bytes were dropped.
    /// The next captured byte is taken as the start of a frame.
    #[error("{missing} bytes missing from the TCP stream where an RDS header was due ({partial_header} header bytes dropped)")]
    StreamGap {
        /// Missing bytes.
        missing: u64,
        /// Bytes of a partial header that were dropped.
        partial_header: usize,
    },
    /// An RDS header's `h_len` exceeds 1 MiB: the stream is not RDS or out of step. Bytes are
    /// dropped up to the next TCP segment, which is taken as the start of a frame.
    #[error("implausible RDS payload length {h_len}")]
    ImplausibleLength {
        /// The `h_len` read.
        h_len: u32,
    },
}

/// Errors of [`PcapFrames`].
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Not a classic pcap file, an I/O error, or the file ends inside a record. Fatal: the
    /// iterator ends after it.
    #[error("pcap input: {0}")]
    Pcap(#[from] PcapError),
    /// The capture's link type is not one this reader understands. Fatal.
    #[error("unsupported link type {0}")]
    UnsupportedLinkType(u32),
    /// A problem in one packet (1-based number). Not fatal.
    #[error("packet {frame_no}: {error}")]
    Packet {
        /// The packet's number.
        frame_no: u64,
        /// What is wrong.
        error: PacketError,
    },
}

impl ReadError {
    /// Whether reading stops after this error.
    pub fn is_fatal(&self) -> bool {
        !matches!(self, ReadError::Packet { .. })
    }
}

/// Counters of a [`PcapFrames`] reader.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Capture packets read.
    pub packets: u64,
    /// RDS frames yielded.
    pub frames: u64,
    /// Packets that are not RDS (other protocols, other ports, IP fragments, other IB
    /// opcodes, pure TCP ACKs are not counted here).
    pub ignored: u64,
    /// Non-fatal errors reported.
    pub errors: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    Ethernet,
    Raw,
    Ipv4,
    Ipv6,
    Sll,
    Sll2,
    Erf,
}

/// Reads a classic pcap capture (from [`super::PcapSink`] or tcpdump) and yields its RDS
/// frames in the order they complete.
///
/// Link types: Ethernet (1, with up to two VLAN tags), raw IP (101, 228, 229), Linux cooked
/// (113, 276) and ERF (197, InfiniBand records). RDS/TCP is recognised by TCP port 16385 on
/// either side; each direction of each 4-tuple is reassembled as a byte stream (by sequence
/// number: retransmitted bytes are dropped, missing bytes are gaps) and cut into frames by the
/// 48-byte header's `h_len`. A frame whose bytes stop being captured (a snapped packet or a
/// gap) is yielded at once with the bytes it has; the stream then skips to the frame's end.
/// SYN starts a stream afresh, FIN and RST end it. Over ERF, every RC SEND Only packet is one
/// frame.
///
/// Never panics on any input. Per-packet problems are `Err` items with
/// [`ReadError::is_fatal`] false; reading continues after them.
#[derive(Debug)]
pub struct PcapFrames<R: Read> {
    reader: PcapReader<R>,
    st: State,
}

#[derive(Debug)]
struct State {
    link: Link,
    linktype: u32,
    nanos: bool,
    frame_no: u64,
    flows: HashMap<(SocketAddr, SocketAddr), Flow>,
    ready: VecDeque<Result<CapturedFrame, ReadError>>,
    done: bool,
    stats: ReadStats,
}

#[derive(Debug)]
enum Parse {
    /// Collecting the 48 header bytes.
    Header(Vec<u8>),
    /// Header complete; collecting the payload. `buf` holds header and payload so far.
    Body { buf: Vec<u8>, total: u64 },
    /// Dropping the rest of a frame that was already yielded.
    Skip(u64),
    /// Dropping bytes until the next segment.
    Resync,
}

#[derive(Debug)]
struct Flow {
    next_seq: Option<u32>,
    parse: Parse,
    dir: Option<Direction>,
    lane: u8,
    /// Packet number and timestamp of the last packet that added bytes to the current frame.
    last_no: u64,
    last_ts: u64,
}

impl Flow {
    fn new() -> Self {
        Flow {
            next_seq: None,
            parse: Parse::Header(Vec::new()),
            dir: None,
            lane: 0,
            last_no: 0,
            last_ts: 0,
        }
    }
}

/// What the link layer found.
struct IpPacket<'a> {
    /// Captured bytes of the IP packet (no link-layer padding).
    bytes: &'a [u8],
    /// Length of the IP packet on the wire, as far as the link layer knows.
    wire_len: u64,
    dir: Option<Direction>,
}

fn be16(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(o..o + 2)?.try_into().ok()?))
}

fn be32(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(o..o + 4)?.try_into().ok()?))
}

/// Direction from the synthetic MAC addresses of [`super::node_mac`].
fn mac_direction(dst: &[u8], src: &[u8]) -> Option<Direction> {
    match (dst.get(..2)?, src.get(..2)?) {
        ([0x02, 0x01], [0x02, 0x00]) => Some(Direction::Tx),
        ([0x02, 0x00], [0x02, 0x01]) => Some(Direction::Rx),
        _ => None,
    }
}

impl<R: Read> PcapFrames<R> {
    /// Opens a capture: reads and checks the file header.
    ///
    /// # Errors
    /// [`ReadError::Pcap`] if this is not a classic pcap file (pcapng is not read),
    /// [`ReadError::UnsupportedLinkType`] for other link types.
    pub fn new(input: R) -> Result<Self, ReadError> {
        let reader = PcapReader::new(input)?;
        let header = reader.header();
        let linktype = u32::from(header.datalink);
        let link = match linktype {
            LINKTYPE_ETHERNET => Link::Ethernet,
            LINKTYPE_RAW => Link::Raw,
            LINKTYPE_IPV4 => Link::Ipv4,
            LINKTYPE_IPV6 => Link::Ipv6,
            LINKTYPE_LINUX_SLL => Link::Sll,
            LINKTYPE_LINUX_SLL2 => Link::Sll2,
            LINKTYPE_ERF => Link::Erf,
            other => return Err(ReadError::UnsupportedLinkType(other)),
        };
        Ok(PcapFrames {
            reader,
            st: State {
                link,
                linktype,
                nanos: header.ts_resolution == TsResolution::NanoSecond,
                frame_no: 0,
                flows: HashMap::new(),
                ready: VecDeque::new(),
                done: false,
                stats: ReadStats::default(),
            },
        })
    }

    /// The capture's link type.
    pub fn link_type(&self) -> u32 {
        self.st.linktype
    }

    /// Counters so far.
    pub fn stats(&self) -> ReadStats {
        self.st.stats
    }
}

impl<R: Read> Iterator for PcapFrames<R> {
    type Item = Result<CapturedFrame, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(item) = self.st.ready.pop_front() {
                match &item {
                    Ok(_) => self.st.stats.frames += 1,
                    Err(e) if !e.is_fatal() => self.st.stats.errors += 1,
                    Err(_) => {}
                }
                return Some(item);
            }
            if self.st.done {
                return None;
            }
            match self.reader.next_raw_packet() {
                None => {
                    self.st.done = true;
                    self.st.finish_all();
                }
                Some(Err(e)) => {
                    self.st.done = true;
                    self.st.finish_all();
                    self.st.ready.push_back(Err(ReadError::Pcap(e)));
                }
                Some(Ok(raw)) => self.st.packet(&raw),
            }
        }
    }
}

impl State {
    fn error(&mut self, error: PacketError) {
        self.ready.push_back(Err(ReadError::Packet {
            frame_no: self.frame_no,
            error,
        }));
    }

    fn packet(&mut self, raw: &RawPcapPacket<'_>) {
        self.frame_no += 1;
        self.stats.packets += 1;
        let frac = u64::from(raw.ts_frac);
        let ts_ns = u64::from(raw.ts_sec)
            .saturating_mul(1_000_000_000)
            .saturating_add(if self.nanos {
                frac
            } else {
                frac.saturating_mul(1000)
            });
        let data: &[u8] = &raw.data;
        let wire = u64::from(raw.orig_len).max(data.len() as u64);
        let ip = match self.link {
            Link::Erf => return self.erf(data),
            Link::Ethernet => self.ethernet(data, wire),
            Link::Raw | Link::Ipv4 | Link::Ipv6 => Some(IpPacket {
                bytes: data,
                wire_len: wire,
                dir: None,
            }),
            Link::Sll => self.cooked(data, wire, 16, 14),
            Link::Sll2 => self.cooked(data, wire, 20, 0),
        };
        if let Some(ip) = ip {
            self.ip(ip, ts_ns);
        }
    }

    fn cooked<'a>(
        &mut self,
        data: &'a [u8],
        wire: u64,
        hdr: usize,
        proto_at: usize,
    ) -> Option<IpPacket<'a>> {
        let Some(proto) = be16(data, proto_at).filter(|_| data.len() >= hdr) else {
            self.error(PacketError::Truncated {
                layer: "Linux cooked",
            });
            return None;
        };
        if proto != ETHERTYPE_IPV4 && proto != ETHERTYPE_IPV6 {
            self.stats.ignored += 1;
            return None;
        }
        Some(IpPacket {
            bytes: &data[hdr..],
            wire_len: wire - hdr as u64,
            dir: None,
        })
    }

    fn ethernet<'a>(&mut self, data: &'a [u8], wire: u64) -> Option<IpPacket<'a>> {
        let mut off = 12;
        let mut ethertype = be16(data, off);
        for _ in 0..2 {
            if matches!(ethertype, Some(ETHERTYPE_VLAN | ETHERTYPE_QINQ)) {
                off += 4;
                ethertype = be16(data, off);
            }
        }
        let Some(ethertype) = ethertype else {
            self.error(PacketError::Truncated { layer: "Ethernet" });
            return None;
        };
        off += 2;
        if ethertype != ETHERTYPE_IPV4 && ethertype != ETHERTYPE_IPV6 {
            self.stats.ignored += 1;
            return None;
        }
        Some(IpPacket {
            bytes: &data[off..],
            wire_len: wire - off as u64,
            dir: mac_direction(&data[0..6], &data[6..12]),
        })
    }

    fn ip(&mut self, ip: IpPacket<'_>, ts_ns: u64) {
        let b = ip.bytes;
        let Some(&first) = b.first() else {
            self.error(PacketError::Truncated { layer: "IP" });
            return;
        };
        // (source, destination, captured TCP bytes, TCP length on the wire)
        let parsed = match first >> 4 {
            4 => self.ipv4(b, ip.wire_len),
            6 => self.ipv6(b, ip.wire_len),
            _ => {
                self.error(PacketError::Malformed {
                    layer: "IP",
                    what: "version is neither 4 nor 6",
                });
                return;
            }
        };
        if let Some((src, dst, tcp, tcp_wire)) = parsed {
            self.tcp(src, dst, tcp, tcp_wire, ip.dir, ts_ns);
        }
    }

    fn ipv4<'a>(&mut self, b: &'a [u8], wire: u64) -> Option<(IpAddr, IpAddr, &'a [u8], u64)> {
        if b.len() < 20 {
            self.error(PacketError::Truncated { layer: "IPv4" });
            return None;
        }
        let ihl = usize::from(b[0] & 0x0f) * 4;
        let total = u64::from(u16::from_be_bytes([b[2], b[3]]));
        // Captures on a sending host with segmentation offload may show total length 0.
        let total = if total == 0 { wire } else { total };
        if ihl < 20 || total < ihl as u64 {
            self.error(PacketError::Malformed {
                layer: "IPv4",
                what: "header or total length out of range",
            });
            return None;
        }
        if b.len() < ihl {
            self.error(PacketError::Truncated { layer: "IPv4" });
            return None;
        }
        let frag = u16::from_be_bytes([b[6], b[7]]);
        if frag & 0x3fff != 0 || b[9] != 6 {
            // IP fragments are not reassembled; other protocols are not RDS.
            self.stats.ignored += 1;
            return None;
        }
        let src = IpAddr::V4(Ipv4Addr::new(b[12], b[13], b[14], b[15]));
        let dst = IpAddr::V4(Ipv4Addr::new(b[16], b[17], b[18], b[19]));
        let end = (total.min(b.len() as u64)) as usize;
        Some((src, dst, &b[ihl..end], total - ihl as u64))
    }

    fn ipv6<'a>(&mut self, b: &'a [u8], wire: u64) -> Option<(IpAddr, IpAddr, &'a [u8], u64)> {
        if b.len() < 40 {
            self.error(PacketError::Truncated { layer: "IPv6" });
            return None;
        }
        let plen = u64::from(u16::from_be_bytes([b[4], b[5]]));
        let total = if plen == 0 { wire.max(40) } else { 40 + plen };
        let mut octets = [0u8; 16];
        octets.copy_from_slice(&b[8..24]);
        let src = IpAddr::V6(Ipv6Addr::from(octets));
        octets.copy_from_slice(&b[24..40]);
        let dst = IpAddr::V6(Ipv6Addr::from(octets));
        let mut next = b[6];
        let mut off = 40usize;
        // Hop-by-hop, routing and destination options may precede TCP.
        for _ in 0..8 {
            match next {
                0 | 43 | 60 => {
                    let (Some(&nh), Some(&len)) = (b.get(off), b.get(off + 1)) else {
                        self.error(PacketError::Truncated {
                            layer: "IPv6 extension",
                        });
                        return None;
                    };
                    next = nh;
                    off += (usize::from(len) + 1) * 8;
                }
                _ => break,
            }
        }
        if next != 6 {
            // Fragments (44) and other protocols.
            self.stats.ignored += 1;
            return None;
        }
        if off as u64 > total || off > b.len() {
            self.error(PacketError::Malformed {
                layer: "IPv6",
                what: "extension headers exceed the packet",
            });
            return None;
        }
        let end = (total.min(b.len() as u64)) as usize;
        Some((src, dst, &b[off..end], total - off as u64))
    }

    fn tcp(
        &mut self,
        src_ip: IpAddr,
        dst_ip: IpAddr,
        b: &[u8],
        wire: u64,
        dir: Option<Direction>,
        ts_ns: u64,
    ) {
        if b.len() < 20 {
            self.error(PacketError::Truncated { layer: "TCP" });
            return;
        }
        let sport = u16::from_be_bytes([b[0], b[1]]);
        let dport = u16::from_be_bytes([b[2], b[3]]);
        if sport != RDS_TCP_PORT && dport != RDS_TCP_PORT {
            self.stats.ignored += 1;
            return;
        }
        let seq = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
        let doff = usize::from(b[12] >> 4) * 4;
        let flags = b[13];
        if doff < 20 || doff as u64 > wire {
            self.error(PacketError::Malformed {
                layer: "TCP",
                what: "data offset out of range",
            });
            return;
        }
        if b.len() < doff {
            self.error(PacketError::Truncated { layer: "TCP" });
            return;
        }
        let payload = &b[doff..];
        let reported = wire - doff as u64;
        let client = if sport == RDS_TCP_PORT { dport } else { sport };
        let key = (
            SocketAddr::new(src_ip, sport),
            SocketAddr::new(dst_ip, dport),
        );
        let seg = Segment {
            seq,
            flags,
            payload,
            reported,
            ts_ns,
            dir,
            lane: (client % 8) as u8,
        };
        self.segment(key, seg);
    }

    fn segment(&mut self, key: (SocketAddr, SocketAddr), seg: Segment<'_>) {
        let mut flow = self.flows.remove(&key).unwrap_or_else(Flow::new);
        flow.dir = seg.dir;
        flow.lane = seg.lane;
        if seg.flags & (TCP_SYN | TCP_RST) != 0 {
            self.end_stream(key, &mut flow);
            if seg.flags & TCP_SYN != 0 {
                flow.next_seq = Some(seg.seq.wrapping_add(1));
                self.flows.insert(key, flow);
            }
            return;
        }
        let next = *flow.next_seq.get_or_insert(seg.seq);
        if matches!(flow.parse, Parse::Resync) {
            flow.parse = Parse::Header(Vec::new());
        }
        let delta = seg.seq.wrapping_sub(next) as i32;
        let mut payload = seg.payload;
        let mut reported = seg.reported;
        if delta > 0 {
            self.missing(key, &mut flow, delta as u64);
        } else if delta < 0 {
            // Bytes seen before (retransmission or overlap): keep only what is new.
            let old = u64::from(delta.unsigned_abs());
            if old >= reported {
                if seg.flags & TCP_FIN != 0 {
                    self.end_stream(key, &mut flow);
                } else {
                    self.flows.insert(key, flow);
                }
                return;
            }
            let cut = (old as usize).min(payload.len());
            payload = &payload[cut..];
            reported -= old;
        }
        let advance = reported;
        if !payload.is_empty() {
            flow.last_no = self.frame_no;
            flow.last_ts = seg.ts_ns;
            self.present(key, &mut flow, payload);
        }
        let missing = reported - payload.len() as u64;
        if missing > 0 {
            self.missing(key, &mut flow, missing);
        }
        flow.next_seq = Some(
            next.wrapping_add(delta.max(0) as u32)
                .wrapping_add(advance as u32),
        );
        if seg.flags & TCP_FIN != 0 {
            self.end_stream(key, &mut flow);
            flow.next_seq = flow.next_seq.map(|s| s.wrapping_add(1));
        }
        self.flows.insert(key, flow);
    }

    /// Captured stream bytes.
    fn present(&mut self, key: (SocketAddr, SocketAddr), flow: &mut Flow, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            match &mut flow.parse {
                Parse::Header(buf) => {
                    let take = (HEADER_LEN - buf.len()).min(bytes.len());
                    buf.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if buf.len() == HEADER_LEN {
                        let h_len = u32::from_be_bytes([buf[16], buf[17], buf[18], buf[19]]);
                        if h_len as usize > MAX_MSG_SIZE {
                            flow.parse = Parse::Resync;
                            self.error(PacketError::ImplausibleLength { h_len });
                            return;
                        }
                        let total = HEADER_LEN as u64 + u64::from(h_len);
                        let buf = std::mem::take(buf);
                        flow.parse = Parse::Body { buf, total };
                        self.complete_if_done(key, flow);
                    }
                }
                Parse::Body { buf, total } => {
                    let want = (*total - buf.len() as u64) as usize;
                    let take = want.min(bytes.len());
                    buf.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    self.complete_if_done(key, flow);
                }
                Parse::Skip(rest) => {
                    let take = (*rest).min(bytes.len() as u64);
                    *rest -= take;
                    bytes = &bytes[take as usize..];
                    if *rest == 0 {
                        flow.parse = Parse::Header(Vec::new());
                    }
                }
                Parse::Resync => return,
            }
        }
    }

    /// Stream bytes that are not in the capture.
    fn missing(&mut self, key: (SocketAddr, SocketAddr), flow: &mut Flow, mut n: u64) {
        while n > 0 {
            match &mut flow.parse {
                Parse::Header(buf) => {
                    let partial_header = buf.len();
                    flow.parse = Parse::Header(Vec::new());
                    self.error(PacketError::StreamGap {
                        missing: n,
                        partial_header,
                    });
                    return;
                }
                Parse::Body { buf, total } => {
                    let rest = *total - buf.len() as u64;
                    let buf = std::mem::take(buf);
                    let total = *total;
                    self.emit(key, flow, buf, total);
                    flow.parse = Parse::Skip(rest);
                }
                Parse::Skip(rest) => {
                    let take = (*rest).min(n);
                    *rest -= take;
                    n -= take;
                    if *rest == 0 {
                        flow.parse = Parse::Header(Vec::new());
                    }
                }
                Parse::Resync => return,
            }
        }
    }

    fn complete_if_done(&mut self, key: (SocketAddr, SocketAddr), flow: &mut Flow) {
        if let Parse::Body { buf, total } = &mut flow.parse {
            if buf.len() as u64 == *total {
                let buf = std::mem::take(buf);
                let total = *total;
                flow.parse = Parse::Header(Vec::new());
                self.emit(key, flow, buf, total);
            }
        }
    }

    fn emit(&mut self, key: (SocketAddr, SocketAddr), flow: &Flow, buf: Vec<u8>, total: u64) {
        self.ready.push_back(Ok(CapturedFrame {
            frame_no: flow.last_no,
            ts_ns: flow.last_ts,
            dir: flow.dir,
            lane: flow.lane,
            link: FrameLink::Tcp {
                src: key.0,
                dst: key.1,
            },
            orig_len: u32::try_from(total).unwrap_or(u32::MAX),
            data: Bytes::from(buf),
        }));
    }

    /// End of a stream (FIN, RST, SYN, end of file): a frame with a complete header is
    /// yielded with what it has; a partial header is dropped.
    fn end_stream(&mut self, key: (SocketAddr, SocketAddr), flow: &mut Flow) {
        if let Parse::Body { buf, total } = &mut flow.parse {
            let buf = std::mem::take(buf);
            let total = *total;
            self.emit(key, flow, buf, total);
        }
        flow.parse = Parse::Header(Vec::new());
    }

    fn finish_all(&mut self) {
        let mut flows: Vec<_> = std::mem::take(&mut self.flows).into_iter().collect();
        // Deterministic order: by the packet that last fed each flow.
        flows.sort_by_key(|(k, f)| (f.last_no, *k));
        for (key, mut flow) in flows {
            self.end_stream(key, &mut flow);
        }
    }

    fn erf(&mut self, data: &[u8]) {
        if data.len() < ERF_LEN {
            self.error(PacketError::Truncated { layer: "ERF" });
            return;
        }
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&data[..8]);
        let ts_ns = erf_timestamp_ns(u64::from_le_bytes(ts));
        let ty = data[8];
        let flags = data[9];
        let mut off = ERF_LEN;
        if ty & 0x80 != 0 {
            // Extension headers: 8 bytes each, the top bit of the first byte says "more".
            loop {
                let Some(&h) = data.get(off) else {
                    self.error(PacketError::Truncated {
                        layer: "ERF extension",
                    });
                    return;
                };
                off += 8;
                if h & 0x80 == 0 {
                    break;
                }
            }
        }
        if ty & 0x7f != ERF_TYPE_INFINIBAND {
            self.stats.ignored += 1;
            return;
        }
        let pkt = data.get(off..).unwrap_or(&[]);
        if pkt.len() < LRH_LEN {
            self.error(PacketError::Truncated { layer: "IB LRH" });
            return;
        }
        let lnh = pkt[1] & 0x03;
        let dlid = u16::from_be_bytes([pkt[2], pkt[3]]);
        let words = usize::from(u16::from_be_bytes([pkt[4], pkt[5]]) & 0x7ff);
        let slid = u16::from_be_bytes([pkt[6], pkt[7]]);
        let bth = match lnh {
            LNH_IBA_LOCAL => LRH_LEN,
            LNH_IBA_GLOBAL => LRH_LEN + 40,
            _ => {
                self.stats.ignored += 1;
                return;
            }
        };
        if pkt.len() < bth + BTH_LEN {
            self.error(PacketError::Truncated { layer: "IB BTH" });
            return;
        }
        let opcode = pkt[bth];
        let solicited = pkt[bth + 1] & 0x80 != 0;
        let pad = usize::from((pkt[bth + 1] >> 4) & 0x03);
        let dest_qpn = be32(pkt, bth + 4).unwrap_or(0) & 0xff_ffff;
        let psn = be32(pkt, bth + 8).unwrap_or(0) & 0xff_ffff;
        let start = match opcode {
            OP_RC_SEND_ONLY => bth + BTH_LEN,
            OP_RC_SEND_ONLY_IMM => bth + BTH_LEN + 4,
            _ => {
                self.stats.ignored += 1;
                return;
            }
        };
        // PktLen covers LRH through ICRC; the fragment is what lies between the transport
        // headers and the pad + ICRC.
        let Some(frag_len) = (words * 4).checked_sub(start + pad + 4) else {
            self.error(PacketError::Malformed {
                layer: "IB LRH",
                what: "packet length shorter than its headers",
            });
            return;
        };
        let have = pkt.len().saturating_sub(start).min(frag_len);
        let frag = pkt.get(start..start + have).unwrap_or(&[]);
        // A snapped fragment is a shorter packet whose ERF wire length is the real one's.
        let wlen = usize::from(u16::from_be_bytes([data[14], data[15]]));
        let mut orig_len = frag_len;
        let overhead = start + 4 + 2;
        if wlen > pkt.len() && wlen > overhead && have == frag_len {
            let h_len = be32(frag, 16);
            orig_len = snapped_fragment_len(wlen - overhead, h_len, solicited).max(frag_len);
        }
        let dir = match flags & 0x03 {
            0 => Some(Direction::Tx),
            1 => Some(Direction::Rx),
            _ => None,
        };
        self.ready.push_back(Ok(CapturedFrame {
            frame_no: self.frame_no,
            ts_ns,
            dir,
            lane: 0,
            link: FrameLink::Ib {
                slid,
                dlid,
                dest_qpn,
                psn,
                opcode,
                solicited,
            },
            orig_len: orig_len as u32,
            data: Bytes::copy_from_slice(frag),
        }));
    }
}

/// The real length of a snapped IB fragment whose packet carried `padded` bytes of fragment
/// and pad on the wire: one of the four lengths that pad to it. A fragment other than the
/// last of its message carries 4096 payload bytes and the last one `h_len` modulo 4096; the
/// last one is the solicited one.
fn snapped_fragment_len(padded: usize, h_len: Option<u32>, solicited: bool) -> usize {
    let full = HEADER_LEN + crate::wire::FRAG_SIZE;
    let last = h_len.map(|l| {
        let l = l as usize;
        HEADER_LEN
            + if l == 0 {
                0
            } else {
                (l - 1) % crate::wire::FRAG_SIZE + 1
            }
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

/// One TCP segment of an RDS stream.
struct Segment<'a> {
    seq: u32,
    flags: u8,
    /// Captured payload bytes.
    payload: &'a [u8],
    /// Payload length on the wire.
    reported: u64,
    ts_ns: u64,
    dir: Option<Direction>,
    lane: u8,
}
