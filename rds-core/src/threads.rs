//! Joining the library's own threads without waiting for ever: shutdown waits a bounded time
//! for each thread, then leaves it behind (a thread stuck in a call that should not block is
//! a bug elsewhere, but it must not keep a daemon from stopping).

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long shutdown waits for one of the library's threads.
pub const JOIN_LIMIT: Duration = Duration::from_secs(3);

/// Joins `h` if it finishes within `limit`; returns whether it did. A thread that does not is
/// detached (it ends with the process) and named in a warning (the `log` facade). Joining the calling thread itself
/// returns at once (false).
pub fn join_within<T>(h: JoinHandle<T>, limit: Duration) -> bool {
    if h.thread().id() == std::thread::current().id() {
        return false;
    }
    let t0 = Instant::now();
    while !h.is_finished() {
        if t0.elapsed() >= limit {
            log::warn!(
                "thread {} did not stop within {} ms; leaving it behind",
                h.thread().name().unwrap_or("(unnamed)"),
                limit.as_millis()
            );
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let _ = h.join();
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finished_threads_are_joined_and_stuck_ones_left() {
        let h = std::thread::spawn(|| 7);
        assert!(join_within(h, Duration::from_secs(5)));
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let stuck = std::thread::Builder::new()
            .name("stuck".into())
            .spawn(move || {
                let _ = rx.recv();
            })
            .unwrap();
        let t0 = Instant::now();
        assert!(!join_within(stuck, Duration::from_millis(50)));
        assert!(t0.elapsed() < Duration::from_secs(2));
        drop(tx);
    }
}
