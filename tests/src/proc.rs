//! Child processes and listeners in tool tests: a child reaped however the test ends, and a
//! wait for a TCP listener to appear.

use std::net::{SocketAddr, TcpStream};
use std::process::Child;
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
