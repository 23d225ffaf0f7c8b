//! Message buffers, and what a buffer keeps alive.
//!
//! Small payloads live in allocations of their own size (the C library's per-thread caches
//! serve them without a system call). Buffers of [`BIG`] bytes and more (the transport's read
//! chunks, large messages being gathered or sent) come from one process-wide pool of power-of-
//! two classes that keeps at most [`KEEP`] bytes of freed buffers for reuse, so a burst of
//! large messages costs no fresh allocation per message; the rest is freed. What the C
//! library keeps of freed memory goes back to the system when the node's use of its budget
//! falls by a lot (`crate::sys::trim_heap`), so the memory a departed peer made the node hold
//! is returned.
//!
//! A frozen pooled buffer ([`freeze`]) is a [`Bytes`] whose last clone, dropped, gives the
//! buffer back; a slice of it keeps the whole buffer alive. Callers that hand out slices
//! charge what they keep alive, not their length (see `proto::stream`).

use std::sync::Mutex;

use bytes::Bytes;

/// Buffers at least this large come from the pool (the C library maps allocations this large).
pub const BIG: usize = 128 << 10;
/// Bytes of freed buffers the pool keeps for reuse.
pub const KEEP: usize = 32 << 20;
/// Classes: `BIG << i` for `i` below this (128 KiB to 2 MiB; a largest message and its
/// header fit the 2 MiB class).
const CLASSES: usize = 5;

struct Pool {
    free: [Vec<Vec<u8>>; CLASSES],
    bytes: usize,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    free: [const { Vec::new() }; CLASSES],
    bytes: 0,
});

fn pool() -> std::sync::MutexGuard<'static, Pool> {
    POOL.lock().unwrap_or_else(|p| p.into_inner())
}

/// The class of a buffer of at least `cap` bytes, if it is a pooled size.
fn class_for(cap: usize) -> Option<usize> {
    (0..CLASSES).find(|&i| BIG << i >= cap)
}

/// An empty buffer with room for at least `cap` bytes: pooled (a class size) from [`BIG`] on.
pub fn take(cap: usize) -> Vec<u8> {
    let Some(c) = class_for(cap).filter(|_| cap >= BIG) else {
        return Vec::with_capacity(cap);
    };
    let mut p = pool();
    if let Some(v) = p.free[c].pop() {
        p.bytes -= v.capacity();
        return v;
    }
    drop(p);
    Vec::with_capacity(BIG << c)
}

/// Gives a buffer back: kept for reuse when it is of a class size and the pool has room,
/// else freed.
pub fn give(mut v: Vec<u8>) {
    let cap = v.capacity();
    let Some(c) = class_for(cap).filter(|&c| BIG << c == cap) else {
        return;
    };
    let mut p = pool();
    if p.bytes + cap <= KEEP {
        v.clear();
        p.bytes += cap;
        p.free[c].push(v);
    }
}

/// Bytes of freed buffers the pool holds now.
pub fn pooled_bytes() -> usize {
    pool().bytes
}

/// A pooled buffer frozen into [`Bytes`]: given back when the last clone or slice goes.
struct Frozen(Vec<u8>);

impl AsRef<[u8]> for Frozen {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        give(std::mem::take(&mut self.0));
    }
}

/// `v`'s contents as [`Bytes`]; a pooled buffer goes back to the pool when they are dropped.
pub fn freeze(v: Vec<u8>) -> Bytes {
    if v.capacity() >= BIG {
        Bytes::from_owner(Frozen(v))
    } else {
        Bytes::from(v)
    }
}

/// A copy of `data` (in a pooled buffer when it is large).
pub fn copy(data: &[u8]) -> Bytes {
    if data.len() < BIG {
        return Bytes::copy_from_slice(data);
    }
    let mut v = take(data.len());
    v.extend_from_slice(data);
    freeze(v)
}

/// Bytes a buffer of `len` bytes taken with [`take`] really holds.
pub fn held_for(len: usize) -> usize {
    match class_for(len) {
        Some(c) if len >= BIG => BIG << c,
        _ => len,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_reuse_and_the_bound() {
        assert_eq!(class_for(1), Some(0));
        assert_eq!(class_for(BIG + 1), Some(1));
        assert_eq!(class_for(1 << 20), Some(3));
        assert_eq!(class_for((1 << 20) + 48), Some(4));
        assert_eq!(class_for(4 << 20), None);
        assert_eq!(held_for(100), 100);
        assert_eq!(held_for(BIG + 1), 2 * BIG);
        let v = take(300 << 10);
        assert_eq!(v.capacity(), 512 << 10);
        let p = v.as_ptr();
        let b = freeze({
            let mut v = v;
            v.extend_from_slice(&[7u8; 1000]);
            v
        });
        let s = b.slice(10..20);
        drop(b);
        assert_eq!(&s[..], &[7u8; 10]);
        drop(s);
        // The same buffer comes back (other tests may share the pool: look for it).
        let again: Vec<Vec<u8>> = (0..8).map(|_| take(300 << 10)).collect();
        assert!(
            again.iter().any(|v| v.as_ptr() == p),
            "the buffer was reused"
        );
        for v in again {
            give(v);
        }
        assert!(pooled_bytes() <= KEEP);
        // Odd sizes and small ones are not kept.
        give(Vec::with_capacity(BIG + 1));
        give(Vec::with_capacity(100));
        let copied = copy(&vec![1u8; BIG]);
        assert_eq!(copied.len(), BIG);
    }
}
