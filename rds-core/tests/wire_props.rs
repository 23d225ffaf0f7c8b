//! Round-trip properties of the wire codec over arbitrary input.

use proptest::prelude::*;
use rds_core::wire::{CongMap, ExtSpace, HeaderPacket, HeaderRepr, CONG_MAP_BYTES};

proptest! {
    #[test]
    fn any_48_bytes_round_trip(bytes in proptest::collection::vec(any::<u8>(), 48..100)) {
        let p = HeaderPacket::new_checked(&bytes[..]).unwrap();
        let repr = HeaderRepr::parse(&p);
        let mut out = [0u8; 48];
        repr.emit(&mut out);
        prop_assert_eq!(&out[..], &bytes[..48]);
        prop_assert_eq!(p.payload(), &bytes[48..]);
        // The extension iterator never panics and never yields more than 16 items.
        prop_assert!(repr.exts().count() <= 16);
        // Display never panics.
        let _ = repr.to_string();
    }

    #[test]
    fn short_input_is_an_error(bytes in proptest::collection::vec(any::<u8>(), 0..48)) {
        prop_assert!(HeaderPacket::new_checked(&bytes[..]).is_err());
    }

    #[test]
    fn checksummed_headers_verify(seq in any::<u64>(), ack in any::<u64>(), len in any::<u32>(),
                                  sport in any::<u16>(), dport in any::<u16>(), flags in any::<u8>(),
                                  credit in any::<u8>(), ext in any::<[u8; 16]>()) {
        let repr = HeaderRepr { seq, ack, len, sport, dport, flags, credit,
                                ext: ExtSpace::from_bytes(ext), ..Default::default() };
        let mut buf = [0u8; 48];
        repr.emit_checksummed(&mut buf);
        let p = HeaderPacket::new_checked(&buf[..]).unwrap();
        prop_assert!(p.checksum_ok());
        let mut back = HeaderRepr::parse(&p);
        back.csum = 0;
        prop_assert_eq!(back, repr);
    }

    #[test]
    fn ext_push_then_iterate(items in proptest::collection::vec(0usize..7, 0..6)) {
        use rds_core::wire::ExtHeader::*;
        let choices = [Version(0x301), Rdma { rkey: 7 }, RdmaDest { rkey: 1, offset: 2 },
                       RdmaBytes { bytes: 9, rflags: 1 }, Npaths(8), GenNum(5), SportIdx(0)];
        let mut s = ExtSpace::default();
        let mut pushed = vec![];
        for i in items {
            if s.push(choices[i]).is_ok() {
                pushed.push(choices[i]);
            }
        }
        prop_assert_eq!(s.iter().collect::<Vec<_>>(), pushed);
    }

    #[test]
    fn cong_map_round_trip(ports in proptest::collection::btree_set(any::<u16>(), 0..64)) {
        let mut m = CongMap::new();
        for &p in &ports {
            m.set(p);
        }
        let bytes = m.to_bytes();
        prop_assert_eq!(bytes.len(), CONG_MAP_BYTES);
        let back = CongMap::from_bytes(&bytes).unwrap();
        prop_assert_eq!(back.congested_ports().collect::<Vec<_>>(), ports.into_iter().collect::<Vec<_>>());
    }
}
