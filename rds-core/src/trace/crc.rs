//! The two InfiniBand CRCs of the synthesized IB packets: the ICRC (CRC-32) and the VCRC
//! (CRC-16). The Internet checksum of the IPv4 and TCP headers is [`crate::wire::checksum`]'s.

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
