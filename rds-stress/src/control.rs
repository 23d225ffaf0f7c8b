//! The TCP control connection (port 4000 by default): the original rds-stress options
//! exchange, byte for byte.
//!
//! The options structure is packed; multi-byte numbers are big-endian, and the IPv4 addresses
//! and the port are host-order numbers sent big-endian:
//!
//! | off | field | size |
//! |---|---|---|
//! | 0 | version (NUL-padded `"2.0.7"`) | 16 |
//! | 16 | req_depth, req_size, ack_size, rdma_size, send_addr, receive_addr | 6 × u32 |
//! | 40 | starting_port, nr_tasks | 2 × u16 |
//! | 44 | run_time | u32 |
//! | 48 | summary_only … rw_mode | 15 × u8 |
//! | 63 | rdma_vector, rdma_alignment, connect_retries | 3 × u32 |
//! | 75 | tos, async | 2 × u8 |
//! | 77 | send_addr6, receive_addr6 | 2 × 16 |
//! | 109 | addr_scope_id | u32 |
//!
//! V1 (59 bytes) is offsets 16..75 without the version; V2 is 0..77; V3 is 0..113.
//! The receiver reads 16 bytes: its own version string selects V2 (V3 on an IPv6 listener),
//! anything else is the start of a V1 structure. After the options come one "ok" byte each way
//! (active first) and, in JSON mode (a `"json"` marker at version offset 8, answered by ok = 97),
//! a native-endian i32 length and a pretty-printed JSON object each way, then one more ok byte
//! each way.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr};

use rds_core::errno::strerror;
use serde_json::{Map, Value};

/// The version string this implementation sends (what shipped C binaries report).
pub const RDS_VERSION: &str = "2.0.7";
/// Length of the version field.
pub const VERSION_LEN: usize = 16;
/// V1: no version, no tos/async.
pub const V1_SIZE: usize = 59;
/// V2: version + V1 + tos + async.
pub const V2_SIZE: usize = 77;
/// V3: V2 + IPv6 addresses and scope.
pub const V3_SIZE: usize = 113;
/// The ok byte the passive side answers to a JSON-capable active side.
pub const JSON_IDENTIFIER: u8 = 97;
/// Where the `"json"` marker sits in the version field (`sizeof("2.0.7") + 2`).
pub const JSON_FLAG_OFFSET: usize = RDS_VERSION.len() + 1 + 2;
/// Largest JSON options text we accept.
pub const MAX_JSON_LEN: usize = 1 << 20;

/// The options structure (`struct options` of the original), in host order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[allow(missing_docs)]
pub struct WireOptions {
    pub version: [u8; VERSION_LEN],
    pub req_depth: u32,
    pub req_size: u32,
    pub ack_size: u32,
    pub rdma_size: u32,
    pub send_addr: u32,
    pub receive_addr: u32,
    pub starting_port: u16,
    pub nr_tasks: u16,
    pub run_time: u32,
    pub summary_only: u8,
    pub rtprio: u8,
    pub tracing: u8,
    pub verify: u8,
    pub show_params: u8,
    pub show_perfdata: u8,
    pub use_cong_monitor: u8,
    pub rdma_use_once: u8,
    pub rdma_use_get_mr: u8,
    pub rdma_use_fence: u8,
    pub rdma_cache_mrs: u8,
    pub rdma_key_o_meter: u8,
    pub suppress_warnings: u8,
    pub simplex: u8,
    pub rw_mode: u8,
    pub rdma_vector: u32,
    pub rdma_alignment: u32,
    pub connect_retries: u32,
    pub tos: u8,
    pub async_send: u8,
    pub send_addr6: [u8; 16],
    pub receive_addr6: [u8; 16],
    pub addr_scope_id: u32,
    /// JSON only.
    pub inq_enabled: u8,
    /// JSON only.
    pub always_bursty: u8,
    /// JSON only.
    pub sync_always_bursty: u8,
}

/// Which binary layout is on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// 59 bytes, no version.
    V1,
    /// 77 bytes.
    V2,
    /// 113 bytes.
    V3,
}

/// The version field with `"2.0.7"`.
pub fn version_field() -> [u8; VERSION_LEN] {
    let mut v = [0u8; VERSION_LEN];
    v[..RDS_VERSION.len()].copy_from_slice(RDS_VERSION.as_bytes());
    v
}

