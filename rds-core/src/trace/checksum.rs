//! Checksums of the synthesized headers: the Internet checksum (IPv4 header, TCP), and the
//! two InfiniBand CRCs.

/// Adds `data` as big-endian 16-bit words to a one's-complement accumulator. Every slice but
/// the last one of a sum must have an even length.
///
/// Eight bytes at a time: a big-endian 32-bit word is `hi * 65536 + lo`, and 65536 ≡ 1
/// modulo 65535, so summing 32-bit halves gives the same folded checksum as 16-bit words.
pub(crate) fn sum16(mut acc: u64, data: &[u8]) -> u64 {
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        acc += (w >> 32) + (w & 0xffff_ffff);
    }
    let mut words = chunks.remainder().chunks_exact(2);
    for w in &mut words {
        acc += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        acc += u64::from(*last) << 8;
    }
    acc
}

/// Folds an accumulator and complements it: the value to store in a checksum field.
pub(crate) fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

const fn crc32_table() -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

const fn crc16_table() -> [u16; 256] {
    let mut t = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u16;
        let mut k = 0;
        while k < 8 {
            // 0x100B (x^16 + x^12 + x^3 + x + 1) bit-reversed.
            c = if c & 1 != 0 {
                0xD008 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

static CRC32: [u32; 256] = crc32_table();
static CRC16: [u16; 256] = crc16_table();

/// The reflected CRC-32 of IEEE 802.3 (the InfiniBand ICRC polynomial) over several slices:
/// initial value and final XOR all ones.
pub(crate) fn crc32(parts: &[&[u8]]) -> u32 {
    let mut c = !0u32;
    for p in parts {
        for &b in *p {
            c = CRC32[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8);
        }
    }
    !c
}

/// The InfiniBand VCRC: reflected CRC-16 with polynomial 0x100B, initial value and final XOR
/// all ones.
pub(crate) fn crc16(data: &[u8]) -> u16 {
    let mut c = !0u16;
    for &b in data {
        c = CRC16[((c ^ u16::from(b)) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_check_value() {
        // The standard check value of CRC-32/ISO-HDLC over "123456789".
        assert_eq!(crc32(&[b"1234", b"56789"]), 0xCBF4_3926);
    }

    #[test]
    fn internet_checksum_rfc1071_example() {
        // RFC 1071 section 3: the words 0001 f203 f4f5 f6f7 sum to 0xddf2 (folded).
        let acc = sum16(0, &[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]);
        assert_eq!(fold(acc), !0xddf2);
        // An odd trailing byte is padded with zero on the right.
        assert_eq!(fold(sum16(0, &[0x12])), !0x1200);
    }

    /// The 8-bytes-at-a-time sum folds to the same checksum as plain 16-bit words, for every
    /// length and for sums over several (even-length) slices.
    #[test]
    fn wide_sum_matches_16_bit_words() {
        let reference = |parts: &[&[u8]]| {
            let mut acc = 0u64;
            for p in parts {
                for w in p.chunks(2) {
                    acc += u64::from(w[0]) << 8 | u64::from(*w.get(1).unwrap_or(&0));
                }
            }
            fold(acc)
        };
        let data: Vec<u8> = (0..300u32).map(|i| (i * 7919 % 251) as u8 ^ 0xa5).collect();
        for len in 0..data.len() {
            let d = &data[..len];
            assert_eq!(fold(sum16(0, d)), reference(&[d]), "len {len}");
            let cut = (len / 3) & !1;
            assert_eq!(
                fold(sum16(sum16(0, &d[..cut]), &d[cut..])),
                reference(&[&d[..cut], &d[cut..]]),
                "len {len} cut {cut}"
            );
        }
        assert_eq!(fold(sum16(0, &[0xff; 4096])), reference(&[&[0xff; 4096]]));
    }

    #[test]
    fn crc16_known_values() {
        assert_eq!(crc16(&[]), 0);
        // Table-driven and bitwise computations agree.
        let data = b"RDS over InfiniBand";
        let mut c = !0u16;
        for &b in data {
            c ^= u16::from(b);
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    (c >> 1) ^ 0xD008
                } else {
                    c >> 1
                };
            }
        }
        assert_eq!(crc16(data), !c);
    }
}
