//! The tables of `rds-info`, byte for byte as the original C tool prints them: one row type
//! per table ([`SockRow`], [`ConnRow`], [`MsgRow`], [`TcpRow`], [`IbRow`], [`PathRow`],
//! counters as name and value) and one renderer, [`render`], whatever the source: a node of
//! ours ([`crate::node`]) or the kernel's RDS ([`crate::kernel`]) converts its rows into them.
//!
//! Every table starts with `"\n<Title>:\n"` and a header line. Column widths follow rds-tools
//! 2.0.7 (addresses 15 wide, counter names 25); with `-a` they follow rds-tools 2.3 (addresses
//! 37 wide, counter names 32, the socket table's `Cong Pid Comm` columns, where a row has the
//! pid and comm only when they are known, as the original prints rows for a kernel that
//! reports no pid). The paths table (`-p`) has no upstream format and is a comfy-table.
//!
//! Without `-a`, entries with IPv6 (not IPv4-mapped) addresses are left out, as the kernel's
//! IPv4 `RDS_INFO_*` options do; with `-a` they are shown and IPv4 addresses stay dotted quads.
//! With `-v`, rows show what their source adds ([`ConnRow::more`], [`TcpRow::more`],
//! [`IbRow::more`], [`ConnRow::detail`]).

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use rds_core::info::{canonical, PathInfo};

/// One info category, named by its option letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Category {
    /// `-I`: IB transport connections.
    Ib,
    /// `-T`: TCP transport sockets.
    Tcp,
    /// `-c`: statistic counters.
    Counters,
    /// `-k`: sockets.
    Sockets,
    /// `-n`: connections.
    Connections,
    /// `-p`: paths.
    Paths,
    /// `-r`: receive queue messages.
    Recv,
    /// `-s`: send queue messages.
    Send,
    /// `-t`: retransmit queue messages.
    Retrans,
}

impl Category {
    /// Every category in printing order: the ASCII order of the option letters, as the
    /// original tool prints them whatever the command-line order.
    pub const PRINT_ORDER: [Category; 9] = [
        Category::Ib,
        Category::Tcp,
        Category::Counters,
        Category::Sockets,
        Category::Connections,
        Category::Paths,
        Category::Recv,
        Category::Send,
        Category::Retrans,
    ];

    /// The order of the usage text (the original's table order, by `RDS_INFO_*` id).
    pub const USAGE_ORDER: [Category; 9] = [
        Category::Counters,
        Category::Connections,
        Category::Send,
        Category::Retrans,
        Category::Recv,
        Category::Sockets,
        Category::Tcp,
        Category::Ib,
        Category::Paths,
    ];

    /// The option letter.
    pub fn letter(self) -> char {
        match self {
            Category::Ib => 'I',
            Category::Tcp => 'T',
            Category::Counters => 'c',
            Category::Sockets => 'k',
            Category::Connections => 'n',
            Category::Paths => 'p',
            Category::Recv => 'r',
            Category::Send => 's',
            Category::Retrans => 't',
        }
    }

    /// The usage description (the original's strings).
    pub fn description(self) -> &'static str {
        match self {
            Category::Ib => "IB transport connections",
            Category::Tcp => "TCP transport sockets",
            Category::Counters => "statistic counters",
            Category::Sockets => "sockets",
            Category::Connections => "connections",
            Category::Paths => "paths",
            Category::Recv => "recv queue messages",
            Category::Send => "send queue messages",
            Category::Retrans => "retransmit queue messages",
        }
    }
}

/// How the tables are laid out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Layout {
    /// `-a`: IPv6 entries and the rds-tools 2.3 widths.
    pub all_families: bool,
    /// `-v` count.
    pub verbose: u8,
    /// The process that owns every socket of the node, shown in the `Pid` and `Comm` columns
    /// with `-a`: an embedded node's own process. `None` for the daemon, whose sockets belong
    /// to client processes that the snapshot does not name (the rows then end after `Cong`).
    pub socket_pid: Option<u32>,
}

impl Layout {
    fn w(self) -> usize {
        if self.all_families {
            37
        } else {
            15
        }
    }

    /// Whether an entry with these addresses is shown.
    fn shows(self, addrs: &[IpAddr]) -> bool {
        self.all_families || addrs.iter().all(|a| is_v4(*a))
    }
}