/// The NUL-terminated string at the start of a version field.
pub fn version_str(v: &[u8; VERSION_LEN]) -> String {
    let end = v.iter().position(|&b| b == 0).unwrap_or(VERSION_LEN);
    String::from_utf8_lossy(&v[..end]).into_owned()
}

impl WireOptions {
    /// The original's defaults (before the active side fills sizes, depth and tasks).
    pub fn defaults() -> Self {
        WireOptions {
            version: version_field(),
            req_size: 1024,
            starting_port: 4000,
            use_cong_monitor: 1,
            rdma_use_fence: 1,
            rdma_vector: 1,
            inq_enabled: 1,
            ..Default::default()
        }
    }

    /// The full V3 image (`encode_options` of the original).
    pub fn encode(&self) -> [u8; V3_SIZE] {
        let mut b = [0u8; V3_SIZE];
        b[..16].copy_from_slice(&self.version);
        let u32s = [
            self.req_depth,
            self.req_size,
            self.ack_size,
            self.rdma_size,
            self.send_addr,
            self.receive_addr,
        ];
        for (i, v) in u32s.iter().enumerate() {
            b[16 + 4 * i..20 + 4 * i].copy_from_slice(&v.to_be_bytes());
        }
        b[40..42].copy_from_slice(&self.starting_port.to_be_bytes());
        b[42..44].copy_from_slice(&self.nr_tasks.to_be_bytes());
        b[44..48].copy_from_slice(&self.run_time.to_be_bytes());
        b[48..63].copy_from_slice(&self.flag_bytes());
        b[63..67].copy_from_slice(&self.rdma_vector.to_be_bytes());
        b[67..71].copy_from_slice(&self.rdma_alignment.to_be_bytes());
        b[71..75].copy_from_slice(&self.connect_retries.to_be_bytes());
        b[75] = self.tos;
        b[76] = self.async_send;
        b[77..93].copy_from_slice(&self.send_addr6);
        b[93..109].copy_from_slice(&self.receive_addr6);
        b[109..113].copy_from_slice(&self.addr_scope_id.to_be_bytes());
        b
    }

    fn flag_bytes(&self) -> [u8; 15] {
        [
            self.summary_only,
            self.rtprio,
            self.tracing,
            self.verify,
            self.show_params,
            self.show_perfdata,
            self.use_cong_monitor,
            self.rdma_use_once,
            self.rdma_use_get_mr,
            self.rdma_use_fence,
            self.rdma_cache_mrs,
            self.rdma_key_o_meter,
            self.suppress_warnings,
            self.simplex,
            self.rw_mode,
        ]
    }

    /// Decodes a full V3 image (bytes a shorter layout did not carry are zero). The JSON-only
    /// fields keep their defaults.
    pub fn decode(b: &[u8; V3_SIZE]) -> Self {
        let u32_at = |o: usize| u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u16_at = |o: usize| u16::from_be_bytes([b[o], b[o + 1]]);
        let mut version = [0u8; VERSION_LEN];
        version.copy_from_slice(&b[..16]);
        let mut a6s = [0u8; 16];
        a6s.copy_from_slice(&b[77..93]);
        let mut a6r = [0u8; 16];
        a6r.copy_from_slice(&b[93..109]);
        WireOptions {
            version,
            req_depth: u32_at(16),
            req_size: u32_at(20),
            ack_size: u32_at(24),
            rdma_size: u32_at(28),
            send_addr: u32_at(32),
            receive_addr: u32_at(36),
            starting_port: u16_at(40),
            nr_tasks: u16_at(42),
            run_time: u32_at(44),
            summary_only: b[48],
            rtprio: b[49],
            tracing: b[50],
            verify: b[51],
            show_params: b[52],
            show_perfdata: b[53],
            use_cong_monitor: b[54],
            rdma_use_once: b[55],
            rdma_use_get_mr: b[56],
            rdma_use_fence: b[57],
            rdma_cache_mrs: b[58],
            rdma_key_o_meter: b[59],
            suppress_warnings: b[60],
            simplex: b[61],
            rw_mode: b[62],
            rdma_vector: u32_at(63),
            rdma_alignment: u32_at(67),
            connect_retries: u32_at(71),
            tos: b[75],
            async_send: b[76],
            send_addr6: a6s,
            receive_addr6: a6r,
            addr_scope_id: u32_at(109),
            inq_enabled: 1,
            always_bursty: 0,
            sync_always_bursty: 0,
        }
    }

