//! The set-up of the node tests that watch one thread wait for a late answer: a socket on
//! each of two running nodes, the connection between them up, and the request and answer
//! exchanged by two threads, and the fields of a thread's `stat` that those tests read.
//! (`tests/common` is the sans-I/O engine's harness.)

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use rds_core::{Node, Socket};

/// Sockets on two nodes with the connection from `a` to `b` up.
pub struct TwoNodes {
    /// Bound to port 4000 of `a`'s address.
    pub sa: Socket,
    /// Bound to port 5000 of `b`'s address.
    pub sb: Socket,
    pub to_a: SocketAddr,
    pub to_b: SocketAddr,
}

impl TwoNodes {
    /// Binds a socket on node `a` (address `ip_a`) and on `b` (`ip_b`), gives both a 10 s
    /// read timeout, and sends a first message from `a` to `b` to bring the connection up.
    pub fn connect(a: &Node, ip_a: IpAddr, b: &Node, ip_b: IpAddr) -> TwoNodes {
        let sa = Socket::with_node(a);
        let sb = Socket::with_node(b);
        let to_a = sa.bind(SocketAddr::new(ip_a, 4000)).expect("bind");
        let to_b = sb.bind(SocketAddr::new(ip_b, 5000)).expect("bind");
        sa.set_read_timeout(Some(Duration::from_secs(10)));
        sb.set_read_timeout(Some(Duration::from_secs(10)));
        let mut buf = [0u8; 64];
        sa.send_to(b"first", to_b).expect("send");
        assert_eq!(sb.recv_from(&mut buf).expect("first message").0, 5);
        TwoNodes { sa, sb, to_a, to_b }
    }

    /// A thread sends "request" from `sa` and waits for the "answer", which `sb` sends
    /// `delay` after the request came. `mark` runs in the asking thread right after its send
    /// and again once the answer came: both values are returned.
    pub fn late_answer<T: Send>(&self, delay: Duration, mark: impl Fn() -> T + Sync) -> (T, T) {
        std::thread::scope(|s| {
            let asks = s.spawn(|| {
                let mut buf = [0u8; 64];
                // A socket that sent waits for an answer: its blocking receive leads.
                self.sa.send_to(b"request", self.to_b).expect("send");
                let before = mark();
                let (n, from) = self.sa.recv_from(&mut buf).expect("the answer");
                assert_eq!((&buf[..n], from), (&b"answer"[..], self.to_b));
                (before, mark())
            });
            let mut buf = [0u8; 64];
            let (n, from) = self.sb.recv_from(&mut buf).expect("the request");
            assert_eq!((&buf[..n], from), (&b"request"[..], self.to_a));
            std::thread::sleep(delay);
            self.sb.send_to(b"answer", self.to_a).expect("send");
            asks.join().expect("asking thread")
        })
    }
}

/// The fields of the `stat` file at `path` (`/proc/.../stat`) after the command name, which
/// may hold spaces: index 0 is field 3 of proc(5), the state.
pub fn stat_fields(path: &str) -> Vec<String> {
    let stat = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    rest.split_whitespace().map(str::to_owned).collect()
}
