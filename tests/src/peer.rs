//! The message pattern shared by the node tests and their helper process
//! (`src/bin/rds-test-peer.rs`): message `i` has [`size_of`]`(i)` bytes of [`payload`]`(i, ..)`,
//! so that a receiver can check length, content and order of every message it gets.

/// Message sizes, cycled: empty, one byte, a page, 64 KiB and the 1 MiB maximum.
pub const SIZES: [usize; 5] = [0, 1, 4096, 65536, 1 << 20];

/// The size of message `i`.
pub fn size_of(i: u64) -> usize {
    SIZES[(i % SIZES.len() as u64) as usize]
}

/// The payload of message `i` with `len` bytes: a pattern that differs from message to message
/// and from byte to byte (a shifted or mixed-up message does not match).
pub fn payload(i: u64, len: usize) -> Vec<u8> {
    let seed = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (len as u64);
    (0..len as u64)
        .map(|j| {
            let x = seed.wrapping_add(j.wrapping_mul(0xbf58_476d_1ce4_e5b9));
            (x >> 56) as u8 ^ (j as u8)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_differ_between_messages() {
        assert_ne!(payload(1, 64), payload(2, 64));
        assert_eq!(payload(7, 4096), payload(7, 4096));
        assert_eq!(payload(3, 0).len(), 0);
    }
}