    /// The layout the original active side picks: V3 for IPv6, V2 with tos, async or JSON,
    /// else V1.
    pub fn layout(&self, v6: bool, json: bool) -> Layout {
        if v6 {
            Layout::V3
        } else if self.tos != 0 || self.async_send != 0 || json {
            Layout::V2
        } else {
            Layout::V1
        }
    }

    /// The bytes of one layout.
    pub fn encode_layout(&self, l: Layout) -> Vec<u8> {
        let b = self.encode();
        match l {
            Layout::V1 => b[16..16 + V1_SIZE].to_vec(),
            Layout::V2 => b[..V2_SIZE].to_vec(),
            Layout::V3 => b.to_vec(),
        }
    }

    /// Whether the version field carries the JSON marker.
    pub fn json_flag(&self) -> bool {
        self.version[JSON_FLAG_OFFSET..JSON_FLAG_OFFSET + 5] == *b"json\0"
    }

    /// Sets the JSON marker in the version field.
    pub fn set_json_flag(&mut self) {
        self.version[JSON_FLAG_OFFSET..JSON_FLAG_OFFSET + 4].copy_from_slice(b"json");
    }

    /// The JSON object of the original's JSON option exchange (keys in its order; integers as
    /// json-c's 32-bit ints, so u32 values above 2^31 appear negative).
    pub fn to_json(&self) -> String {
        let mut m = Map::new();
        let int = |v: i64| Value::from(v);
        m.insert("version".into(), Value::from(version_str(&self.version)));
        for (k, v) in self.int_fields() {
            m.insert(k.into(), int(v));
        }
        // Keys in the original's order: rebuild with the v6 strings in place.
        let mut out = Map::new();
        for &k in JSON_KEYS {
            let v = match k {
                "send_addr6" => Value::from(Ipv6Addr::from(self.send_addr6).to_string()),
                "receive_addr6" => Value::from(Ipv6Addr::from(self.receive_addr6).to_string()),
                _ => m.get(k).cloned().unwrap_or(Value::Null),
            };
            out.insert(k.into(), v);
        }
        let mut s = String::from("{\n");
        let n = out.len();
        for (i, (k, v)) in out.iter().enumerate() {
            s.push_str(&format!("  {}:{}", Value::from(k.as_str()), v));
            s.push_str(if i + 1 < n { ",\n" } else { "\n" });
        }
        s.push('}');
        s
    }

    fn int_fields(&self) -> Vec<(&'static str, i64)> {
        let i32v = |v: u32| i64::from(v as i32);
        vec![
            ("req_depth", i32v(self.req_depth)),
            ("req_size", i32v(self.req_size)),
            ("ack_size", i32v(self.ack_size)),
            ("rdma_size", i32v(self.rdma_size)),
            ("send_addr", i32v(self.send_addr)),
            ("receive_addr", i32v(self.receive_addr)),
            ("starting_port", i64::from(self.starting_port)),
            ("nr_tasks", i64::from(self.nr_tasks)),
            ("run_time", i32v(self.run_time)),
            ("summary_only", i64::from(self.summary_only)),
            ("rtprio", i64::from(self.rtprio)),
            ("tracing", i64::from(self.tracing)),
            ("verify", i64::from(self.verify)),
            ("show_params", i64::from(self.show_params)),
            ("show_perfdata", i64::from(self.show_perfdata)),
            ("use_cong_monitor", i64::from(self.use_cong_monitor)),
            ("rdma_use_once", i64::from(self.rdma_use_once)),
            ("rdma_use_get_mr", i64::from(self.rdma_use_get_mr)),
            ("rdma_use_fence", i64::from(self.rdma_use_fence)),
            ("rdma_cache_mrs", i64::from(self.rdma_cache_mrs)),
            ("rdma_key_o_meter", i64::from(self.rdma_key_o_meter)),
            ("suppress_warnings", i64::from(self.suppress_warnings)),
            ("simplex", i64::from(self.simplex)),
            ("rw_mode", i64::from(self.rw_mode)),
            ("rdma_vector", i32v(self.rdma_vector)),
            ("rdma_alignment", i32v(self.rdma_alignment)),
            ("connect_retries", i32v(self.connect_retries)),
            ("tos", i64::from(self.tos)),
            ("async", i64::from(self.async_send)),
            ("addr_scope_id ", i32v(self.addr_scope_id)),
            ("disable_inq", i64::from(self.inq_enabled)),
            ("always_bursty", i64::from(self.always_bursty)),
            ("sync_always_bursty", i64::from(self.sync_always_bursty)),
        ]
    }