fn is_v4(ip: IpAddr) -> bool {
    canonical(ip).is_ipv4()
}

/// An address as `inet_ntop` prints it (IPv4-mapped addresses as dotted quads).
pub fn addr(ip: IpAddr) -> String {
    canonical(ip).to_string()
}

/// The `Comm` column for `pid`, as the original reads it: at most 16 bytes of
/// `/proc/<pid>/comm` without their last byte (the newline); `None` for pid 0 or an unreadable
/// file (the row then has no pid and comm).
pub fn proc_comm(pid: u32) -> Option<String> {
    use std::io::Read as _;
    if pid == 0 {
        return None;
    }
    let mut f = std::fs::File::open(format!("/proc/{pid}/comm")).ok()?;
    let mut b = [0u8; 16];
    let mut n = 0;
    while n < b.len() {
        match f.read(&mut b[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    let end = n.max(1) - 1;
    let text = &b[..end];
    let text = text.split(|&c| c == 0).next().unwrap_or_default();
    Some(String::from_utf8_lossy(text).into_owned())
}

/// `-k`: one RDS socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SockRow {
    /// Bound address and port (`0.0.0.0:0` when unbound).
    pub bound: SocketAddr,
    /// Connected address and port (`0.0.0.0:0` when not connected).
    pub connected: SocketAddr,
    /// Send buffer (bytes).
    pub sndbuf: u64,
    /// Receive buffer (bytes).
    pub rcvbuf: u64,
    /// The `Inode` column.
    pub inode: u64,
    /// The `Cong` column (`-a`).
    pub cong: i32,
    /// The `Pid` and `Comm` columns (`-a`), when known.
    pub owner: Option<(u32, String)>,
}

/// `-n`: one RDS connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnRow {
    /// Local address.
    pub laddr: IpAddr,
    /// Peer address.
    pub faddr: IpAddr,
    /// Type of service.
    pub tos: u8,
    /// Next sequence number to send (path 0).
    pub next_tx: u64,
    /// Next sequence number expected (path 0).
    pub next_rx: u64,
    /// The `Flgs` column: `s` sending, `c` connecting, `C` connected, `E` error, `-` for each
    /// flag not set.
    pub flags: String,
    /// With `-v`: the end of the row.
    pub more: String,
    /// With `-v`: lines under the row.
    pub detail: Vec<String>,
}

/// `-r`, `-s`, `-t`: one queued message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MsgRow {
    /// Local address and port.
    pub local: SocketAddr,
    /// Peer address and port.
    pub peer: SocketAddr,
    /// Type of service.
    pub tos: u8,
    /// Sequence number.
    pub seq: u64,
    /// Payload bytes.
    pub len: u32,
}

/// `-T`: one TCP transport socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpRow {
    /// Local address and port.
    pub local: SocketAddr,
    /// Peer address and port.
    pub peer: SocketAddr,
    /// Header bytes still to read.
    pub hdr_rem: u64,
    /// Data bytes still to read.
    pub data_rem: u64,
    /// `SentNxt`.
    pub sent_nxt: u32,
    /// `ExpectUna`.
    pub expected_una: u32,
    /// `SeenUna`.
    pub seen_una: u32,
    /// With `-v`: the end of the row.
    pub more: String,
}

/// `-I`: one IB connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IbRow {
    /// Local address.
    pub src: IpAddr,
    /// Peer address.
    pub dst: IpAddr,
    /// Type of service.
    pub tos: u8,
    /// Service level.
    pub sl: u8,
    /// The `LocalDev` column: the local GID.
    pub src_dev: String,
    /// The `RemoteDev` column: the peer's GID.
    pub dst_dev: String,
    /// The `SrcQPNo` and `DstQPNo` columns (`-a`).
    pub qpn: (u32, u32),
    /// With `-v`: the end of the row.
    pub more: String,
}

/// `-p`: one path of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathRow {
    /// Local address.
    pub laddr: IpAddr,
    /// Peer address.
    pub faddr: IpAddr,
    /// Transport name.
    pub transport: &'static str,
    /// The path.
    pub path: PathInfo,
}

