//! Child processes and listeners in tool tests: a child reaped however the test ends, a
//! wait for a TCP listener to appear, and threads that keep every CPU busy.

use std::net::{SocketAddr, TcpStream};
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Kills and reaps the child when dropped.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits (up to 20 s) until something listens on `addr`; panics otherwise.
pub fn wait_listening(addr: SocketAddr) {
    let end = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        assert!(Instant::now() < end, "nothing listens on {addr}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Threads at the normal policy that spin, two per CPU, until dropped or `limit` passed: the
/// machine of a node whose traffic takes every CPU, for the threads that yield to it
/// (`SCHED_IDLE`).
pub struct BusyCpus {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl BusyCpus {
    /// Starts the spinning threads; each ends by itself after `limit`.
    pub fn start(limit: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let end = Instant::now() + limit;
        let threads = (0..2 * cpus)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) && Instant::now() < end {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        BusyCpus { stop, threads }
    }
}

impl Drop for BusyCpus {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
