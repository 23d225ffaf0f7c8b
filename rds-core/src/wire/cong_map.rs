//! The congestion map (Linux `net/rds/cong.c`): one bit per RDS port, 65536 bits = 8192 bytes,
//! a **little-endian bitmap**: port `p` is bit `p % 8` of byte `p / 8`. On the wire it is the
//! payload of a message whose `h_flags` is exactly `CONG_BITMAP`.
//!
//! Stored as 1024 little-endian `u64` words, so port `p` is bit `p % 64` of word `p / 64` and
//! the kernel's 64-bit "uncongested" port mask falls out of a word-wise OR.

use super::Error;

/// Bytes in a congestion map (`RDS_CONG_MAP_BYTES`).
pub const CONG_MAP_BYTES: usize = 8192;
/// Ports covered by a map.
pub const CONG_MAP_PORTS: usize = CONG_MAP_BYTES * 8;
const WORDS: usize = CONG_MAP_BYTES / 8;

/// A congestion map: which ports of one address are congested.
#[derive(Clone, PartialEq, Eq)]
pub struct CongMap {
    words: Box<[u64; WORDS]>,
}

impl Default for CongMap {
    fn default() -> Self {
        CongMap {
            words: Box::new([0; WORDS]),
        }
    }
}

impl core::fmt::Debug for CongMap {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_set().entries(self.congested_ports()).finish()
    }
}

impl CongMap {
    /// An empty map: no port congested.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads a map from its 8192-byte wire form.
    ///
    /// # Errors
    /// [`Error::BadCongMapLen`] if `bytes` is not exactly 8192 bytes long.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, Error> {
        if bytes.len() != CONG_MAP_BYTES {
            return Err(Error::BadCongMapLen(bytes.len() as u32));
        }
        let mut map = CongMap::new();
        for (w, chunk) in map.words.iter_mut().zip(bytes.chunks_exact(8)) {
            *w = u64::from_le_bytes(chunk.try_into().expect("8-byte chunk"));
        }
        Ok(map)
    }

    /// Writes the 8192-byte wire form into `out`.
    ///
    /// # Panics
    /// If `out` is shorter than [`CONG_MAP_BYTES`].
    pub fn emit(&self, out: &mut [u8]) {
        for (w, chunk) in self
            .words
            .iter()
            .zip(out[..CONG_MAP_BYTES].chunks_exact_mut(8))
        {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
    }

    /// The 8192-byte wire form.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = vec![0u8; CONG_MAP_BYTES];
        self.emit(&mut v);
        v
    }

    /// Marks `port` congested. Returns whether the bit changed.
    pub fn set(&mut self, port: u16) -> bool {
        let (w, b) = (usize::from(port) / 64, port % 64);
        let was = self.words[w] & (1 << b) != 0;
        self.words[w] |= 1 << b;
        !was
    }

    /// Marks `port` uncongested. Returns whether the bit changed.
    pub fn clear(&mut self, port: u16) -> bool {
        let (w, b) = (usize::from(port) / 64, port % 64);
        let was = self.words[w] & (1 << b) != 0;
        self.words[w] &= !(1 << b);
        was
    }

    /// Whether `port` is congested.
    pub fn test(&self, port: u16) -> bool {
        self.words[usize::from(port) / 64] & (1 << (port % 64)) != 0
    }

    /// Whether no port is congested.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// Congested ports in ascending order.
    pub fn congested_ports(&self) -> impl Iterator<Item = u16> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &w)| {
            (0..64u16)
                .filter(move |b| w & (1 << b) != 0)
                .map(move |b| i as u16 * 64 + b)
        })
    }

    /// The kernel's uncongestion mask for a map update from `old` to `new` (`ib_recv.c`):
    /// bit `k` is set when some port `≡ k (mod 64)` went from congested to uncongested. It is
    /// matched against the `1 << (port % 64)` bits that congestion monitors collect.
    pub fn uncongested_mask(old: &CongMap, new: &CongMap) -> u64 {
        old.words
            .iter()
            .zip(new.words.iter())
            .fold(0, |acc, (o, n)| acc | (o & !n))
    }

    /// Replaces this map with `new` and returns [`CongMap::uncongested_mask`] of the change.
    pub fn update_from(&mut self, new: &CongMap) -> u64 {
        let mask = Self::uncongested_mask(self, new);
        self.words.copy_from_slice(&new.words[..]);
        mask
    }
}

/// The congestion monitor bit of a port (`RDS_CONG_MONITOR_MASK`): `1 << (port % 64)`.
pub const fn monitor_mask(port: u16) -> u64 {
    1u64 << (port % 64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn little_endian_bit_order() {
        let mut m = CongMap::new();
        m.set(0);
        m.set(9);
        m.set(32768);
        m.set(65535);
        let b = m.to_bytes();
        assert_eq!(b[0], 0x01);
        assert_eq!(b[1], 0x02); // port 9 = byte 1, bit 1
        assert_eq!(b[4096], 0x01); // port 32768 starts the second page
        assert_eq!(b[8191], 0x80);
        assert_eq!(b.iter().filter(|&&x| x != 0).count(), 4);
        let back = CongMap::from_bytes(&b).unwrap();
        assert_eq!(back, m);
        assert_eq!(
            back.congested_ports().collect::<Vec<_>>(),
            [0, 9, 32768, 65535]
        );
    }

    #[test]
    fn independent_vector() {
        // Port 4000 = byte 500, bit 0; port 5007 = byte 625, bit 7 (worked out by hand).
        let mut bytes = vec![0u8; 8192];
        bytes[500] = 0x01;
        bytes[625] = 0x80;
        let m = CongMap::from_bytes(&bytes).unwrap();
        assert!(m.test(4000) && m.test(5007));
        assert!(!m.test(4001) && !m.test(5006));
    }

    #[test]
    fn wrong_size_rejected() {
        assert_eq!(
            CongMap::from_bytes(&[0u8; 8191]),
            Err(Error::BadCongMapLen(8191))
        );
        assert!(CongMap::from_bytes(&[]).is_err());
    }

    #[test]
    fn set_clear_report_changes() {
        let mut m = CongMap::new();
        assert!(m.set(7) && !m.set(7));
        assert!(m.clear(7) && !m.clear(7));
        assert!(m.is_empty());
    }

    #[test]
    fn uncongestion_mask() {
        let mut old = CongMap::new();
        old.set(3);
        old.set(64 + 5);
        old.set(700);
        let mut new = old.clone();
        new.clear(64 + 5); // 69 % 64 = 5
        new.set(10); // newly congested: not in the mask
        let mask = CongMap::uncongested_mask(&old, &new);
        assert_eq!(mask, 1 << 5);
        assert_eq!(mask & monitor_mask(69), monitor_mask(69));
        let mut cur = old;
        assert_eq!(cur.update_from(&new), 1 << 5);
        assert_eq!(cur, new);
    }
}