    /// Applies the keys present in a JSON options object (as the original's
    /// `parse_json_options`: missing keys keep their value, integers are truncated to the
    /// field's width).
    ///
    /// # Errors
    /// The text is not a JSON object.
    pub fn apply_json(&mut self, text: &str) -> Result<(), String> {
        let v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let Some(obj) = v.as_object() else {
            return Err("not a JSON object".into());
        };
        let get = |k: &str| obj.get(k).and_then(Value::as_i64);
        macro_rules! set {
            ($f:ident, $k:expr, $t:ty) => {
                if let Some(x) = get($k) {
                    self.$f = x as $t;
                }
            };
        }
        if let Some(s) = obj.get("version").and_then(Value::as_str) {
            let mut v = [0u8; VERSION_LEN];
            let n = s.len().min(VERSION_LEN - 1);
            v[..n].copy_from_slice(&s.as_bytes()[..n]);
            self.version = v;
        }
        set!(req_depth, "req_depth", u32);
        set!(req_size, "req_size", u32);
        set!(ack_size, "ack_size", u32);
        set!(rdma_size, "rdma_size", u32);
        set!(send_addr, "send_addr", u32);
        set!(receive_addr, "receive_addr", u32);
        set!(starting_port, "starting_port", u16);
        set!(nr_tasks, "nr_tasks", u16);
        set!(run_time, "run_time", u32);
        set!(summary_only, "summary_only", u8);
        set!(rtprio, "rtprio", u8);
        set!(tracing, "tracing", u8);
        set!(verify, "verify", u8);
        set!(show_params, "show_params", u8);
        set!(show_perfdata, "show_perfdata", u8);
        set!(use_cong_monitor, "use_cong_monitor", u8);
        set!(rdma_use_once, "rdma_use_once", u8);
        set!(rdma_use_get_mr, "rdma_use_get_mr", u8);
        set!(rdma_use_fence, "rdma_use_fence", u8);
        set!(rdma_cache_mrs, "rdma_cache_mrs", u8);
        set!(rdma_key_o_meter, "rdma_key_o_meter", u8);
        set!(suppress_warnings, "suppress_warnings", u8);
        set!(simplex, "simplex", u8);
        set!(rw_mode, "rw_mode", u8);
        set!(rdma_vector, "rdma_vector", u32);
        set!(rdma_alignment, "rdma_alignment", u32);
        set!(connect_retries, "connect_retries", u32);
        set!(tos, "tos", u8);
        set!(async_send, "async", u8);
        set!(addr_scope_id, "addr_scope_id ", u32);
        set!(inq_enabled, "disable_inq", u8);
        set!(always_bursty, "always_bursty", u8);
        set!(sync_always_bursty, "sync_always_bursty", u8);
        for (k, f) in [
            ("send_addr6", &mut self.send_addr6),
            ("receive_addr6", &mut self.receive_addr6),
        ] {
            if let Some(a) = obj
                .get(k)
                .and_then(Value::as_str)
                .and_then(|s| s.parse::<Ipv6Addr>().ok())
            {
                *f = a.octets();
            }
        }
        Ok(())
    }

    /// IPv4 send address.
    pub fn send_v4(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.send_addr)
    }

    /// IPv4 receive address.
    pub fn receive_v4(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.receive_addr)
    }
}

/// Keys of the JSON exchange, in the original's order (note the trailing space of
/// `"addr_scope_id "`).
pub const JSON_KEYS: &[&str] = &[
    "version",
    "req_depth",
    "req_size",
    "ack_size",
    "rdma_size",
    "send_addr",
    "receive_addr",
    "starting_port",
    "nr_tasks",
    "run_time",
    "summary_only",
    "rtprio",
    "tracing",
    "verify",
    "show_params",
    "show_perfdata",
    "use_cong_monitor",
    "rdma_use_once",
    "rdma_use_get_mr",
    "rdma_use_fence",
    "rdma_cache_mrs",
    "rdma_key_o_meter",
    "suppress_warnings",
    "simplex",
    "rw_mode",
    "rdma_vector",
    "rdma_alignment",
    "connect_retries",
    "tos",
    "async",
    "send_addr6",
    "receive_addr6",
    "addr_scope_id ",
    "disable_inq",
    "always_bursty",
    "sync_always_bursty",
];

