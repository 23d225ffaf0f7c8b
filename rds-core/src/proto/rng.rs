//! Deterministic randomness for the engine (seeded; no global RNG) and the kernel's `jhash`
//! used for lane selection.

/// SplitMix64: small, fast, and good enough for jitter, ports and generation numbers.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// The next 32 random bits.
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

const JHASH_INITVAL: u32 = 0xdead_beef;

/// Linux `jhash_1word(a, initval)` (Bob Jenkins' lookup3 final mix over one word).
pub fn jhash_1word(a: u32, initval: u32) -> u32 {
    let init = initval.wrapping_add(JHASH_INITVAL).wrapping_add(1 << 2);
    let (mut a, mut b, mut c) = (a.wrapping_add(init), init, init);
    c ^= b;
    c = c.wrapping_sub(b.rotate_left(14));
    a ^= c;
    a = a.wrapping_sub(c.rotate_left(11));
    b ^= a;
    b = b.wrapping_sub(a.rotate_left(25));
    c ^= b;
    c = c.wrapping_sub(b.rotate_left(16));
    a ^= c;
    a = a.wrapping_sub(c.rotate_left(4));
    b ^= a;
    b = b.wrapping_sub(a.rotate_left(14));
    c ^= b;
    c = c.wrapping_sub(b.rotate_left(24));
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_spread() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        assert_eq!(a.next_u64(), b.next_u64());
        let mut hist = [0u32; 8];
        for _ in 0..8000 {
            hist[a.below(8) as usize] += 1;
        }
        assert!(hist.iter().all(|&h| (800..1200).contains(&h)), "{hist:?}");
    }

    #[test]
    fn jhash_spreads_ports_over_lanes() {
        let mut lanes = [0u32; 8];
        for port in 4000u32..4800 {
            lanes[(jhash_1word(port, 0x1234_5678) & 7) as usize] += 1;
        }
        assert!(lanes.iter().all(|&n| n > 50), "{lanes:?}");
        assert_eq!(jhash_1word(5, 9), jhash_1word(5, 9));
        assert_ne!(jhash_1word(5, 9), jhash_1word(6, 9));
    }
}
