//! The private data of an RDS/IB connection request and its answer (`struct
//! rds_ib_connect_private`, `struct rds6_ib_connect_private` in `net/rds/ib.h`), the passive
//! side's version choice (`rds_ib_protocol_compatible`), and the RDMA CM port of a peer.
//!
//! Layout (big-endian integers): the two addresses (4 bytes each for IPv4, 16 for IPv6), then
//! protocol major, minor, the supported-minor mask (2 bytes), type of service, 3 reserved
//! bytes, the last sequence received (8 bytes), receive credits (4 bytes) and 4 reserved bytes:
//! 32 bytes in all for IPv4, 56 for IPv6. Decoding accepts longer input (the CM pads private
//! data) and reads reserved bytes as nothing; encoding writes them as zero.

use std::net::IpAddr;

use super::{RDS_IB_PORT_V4, RDS_IB_PORT_V6};

/// Protocol versions we take part in (`RDS_IB_SUPPORTED_PROTOCOLS`: 3.1 and 4.1), as the
/// supported-minor mask.
pub const SUPPORTED_MASK: u16 = 0x0003;

/// The connection private data (`struct rds_ib_connect_private` / `rds6_ib_connect_private`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnPriv {
    /// The sender's address.
    pub saddr: IpAddr,
    /// The receiver's address.
    pub daddr: IpAddr,
    /// Protocol major (3 or 4).
    pub major: u8,
    /// Protocol minor.
    pub minor: u8,
    /// Supported minor versions (bit n = minor n).
    pub minor_mask: u16,
    /// Type of service.
    pub toss: u8,
    /// Last sequence received (an acknowledgement).
    pub ack_seq: u64,
    /// Receive credits offered (0: no flow control).
    pub credit: u32,
}

impl ConnPriv {
    /// Bytes of the IPv4 form.
    pub const LEN_V4: usize = 32;
    /// Bytes of the IPv6 form.
    pub const LEN_V6: usize = 56;

    /// The wire form: 32 bytes when both addresses are IPv4, else 56 (v4-mapped as needed).
    pub fn encode(&self, v6: bool) -> Vec<u8> {
        let (mut b, off) = if v6 {
            let mut b = vec![0u8; Self::LEN_V6];
            b[0..16].copy_from_slice(&v6_octets(self.saddr));
            b[16..32].copy_from_slice(&v6_octets(self.daddr));
            (b, 32)
        } else {
            let mut b = vec![0u8; Self::LEN_V4];
            b[0..4].copy_from_slice(&v4_octets(self.saddr));
            b[4..8].copy_from_slice(&v4_octets(self.daddr));
            (b, 8)
        };
        b[off] = self.major;
        b[off + 1] = self.minor;
        b[off + 2..off + 4].copy_from_slice(&self.minor_mask.to_be_bytes());
        b[off + 4] = self.toss;
        b[off + 8..off + 16].copy_from_slice(&self.ack_seq.to_be_bytes());
        b[off + 16..off + 20].copy_from_slice(&self.credit.to_be_bytes());
        b
    }

    /// Parses the form for the family (`v6`); `None` if too short. Longer input (the CM pads
    /// private data) is accepted.
    pub fn decode(b: &[u8], v6: bool) -> Option<ConnPriv> {
        let (saddr, daddr, off) = if v6 {
            if b.len() < Self::LEN_V6 {
                return None;
            }
            let s: [u8; 16] = b[0..16].try_into().ok()?;
            let d: [u8; 16] = b[16..32].try_into().ok()?;
            (
                IpAddr::from(s).to_canonical(),
                IpAddr::from(d).to_canonical(),
                32usize,
            )
        } else {
            if b.len() < Self::LEN_V4 {
                return None;
            }
            let s: [u8; 4] = b[0..4].try_into().ok()?;
            let d: [u8; 4] = b[4..8].try_into().ok()?;
            (IpAddr::from(s), IpAddr::from(d), 8usize)
        };
        Some(ConnPriv {
            saddr,
            daddr,
            major: b[off],
            minor: b[off + 1],
            minor_mask: u16::from_be_bytes([b[off + 2], b[off + 3]]),
            toss: b[off + 4],
            ack_seq: u64::from_be_bytes(b[off + 8..off + 16].try_into().ok()?),
            credit: u32::from_be_bytes(b[off + 16..off + 20].try_into().ok()?),
        })
    }
}