/// Keys of [`JSON_KEYS`] missing from a JSON text (`verify_remote_json_options`).
pub fn missing_json_keys(text: &str) -> Vec<&'static str> {
    let v: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    JSON_KEYS
        .iter()
        .copied()
        .filter(|k| v.get(k).is_none())
        .collect()
}

/// Control connection failures, with the original's messages.
#[derive(Debug)]
pub enum CtlError {
    /// EOF where more bytes were due.
    Closed,
    /// The first 16 bytes could not be read.
    Version(io::Error),
    /// A read failed.
    Recv(io::Error),
    /// A write failed.
    Send(io::Error),
    /// The JSON length or text is not acceptable.
    BadJson(String),
}

impl std::fmt::Display for CtlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CtlError::Closed => f.write_str("Peer unexpectedly closed connection\n"),
            CtlError::Version(e) => write!(f, "Failed to read version{}", errno_suffix(e)),
            CtlError::Recv(e) => write!(f, "Cannot recv from peer{}", errno_suffix(e)),
            CtlError::Send(e) => write!(f, "Cannot send to peer{}", errno_suffix(e)),
            CtlError::BadJson(m) => writeln!(f, "invalid json options from peer: {m}"),
        }
    }
}

/// `", errno: N (text)\n"` as the original's `die_errno`; an error without an OS errno gives
/// `": text\n"` with the error's own text.
pub fn errno_suffix(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => format!(", errno: {n} ({})\n", strerror(n)),
        None => format!(": {e}\n"),
    }
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> Result<(), CtlError> {
    let mut off = 0;
    while off < buf.len() {
        match r.read(&mut buf[off..]) {
            Ok(0) => return Err(CtlError::Closed),
            Ok(n) => off += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(CtlError::Recv(e)),
        }
    }
    Ok(())
}

/// Reads the options as the passive side does. Returns the decoded options, the layout
/// that was read and the peer's 16 version bytes.
///
/// # Errors
/// EOF or a read error.
pub fn read_options(
    r: &mut impl Read,
    v6_listener: bool,
) -> Result<(WireOptions, Layout, [u8; VERSION_LEN]), CtlError> {
    let mut peer_version = [0u8; VERSION_LEN];
    match read_full(r, &mut peer_version) {
        Ok(()) => {}
        Err(CtlError::Recv(e)) => return Err(CtlError::Version(e)),
        Err(e) => return Err(e),
    }
    let mut img = [0u8; V3_SIZE];
    let layout = if version_str(&peer_version) == RDS_VERSION {
        img[..16].copy_from_slice(&peer_version);
        let size = if v6_listener { V3_SIZE } else { V2_SIZE };
        read_full(r, &mut img[16..size])?;
        if v6_listener {
            Layout::V3
        } else {
            Layout::V2
        }
    } else {
        // Not our version string: the 16 bytes are the start of a V1 structure.
        img[16..32].copy_from_slice(&peer_version);
        read_full(r, &mut img[32..16 + V1_SIZE])?;
        Layout::V1
    };
    Ok((WireOptions::decode(&img), layout, peer_version))
}

/// Writes all of `buf`.
///
/// # Errors
/// The write failed.
pub fn send_all(w: &mut impl Write, buf: &[u8]) -> Result<(), CtlError> {
    w.write_all(buf).map_err(CtlError::Send)
}

/// Reads one byte.
///
/// # Errors
/// EOF or a read error.
pub fn recv_byte(r: &mut impl Read) -> Result<u8, CtlError> {
    let mut b = [0u8; 1];
    read_full(r, &mut b)?;
    Ok(b[0])
}

/// Sends a JSON text: native-endian i32 length, then the text.
///
/// # Errors
/// The write failed.
pub fn send_json(w: &mut impl Write, text: &str) -> Result<(), CtlError> {
    let mut buf = (text.len() as i32).to_ne_bytes().to_vec();
    buf.extend_from_slice(text.as_bytes());
    send_all(w, &buf)
}