/// One table's rows, from either source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Table {
    /// `-c`: counter names and values, in the source's order.
    Counters(Vec<(String, u64)>),
    /// `-k`.
    Sockets(Vec<SockRow>),
    /// `-n`.
    Connections(Vec<ConnRow>),
    /// `-p`.
    Paths(Vec<PathRow>),
    /// `-p` from a source whose path records this tool cannot decode: their size.
    PathsUndecoded(usize),
    /// `-r` ([`Category::Recv`]), `-s` ([`Category::Send`]) or `-t` ([`Category::Retrans`]).
    Messages(Category, Vec<MsgRow>),
    /// `-T`.
    Tcp(Vec<TcpRow>),
    /// `-I`.
    Ib(Vec<IbRow>),
}

fn title(out: &mut String, t: &str) {
    out.push('\n');
    out.push_str(t);
    out.push_str(":\n");
}

/// Prints a table into `out`.
pub fn render(out: &mut String, t: &Table, l: Layout) {
    match t {
        Table::Counters(rows) => counter_table(out, rows, l),
        Table::Sockets(rows) => sockets(out, rows, l),
        Table::Connections(rows) => connections(out, rows, l),
        Table::Paths(rows) => paths(out, rows, l),
        Table::PathsUndecoded(each) => {
            title(out, "RDS Paths");
            let _ = writeln!(
                out,
                "(record size {each}: this kernel's paths layout is not decoded)"
            );
        }
        Table::Messages(c, rows) => messages(out, *c, rows, l),
        Table::Tcp(rows) => tcp(out, rows, l),
        Table::Ib(rows) => ib(out, rows, l),
    }
}

fn counter_table(out: &mut String, rows: &[(String, u64)], l: Layout) {
    let w = if l.all_families { 32 } else { 25 };
    title(out, "Counters");
    let _ = writeln!(out, "{:>w$} {:>16}", "CounterName", "Value");
    for (name, v) in rows {
        let _ = writeln!(out, "{name:>w$} {v:>16}");
    }
}

fn sockets(out: &mut String, rows: &[SockRow], l: Layout) {
    let w = l.w();
    title(out, "RDS Sockets");
    let _ = write!(
        out,
        "{:>w$} {:>5} {:>w$} {:>5} {:>10} {:>10} {:>8}",
        "BoundAddr", "BPort", "ConnAddr", "CPort", "SndBuf", "RcvBuf", "Inode"
    );
    if l.all_families {
        let _ = write!(out, " {:>8} {:>10} {:>16}", "Cong", "Pid", "Comm");
    }
    out.push('\n');
    for s in rows {
        if !l.shows(&[s.bound.ip()]) {
            continue;
        }
        let _ = write!(
            out,
            "{:>w$} {:>5} {:>w$} {:>5} {:>10} {:>10} {:>8}",
            addr(s.bound.ip()),
            s.bound.port(),
            addr(s.connected.ip()),
            s.connected.port(),
            s.sndbuf,
            s.rcvbuf,
            s.inode
        );
        if l.all_families {
            let _ = write!(out, " {:>8}", s.cong);
            if let Some((pid, comm)) = &s.owner {
                let _ = write!(out, " {pid:>10} {comm:>16}");
            }
        }
        out.push('\n');
    }
}

fn connections(out: &mut String, rows: &[ConnRow], l: Layout) {
    let w = l.w();
    title(out, "RDS Connections");
    let _ = writeln!(
        out,
        "{:>w$} {:>w$} {:>4} {:>16} {:>16} {:>4}",
        "LocalAddr", "RemoteAddr", "Tos", "NextTX", "NextRX", "Flgs"
    );
    for c in rows {
        if !l.shows(&[c.laddr, c.faddr]) {
            continue;
        }
        let _ = write!(
            out,
            "{:>w$} {:>w$} {:>4} {:>16} {:>16} {}",
            addr(c.laddr),
            addr(c.faddr),
            c.tos,
            c.next_tx,
            c.next_rx,
            c.flags
        );
        if l.verbose > 0 {
            out.push_str(&c.more);
        }
        out.push('\n');
        if l.verbose > 0 {
            for d in &c.detail {
                out.push_str(d);
                out.push('\n');
            }
        }
    }
}