fn v4_octets(ip: IpAddr) -> [u8; 4] {
    match ip.to_canonical() {
        IpAddr::V4(a) => a.octets(),
        IpAddr::V6(_) => [0; 4],
    }
}

fn v6_octets(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

/// The passive side's version choice for a connect request's private data
/// (`rds_ib_protocol_compatible`): `None` rejects.
pub fn negotiate(private_data: &[u8], v6: bool) -> Option<(u8, u8)> {
    if private_data.is_empty() {
        return None;
    }
    let Some(p) = ConnPriv::decode(private_data, v6).filter(|p| p.major != 0) else {
        // Short data or major 0: the kernel answers 4.0.
        return Some((4, 0));
    };
    let common = p.minor_mask & SUPPORTED_MASK;
    if p.major == 4 && common != 0 {
        return Some((4, (15 - common.leading_zeros()) as u8));
    }
    if (p.major, p.minor) == (3, 1) {
        return Some((3, 1));
    }
    None
}

/// The RDMA CM port for a peer address.
pub fn cm_port(ip: IpAddr) -> u16 {
    match ip.to_canonical() {
        IpAddr::V4(_) => RDS_IB_PORT_V4,
        IpAddr::V6(_) => RDS_IB_PORT_V6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn private_data_v4_bytes() {
        let p = ConnPriv {
            saddr: IpAddr::V4(Ipv4Addr::new(198, 18, 0, 4)),
            daddr: IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)),
            major: 3,
            minor: 1,
            minor_mask: 3,
            toss: 0,
            ack_seq: 0x0102_0304_0506_0708,
            credit: 0x11223344,
        };
        let b = p.encode(false);
        assert_eq!(
            b,
            [
                198, 18, 0, 4, 198, 18, 0, 2, 3, 1, 0, 3, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0x11,
                0x22, 0x33, 0x44, 0, 0, 0, 0
            ]
        );
        assert_eq!(ConnPriv::decode(&b, false), Some(p));
        let mut padded = b.clone();
        padded.resize(56, 0);
        assert_eq!(ConnPriv::decode(&padded, false), Some(p));
        assert_eq!(ConnPriv::decode(&b[..31], false), None);
    }

    #[test]
    fn private_data_v6_bytes() {
        let s: Ipv6Addr = "fd00::4".parse().unwrap();
        let d: Ipv6Addr = "fd00::2".parse().unwrap();
        let p = ConnPriv {
            saddr: IpAddr::V6(s),
            daddr: IpAddr::V6(d),
            major: 3,
            minor: 1,
            minor_mask: 3,
            toss: 5,
            ack_seq: 9,
            credit: 0,
        };
        let b = p.encode(true);
        assert_eq!(b.len(), 56);
        assert_eq!(&b[0..16], &s.octets());
        assert_eq!(&b[16..32], &d.octets());
        assert_eq!(&b[32..40], &[3, 1, 0, 3, 5, 0, 0, 0]);
        assert_eq!(&b[40..48], &9u64.to_be_bytes());
        assert_eq!(&b[48..56], &[0; 8]);
        assert_eq!(ConnPriv::decode(&b, true), Some(p));
    }

    #[test]
    fn version_negotiation_as_the_kernel() {
        let mk = |major: u8, minor: u8, mask: u16| {
            ConnPriv {
                saddr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
                daddr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
                major,
                minor,
                minor_mask: mask,
                toss: 0,
                ack_seq: 0,
                credit: 0,
            }
            .encode(false)
        };
        assert_eq!(negotiate(&mk(3, 1, 3), false), Some((3, 1)));
        assert_eq!(negotiate(&mk(4, 1, 3), false), Some((4, 1)));
        assert_eq!(negotiate(&mk(4, 0, 1), false), Some((4, 0)));
        assert_eq!(negotiate(&mk(4, 1, 4), false), None);
        assert_eq!(negotiate(&mk(3, 0, 3), false), None);
        assert_eq!(negotiate(&mk(0, 0, 0), false), Some((4, 0)));
        assert_eq!(negotiate(&[1, 2, 3], false), Some((4, 0)));
        assert_eq!(negotiate(&[], false), None);
        assert_eq!(cm_port("10.0.0.1".parse().unwrap()), 18634);
        assert_eq!(cm_port("fd00::1".parse().unwrap()), 16385);
        assert_eq!(cm_port("::ffff:10.0.0.1".parse().unwrap()), 18634);
    }
}