/// Receives a JSON text.
///
/// # Errors
/// EOF, a read error, a negative or huge length, or text that is not UTF-8.
pub fn recv_json(r: &mut impl Read) -> Result<String, CtlError> {
    let mut len = [0u8; 4];
    read_full(r, &mut len)?;
    let n = i32::from_ne_bytes(len);
    if n < 0 || n as usize > MAX_JSON_LEN {
        return Err(CtlError::BadJson(format!("length {n}")));
    }
    let mut buf = vec![0u8; n as usize];
    read_full(r, &mut buf)?;
    String::from_utf8(buf).map_err(|_| CtlError::BadJson("not UTF-8".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> WireOptions {
        WireOptions {
            req_depth: 0x01020304,
            req_size: 4096,
            ack_size: 63,
            send_addr: u32::from(Ipv4Addr::new(10, 0, 0, 2)),
            receive_addr: u32::from(Ipv4Addr::new(10, 0, 0, 1)),
            starting_port: 4000,
            nr_tasks: 2,
            run_time: 5,
            verify: 1,
            rw_mode: 2,
            rdma_vector: 7,
            connect_retries: 9,
            tos: 3,
            async_send: 1,
            addr_scope_id: 0xaabbccdd,
            ..WireOptions::defaults()
        }
    }

    #[test]
    fn layout_offsets() {
        let o = sample();
        let b = o.encode();
        assert_eq!(&b[..6], b"2.0.7\0");
        assert_eq!(&b[16..20], &[1, 2, 3, 4]);
        assert_eq!(&b[20..24], &4096u32.to_be_bytes());
        assert_eq!(&b[32..36], &[10, 0, 0, 2]);
        assert_eq!(&b[36..40], &[10, 0, 0, 1]);
        assert_eq!(&b[40..42], &4000u16.to_be_bytes());
        assert_eq!(&b[42..44], &[0, 2]);
        assert_eq!(b[48 + 3], 1, "verify");
        assert_eq!(b[48 + 6], 1, "use_cong_monitor");
        assert_eq!(b[48 + 9], 1, "rdma_use_fence");
        assert_eq!(b[62], 2, "rw_mode");
        assert_eq!(&b[63..67], &7u32.to_be_bytes());
        assert_eq!(&b[71..75], &9u32.to_be_bytes());
        assert_eq!(b[75], 3);
        assert_eq!(b[76], 1);
        assert_eq!(&b[109..113], &[0xaa, 0xbb, 0xcc, 0xdd]);
        let v1 = o.encode_layout(Layout::V1);
        assert_eq!(v1.len(), V1_SIZE);
        assert_eq!(&v1[..4], &[1, 2, 3, 4]);
        assert_eq!(o.encode_layout(Layout::V2).len(), V2_SIZE);
        let mut back = WireOptions::decode(&b);
        back.inq_enabled = o.inq_enabled;
        assert_eq!(back, o);
    }

    #[test]
    fn read_v1_v2() {
        let mut o = sample();
        o.tos = 0;
        o.async_send = 0;
        let v1 = o.encode_layout(Layout::V1);
        let (got, l, _) = read_options(&mut &v1[..], false).unwrap();
        assert_eq!(l, Layout::V1);
        assert_eq!(got.req_depth, o.req_depth);
        assert_eq!(got.connect_retries, 9);
        assert_eq!(got.version, [0; 16]);
        let v2 = sample().encode_layout(Layout::V2);
        let (got, l, _) = read_options(&mut &v2[..], false).unwrap();
        assert_eq!(l, Layout::V2);
        assert_eq!(got.tos, 3);
        assert!(matches!(
            read_options(&mut &v2[..40], false),
            Err(CtlError::Closed)
        ));
    }

    #[test]
    fn json_round_trip_and_marker() {
        let mut o = sample();
        o.send_addr = u32::from(Ipv4Addr::new(192, 168, 1, 1));
        o.set_json_flag();
        assert!(o.json_flag());
        assert_eq!(version_str(&o.version), "2.0.7");
        let j = o.to_json();
        assert!(j.contains("\"send_addr\":-1062731519"));
        assert!(j.contains("\"addr_scope_id \":"));
        assert!(missing_json_keys(&j).is_empty());
        let mut back = WireOptions::defaults();
        back.apply_json(&j).unwrap();
        assert_eq!(back.send_addr, o.send_addr);
        assert_eq!(back.req_depth, o.req_depth);
        assert_eq!(back.addr_scope_id, o.addr_scope_id);
        assert_eq!(missing_json_keys("{}").len(), JSON_KEYS.len());
        assert!(back.apply_json("[1]").is_err());
    }
}