fn paths(out: &mut String, rows: &[PathRow], l: Layout) {
    title(out, "RDS Paths");
    let mut t = rds_cli::table(vec![
        "LocalAddr",
        "RemoteAddr",
        "Trans",
        "Path",
        "State",
        "NextTX",
        "NextRX",
        "SendQ",
        "RetransQ",
        "Ups",
        "Flags",
    ]);
    for r in rows {
        if !l.shows(&[r.laddr, r.faddr]) {
            continue;
        }
        let p = &r.path;
        let mut flags = Vec::new();
        if p.sending {
            flags.push("sending");
        }
        if p.draining {
            flags.push("draining");
        }
        if p.reconnect_pending {
            flags.push("reconnect");
        }
        t.add_row(vec![
            addr(r.laddr),
            addr(r.faddr),
            r.transport.to_string(),
            p.index.to_string(),
            p.state.name().to_string(),
            p.next_tx_seq.to_string(),
            p.next_rx_seq.to_string(),
            p.send_queued.to_string(),
            p.retrans_queued.to_string(),
            p.ups.to_string(),
            if flags.is_empty() {
                "-".to_string()
            } else {
                flags.join(",")
            },
        ]);
    }
    out.push_str(&t.to_string());
    out.push('\n');
}

fn messages(out: &mut String, c: Category, rows: &[MsgRow], l: Layout) {
    let w = l.w();
    let which = match c {
        Category::Recv => "Receive",
        Category::Send => "Send",
        _ => "Retransmit",
    };
    title(out, &format!("{which} Message Queue"));
    let _ = writeln!(
        out,
        "{:>w$} {:>5} {:>w$} {:>5} {:>4} {:>16} {:>10}",
        "LocalAddr", "LPort", "RemoteAddr", "RPort", "Tos", "Seq", "Bytes"
    );
    for m in rows {
        if !l.shows(&[m.local.ip(), m.peer.ip()]) {
            continue;
        }
        let _ = writeln!(
            out,
            "{:>w$} {:>5} {:>w$} {:>5} {:>4} {:>16} {:>10}",
            addr(m.local.ip()),
            m.local.port(),
            addr(m.peer.ip()),
            m.peer.port(),
            m.tos,
            m.seq,
            m.len
        );
    }
}

fn tcp(out: &mut String, rows: &[TcpRow], l: Layout) {
    let w = l.w();
    title(out, "TCP Connections");
    let _ = writeln!(
        out,
        "{:>w$} {:>5} {:>w$} {:>5} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "LocalAddr",
        "LPort",
        "RemoteAddr",
        "RPort",
        "HdrRemain",
        "DataRemain",
        "SentNxt",
        "ExpectUna",
        "SeenUna"
    );
    for s in rows {
        if !l.shows(&[s.local.ip(), s.peer.ip()]) {
            continue;
        }
        let _ = write!(
            out,
            "{:>w$} {:>5} {:>w$} {:>5} {:>10} {:>10} {:>10} {:>10} {:>10}",
            addr(s.local.ip()),
            s.local.port(),
            addr(s.peer.ip()),
            s.peer.port(),
            s.hdr_rem,
            s.data_rem,
            s.sent_nxt,
            s.expected_una,
            s.seen_una
        );
        if l.verbose > 0 {
            out.push_str(&s.more);
        }
        out.push('\n');
    }
}

fn ib(out: &mut String, rows: &[IbRow], l: Layout) {
    title(out, "RDS IB Connections");
    let w = l.w();
    let _ = write!(
        out,
        "{:>w$} {:>w$} {:>4} {:>3} {:>32} {:>32}",
        "LocalAddr", "RemoteAddr", "Tos", "SL", "LocalDev", "RemoteDev"
    );
    if l.all_families {
        let _ = write!(out, " {:>10} {:>10}", "SrcQPNo", "DstQPNo");
    }
    out.push('\n');
    for i in rows {
        if !l.shows(&[i.src, i.dst]) {
            continue;
        }
        let _ = write!(
            out,
            "{:>w$} {:>w$} {:>4} {:>3} {:>32} {:>32}",
            addr(i.src),
            addr(i.dst),
            i.tos,
            i.sl,
            i.src_dev,
            i.dst_dev
        );
        if l.all_families {
            let (src, dst) = i.qpn;
            let _ = write!(out, " {src:>10} {dst:>10}");
        }
        if l.verbose > 0 {
            out.push_str(&i.more);
        }
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn letters_are_in_ascii_order() {
        let l: Vec<char> = Category::PRINT_ORDER.iter().map(|c| c.letter()).collect();
        let mut sorted = l.clone();
        sorted.sort_unstable();
        assert_eq!(l, sorted);
    }
}
