//! The Internet checksum (RFC 1071): the one's-complement sum of big-endian 16-bit words,
//! folded to 16 bits and complemented. The RDS header's `h_csum` (Linux `ip_fast_csum`) and,
//! in captures, the IPv4 header and TCP checksums are this sum; it is computed here only.
//!
//! [`checksum`] is the whole computation over one slice. A sum over several slices (a TCP
//! pseudo-header, then the segment) adds each with [`sum16`] and ends with [`fold`]. All three
//! are `#[inline]`: callers in other modules (the header's 48 bytes, the capture writer's
//! headers) get them inlined with their lengths, as when the checksum lived beside them.

/// The Internet checksum of `data`: the value to store in a checksum field that is zero in
/// `data`. Over a header whose checksum field holds a valid value the result is 0.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    fold(sum16(0, data))
}

/// Adds `data` as big-endian 16-bit words to a one's-complement accumulator (an odd last byte
/// is padded with a zero byte on the right). Every slice but the last one of a sum must have
/// an even length.
///
/// Eight bytes at a time: a big-endian 32-bit word is `hi * 65536 + lo`, and 65536 ≡ 1
/// modulo 65535, so summing 32-bit halves gives the same folded checksum as 16-bit words.
/// The accumulator does not overflow for any slice shorter than 2^31 bytes.
#[inline]
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

/// Folds an accumulator of [`sum16`] to 16 bits (end-around carry) and complements it: the
/// value to store in a checksum field.
#[inline]
pub(crate) fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3: the words 0001 f203 f4f5 f6f7 sum to 0xddf2 (folded).
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(checksum(&data), !0xddf2);
        assert_eq!(fold(sum16(0, &data)), !0xddf2);
        // An odd trailing byte is padded with zero on the right.
        assert_eq!(checksum(&[0x12]), !0x1200);
    }

    #[test]
    fn carry_folding() {
        // All 0xff bytes: 24 words of 0xffff sum to 0x17ffe8, folds to 0xffff; complement 0.
        assert_eq!(checksum(&[0xff; 48]), 0);
        // Nothing sums to 0 and gives 0xffff.
        assert_eq!(checksum(&[]), 0xffff);
        assert_eq!(checksum(&[0; 7]), 0xffff);
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
            assert_eq!(checksum(d), reference(&[d]), "len {len}");
            let cut = (len / 3) & !1;
            assert_eq!(
                fold(sum16(sum16(0, &d[..cut]), &d[cut..])),
                reference(&[&d[..cut], &d[cut..]]),
                "len {len} cut {cut}"
            );
        }
        assert_eq!(checksum(&[0xff; 4096]), reference(&[&[0xff; 4096]]));
    }
}
