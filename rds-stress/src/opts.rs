//! Command line: the original rds-stress options (2.3.11 set, short and long spellings), their
//! defaults, and the original's validation messages.
//!
//! clap only splits the command line (unknown options and missing values are usage errors,
//! exit 2, as the original's `usage()`); numbers and addresses are checked afterwards by
//! [`Args::resolve`] with the original's texts (`invalid number '%s'`, exit 1).

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use clap::{ArgAction, CommandFactory, Parser};

use crate::control::WireOptions;
use crate::msg::{HEADER_SIZE, HEADER_V6_SIZE};

/// The largest RDS message (the kernel's `RDS_MAX_MSG_SIZE`, 1 MiB).
pub const MAX_MSG_SIZE: u32 = 1 << 20;

/// The largest RDMA operation (`size × vector`), the RDS message limit.
pub const MAX_RDMA_BYTES: u64 = 1 << 20;

/// The most per-flow slots (`tasks² × depth`) we agree to keep (memory bound).
pub const MAX_SLOTS: u64 = 1 << 24;

const SR: &str = "Send & Recv Options";
const GEN: &str = "General Options";
const RDMA: &str = "RDMA Specific Options";
const FLAGS: &str = "Optional flags";
const EXT: &str = "Extensions (this implementation)";

/// What `--version` prints after the name: the package version, then the protocol version
/// ([`crate::control::RDS_VERSION`]) this rds-stress speaks to its peer.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (protocol 2.0.7)");

/// rds-stress command line.
#[derive(Parser, Debug, Default)]
#[command(
    name = "rds-stress",
    about = "Generate RDS traffic between two hosts and report throughput and latency",
    long_about = "Generate RDS traffic between two hosts and report throughput and latency.\n\n\
Run it without -s on the receiving host (passive side: it waits for the control connection \
on TCP port 4000) and with -s on the sending host (active side: it sends its options to the \
passive side, then both run the test). --loopback runs both sides in one process over the \
RDS/TCP transport between 127.0.0.1 and 127.0.0.2.",
    after_help = "Example:\n  recv$ rds-stress\n  send$ rds-stress -s recv -q 4096 -t 2 -d 2\n  one host: rds-stress --loopback -T 5",
    version = VERSION,
    disable_version_flag = true,
    infer_long_args = true,
    args_override_self = true
)]
pub struct Args {
    /// Use this local address (passive side: also the control listen address)
    #[arg(short = 'r', long = "recv-addr", value_name = "addr", allow_hyphen_values = true, help_heading = SR)]
    pub recv_addr: Option<String>,
    /// Starting port number: TCP control port; RDS tasks use port+1 .. port+tasks (default is 4000)
    #[arg(short = 'p', long = "port", value_name = "port", allow_hyphen_values = true, help_heading = SR)]
    pub port: Option<String>,

    /// Send to this address (selects the active, sending side)
    #[arg(short = 's', long = "send-addr", value_name = "addr", allow_hyphen_values = true, help_heading = GEN)]
    pub send_addr: Option<String>,
    /// Ack message length (default is 63 for IPv4 and 96 for IPv6)
    #[arg(short = 'a', long = "ack-bytes", value_name = "bytes", allow_hyphen_values = true, help_heading = GEN)]
    pub ack_bytes: Option<String>,
    /// Request message length (default is 1024)
    #[arg(short = 'q', long = "req-bytes", value_name = "bytes", allow_hyphen_values = true, help_heading = GEN)]
    pub req_bytes: Option<String>,
    /// Datagrams sent one way only (default is both)
    #[arg(short = 'o', long = "one-way", help_heading = GEN)]
    pub one_way: bool,
    /// Request pipeline depth, nr outstanding (default is 1)
    #[arg(short = 'd', long = "depth", value_name = "depth", allow_hyphen_values = true, help_heading = GEN)]
    pub depth: Option<String>,
    /// Number of tasks on each side (default is 1)
    #[arg(short = 't', long = "tasks", value_name = "nr", allow_hyphen_values = true, help_heading = GEN)]
    pub tasks: Option<String>,
    /// Runtime of test in seconds (or with ms, s or m), 0 means infinite (default is 0)
    #[arg(short = 'T', long = "time", value_name = "seconds", allow_hyphen_values = true, help_heading = GEN)]
    pub time: Option<String>,
    /// Type of Service (default is 0)
    #[arg(short = 'Q', long = "tos", value_name = "tos", allow_hyphen_values = true, help_heading = GEN)]
    pub tos: Option<String>,
    /// Number of control connect retries, one a second (default is 0)
    #[arg(long = "connect-retries", value_name = "retries", allow_hyphen_values = true, help_heading = GEN)]
    pub connect_retries: Option<String>,
    /// Enable/disable congestion monitoring (default is 1)
    #[arg(long = "use-cong-monitor", value_name = "enable", allow_hyphen_values = true, help_heading = GEN)]
    pub use_cong_monitor: Option<String>,

    /// RDMA buffer size (enables RDMA)
    #[arg(short = 'D', long = "rdma-bytes", value_name = "bytes", allow_hyphen_values = true, help_heading = RDMA)]
    pub rdma_bytes: Option<String>,
    /// Number of user buffers to target (max 512) (default is 1)
    #[arg(short = 'I', long = "rdma-buffers", value_name = "iovecs", allow_hyphen_values = true, help_heading = RDMA)]
    pub rdma_buffers: Option<String>,
    /// RDMA mode (0=readwrite,1=readonly,2=writeonly) (default is 0)
    #[arg(short = 'M', long = "rdma-mode", value_name = "nr", allow_hyphen_values = true, help_heading = RDMA)]
    pub rdma_mode: Option<String>,
    /// Enable/disable RDMA use_once buffers (default is 0)
    #[arg(long = "rdma-use-once", value_name = "enable", allow_hyphen_values = true, help_heading = RDMA)]
    pub rdma_use_once: Option<String>,
    /// Use GET_MR to get the RDMA cookie instead of the RDMA_MAP control message (default is 0)
    #[arg(long = "rdma-use-get-mr", value_name = "enable", allow_hyphen_values = true, help_heading = RDMA)]
    pub rdma_use_get_mr: Option<String>,
    /// Enable/disable RDMA read fencing (default is 1)
    #[arg(long = "rdma-use-fence", value_name = "enable", allow_hyphen_values = true, help_heading = RDMA)]
    pub rdma_use_fence: Option<String>,
    /// Obsolete: RDMA notifications are always enabled
    #[arg(long = "rdma-use-notify", value_name = "enable", allow_hyphen_values = true, help_heading = RDMA)]
    pub rdma_use_notify: Option<String>,
    /// Enable/disable reuse of the MR handle for all RDMA operations (default is 0)
    #[arg(long = "rdma-cache-mrs", value_name = "enable", allow_hyphen_values = true, help_heading = RDMA)]
    pub rdma_cache_mrs: Option<String>,
    /// Request a buffer alignment to test unaligned RDMA (default is 0)
    #[arg(long = "rdma-alignment", value_name = "alignment", allow_hyphen_values = true, help_heading = RDMA)]
    pub rdma_alignment: Option<String>,
    /// Track whether the RDMA code issues repeating R_Keys (disabled by default)
    #[arg(long = "rdma-key-o-meter", help_heading = RDMA)]
    pub rdma_key_o_meter: bool,
    /// Disable the RDS-INQ control message (UEK only; accepted, has no effect here)
    #[arg(long = "disable-inq", help_heading = RDMA)]
    pub disable_inq: bool,

    /// Measure cpu use with per-cpu soak threads
    #[arg(short = 'c', long = "report-cpu", help_heading = FLAGS)]
    pub report_cpu: bool,
    /// Trace execution (to stderr)
    #[arg(short = 'V', long = "trace", help_heading = FLAGS)]
    pub trace: bool,
    /// Print a summary at end of test only
    #[arg(short = 'z', long = "report-summary", help_heading = FLAGS)]
    pub report_summary: bool,
    /// Verify the payload pattern of every message
    #[arg(short = 'v', long = "verify", help_heading = FLAGS)]
    pub verify: bool,
    /// Switch to SCHED_RR priority 1 while measuring
    #[arg(short = 'R', long = "rtprio", help_heading = FLAGS)]
    pub rtprio: bool,
    /// Print job parameters
    #[arg(long = "show-params", help_heading = FLAGS)]
    pub show_params: bool,
    /// Report any RTT exceeding rtt-time microseconds (in hex, to stderr)
    #[arg(long = "show-outliers", value_name = "rtt-time", allow_hyphen_values = true, help_heading = FLAGS)]
    pub show_outliers: Option<String>,
    /// Print an RTT histogram
    #[arg(long = "show-histogram", help_heading = FLAGS)]
    pub show_histogram: bool,
    /// Generate perf data output for script parsing ("::" lines)
    #[arg(long = "show-perfdata", help_heading = FLAGS)]
    pub show_perfdata: bool,
    /// Reset the connection to the peer and exit
    #[arg(long = "reset", help_heading = FLAGS)]
    pub reset: bool,
    /// Enable async sends (UEK only; not supported by this RDS stack)
    #[arg(long = "async", help_heading = FLAGS)]
    pub async_send: bool,
    /// Tasks cancel their queued messages (RDS_CANCEL_SENT_TO) when the run is interrupted (Ctrl-C)
    #[arg(long = "cancel-sent-to", help_heading = FLAGS)]
    pub cancel_sent_to: bool,
    /// Terminate after seconds in the midst of operation
    #[arg(long = "abort-after", value_name = "seconds", allow_hyphen_values = true, help_heading = FLAGS)]
    pub abort_after: Option<String>,
    /// Always flip-flop between send-only, then receive-only mode
    #[arg(long = "always-bursty", help_heading = FLAGS)]
    pub always_bursty: bool,
    /// Synchronize the send-only and receive-only modes of the tasks (implies --always-bursty)
    #[arg(long = "sync-always-bursty", help_heading = FLAGS)]
    pub sync_always_bursty: bool,

    /// Run both sides in this process over RDS/TCP (127.0.0.1 and 127.0.0.2, or -r and -s)
    #[arg(long = "loopback", help_heading = EXT)]
    pub loopback: bool,
    /// Print the summary as one JSON document on stdout (progress goes to stderr)
    #[arg(long = "json", help_heading = EXT)]
    pub json: bool,
    /// RDS transport of the tasks: tcp (the daemon's node or an embedded node, the sockets
    /// pinned to RDS/TCP) or ib (an embedded node running RDS/IB on the local address);
    /// default: ib with -D when the address is on an RDMA device, else the node's choice, as
    /// the kernel's (IB on an RDMA device where the node runs IB, else TCP)
    #[arg(long = "transport", value_name = "tcp|ib", help_heading = EXT)]
    pub transport: Option<String>,
    /// Draw the run into an SVG image: requests per second in each report interval and the
    /// round-trip time by percentile (checked before the run; .png is not supported)
    #[arg(long = "plot", value_name = "FILE.svg", help_heading = EXT)]
    pub plot: Option<String>,
    /// Which RDS the tasks use.
    #[arg(long = "stack", value_name = "kernel|user|auto", help = rds_cli::STACK_HELP,
          value_parser = rds_cli::stack_arg, default_value = "auto", help_heading = EXT)]
    pub stack: rds_cli::StackChoice,
    /// Log level (`--log-level`; `-v` is the original's --verify).
    #[command(flatten, next_help_heading = EXT)]
    pub log: rds_cli::LogLevelArg,
    /// Print version
    #[arg(long = "version", action = ArgAction::Version, help_heading = EXT)]
    pub version: Option<bool>,
}

/// The clap command (for `--help`, the man page test and completions).
pub fn command() -> clap::Command {
    Args::command()
}

/// A fatal error with the original's message (printed as is) and exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fatal {
    /// The message, with its trailing newline.
    pub msg: String,
    /// Exit code.
    pub code: i32,
}

impl Fatal {
    /// Exit code 1 with `msg`.
    pub fn new(msg: impl Into<String>) -> Self {
        Fatal {
            msg: msg.into(),
            code: 1,
        }
    }
}

impl std::fmt::Display for Fatal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.msg)
    }
}

/// A number with an optional k/m/g suffix ([`rds_cli::parse_size`]: decimal, `0x` hex and `0`
/// octal) up to `max`; anything else is the original's `invalid number '%s'`.
///
/// # Errors
/// Not a number, or over `max` (exit 1).
pub fn parse_ull(s: &str, max: u64) -> Result<u64, Fatal> {
    rds_cli::parse_size(s)
        .filter(|&v| v <= max)
        .ok_or_else(|| Fatal::new(format!("invalid number '{s}'\n")))
}

/// A host name or address, as `getaddrinfo` resolves it (the first result).
pub fn parse_addr(s: &str) -> Result<SocketAddr, Fatal> {
    let bad = || Fatal::new(format!("invalid host name or address '{s}'\n"));
    if s.is_empty() {
        return Err(bad());
    }
    (s, 0u16)
        .to_socket_addrs()
        .ok()
        .and_then(|mut it| it.next())
        .ok_or_else(bad)
}

/// Everything the command line decides.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The options that travel to the peer (active) or the local defaults (passive).
    pub wire: WireOptions,
    /// Active side (`-s` given) or `--loopback`.
    pub active: bool,
    /// `-T`: how long the active side runs after the start-up; zero runs until interrupted.
    pub run_time: Duration,
    /// IPv6 addresses.
    pub v6: bool,
    /// `-r`, when given.
    pub recv_addr: Option<SocketAddr>,
    /// `-s`, when given.
    pub send_addr: Option<SocketAddr>,
    /// `-c`.
    pub report_cpu: bool,
    /// `--show-outliers` threshold (µs).
    pub rtt_threshold: Option<u64>,
    /// `--show-histogram`.
    pub show_histogram: bool,
    /// `--reset`.
    pub reset: bool,
    /// `--cancel-sent-to`.
    pub cancel_sent_to: bool,
    /// `--abort-after` (seconds, 0 = off).
    pub abort_after: u32,
    /// JSON option exchange (any of --disable-inq, --always-bursty, --sync-always-bursty).
    pub use_json: bool,
    /// `--loopback`.
    pub loopback: bool,
    /// `--json`.
    pub json: bool,
    /// `--transport`: `Some(true)` = ib, `Some(false)` = tcp, `None` = chosen by `-D`.
    pub transport_ib: Option<bool>,
    /// `--plot`: the image file, checked to be writable.
    pub plot: Option<crate::plot::Target>,
}

fn flag(b: bool) -> u8 {
    u8::from(b)
}

impl Args {
    /// Validates the values in the original's order of checks and builds the options.
    ///
    /// # Errors
    /// The original's message for the first bad value (exit 1).
    pub fn resolve(&self) -> Result<Resolved, Fatal> {
        let u32max = u64::from(u32::MAX);
        let num = |o: &Option<String>, max: u64| -> Result<Option<u64>, Fatal> {
            o.as_deref().map(|s| parse_ull(s, max)).transpose()
        };
        let mut w = WireOptions::defaults();
        let mut v6: Option<bool> = None;
        let mut recv_addr = None;
        let mut send_addr = None;
        if let Some(s) = &self.recv_addr {
            let a = parse_addr(s)?;
            v6 = Some(a.is_ipv6());
            recv_addr = Some(a);
        }
        if let Some(s) = &self.send_addr {
            let a = parse_addr(s)?;
            if v6.is_some_and(|x| x != a.is_ipv6()) {
                return Err(Fatal::new("send and receive address family not matched\n"));
            }
            v6 = Some(a.is_ipv6());
            send_addr = Some(a);
        }
        let v6 = v6.unwrap_or(false);
        let ack = num(&self.ack_bytes, u32max)?;
        if let Some(v) = num(&self.rdma_bytes, u32max)? {
            w.rdma_size = v as u32;
        }
        let depth = num(&self.depth, u32max)?;
        if let Some(v) = num(&self.rdma_buffers, 512)? {
            w.rdma_vector = v as u32;
        }
        if let Some(v) = num(&self.rdma_mode, 2)? {
            w.rw_mode = v as u8;
        }
        if let Some(s) = &self.port {
            // Tasks use port+1 .. port+tasks, so the starting port leaves room for one.
            let v = parse_ull(s, u64::MAX)?;
            if v >= u64::from(u16::MAX) {
                return Err(Fatal::new(format!(
                    "-p: port {v} out of range (0 to {}: tasks use port+1 and up)\n",
                    u16::MAX - 1
                )));
            }
            w.starting_port = v as u16;
        }
        if let Some(v) = num(&self.req_bytes, u32max)? {
            w.req_size = v as u32;
        }
        let tasks = num(&self.tasks, u64::from(u16::MAX))?;
        let run_time = match &self.time {
            Some(s) => rds_cli::parse_seconds(s).map_err(|_| {
                Fatal::new(format!(
                    "-T: invalid duration '{s}' (0 to 1e9 {})\n",
                    rds_cli::DURATION_SYNTAX
                ))
            })?,
            None => Duration::ZERO,
        };
        // The peer reads whole seconds; a fraction rounds up.
        w.run_time = run_time.as_secs_f64().ceil() as u32;
        if let Some(v) = num(&self.tos, 255)? {
            w.tos = v as u8;
        }
        let rtt_threshold = num(&self.show_outliers, u32max)?;
        if let Some(v) = num(&self.use_cong_monitor, 1)? {
            w.use_cong_monitor = v as u8;
        }
        let use_once = num(&self.rdma_use_once, 1)?;
        let get_mr = num(&self.rdma_use_get_mr, 1)?;
        if let Some(v) = num(&self.rdma_use_fence, 1)? {
            w.rdma_use_fence = v as u8;
        }
        if let Some(v) = num(&self.rdma_cache_mrs, 1)? {
            w.rdma_cache_mrs = v as u8;
        }
        num(&self.rdma_use_notify, 1)?;
        if let Some(v) = num(&self.rdma_alignment, page_size())? {
            w.rdma_alignment = v as u32;
        }
        if let Some(v) = num(&self.connect_retries, u32max)? {
            w.connect_retries = v as u32;
        }
        let abort_after = num(&self.abort_after, u32max)?.unwrap_or(0) as u32;
        let transport_ib = match self.transport.as_deref() {
            None => None,
            Some("tcp") => Some(false),
            Some("ib") => Some(true),
            Some(other) => {
                return Err(Fatal::new(format!(
                    "invalid transport '{other}' (tcp or ib)\n"
                )))
            }
        };
        w.summary_only = flag(self.report_summary);
        w.rtprio = flag(self.rtprio);
        w.tracing = flag(self.trace);
        w.verify = flag(self.verify);
        w.show_params = flag(self.show_params);
        w.show_perfdata = flag(self.show_perfdata);
        w.rdma_key_o_meter = flag(self.rdma_key_o_meter);
        w.simplex = flag(self.one_way);
        w.async_send = flag(self.async_send);
        w.inq_enabled = flag(!self.disable_inq);
        w.sync_always_bursty = flag(self.sync_always_bursty);
        w.always_bursty = flag(self.always_bursty || self.sync_always_bursty);
        let use_json = self.disable_inq || self.always_bursty || self.sync_always_bursty;

        // RDMA option interplay, as the original: use_once and use_get_mr default to 0 (the
        // original's "unset" branch is dead code), and the conflicts apply to the values.
        w.rdma_use_once = use_once.unwrap_or(0) as u8;
        w.rdma_use_get_mr = get_mr.unwrap_or(0) as u8;
        if w.rdma_cache_mrs != 0 && w.rdma_use_once != 0 {
            return Err(Fatal::new(
                "option --rdma-cache-mrs conflicts with --rdma-use-once\n",
            ));
        }
        if w.rdma_cache_mrs != 0 && w.rdma_use_get_mr == 0 {
            return Err(Fatal::new(
                "option --rdma-cache-mrs conflicts with --rdma-use-get-mr=0\n",
            ));
        }
        if w.async_send != 0 && w.rdma_size != 0 && w.rdma_use_fence == 0 && w.rw_mode != 2 {
            return Err(Fatal::new(
                "option --async=1 with RDMA Rd require --rdma-use-fence=1\n",
            ));
        }

        let active = send_addr.is_some() || self.loopback;
        let hdr = if v6 { HEADER_V6_SIZE } else { HEADER_SIZE } as u32;
        if active {
            // As rds-tools 2.0.7: an explicit 0 is a size below the header, not the default.
            w.ack_size = ack.map_or(hdr, |v| v as u32);
            if w.ack_size < hdr {
                return Err(Fatal::new(format!(
                    "ack size must be at least {hdr} bytes\n"
                )));
            }
            if w.req_size < hdr {
                return Err(Fatal::new(format!(
                    "req size must be at least {hdr} bytes\n"
                )));
            }
            w.req_depth = depth.unwrap_or(1) as u32;
            w.nr_tasks = tasks.unwrap_or(1) as u16;
            check_limits(&w)?;
        }
        if let Some(a) = recv_addr {
            set_addr(&mut w, a.ip(), false);
            if let SocketAddr::V6(a6) = a {
                w.addr_scope_id = a6.scope_id();
            }
        }
        if let Some(a) = send_addr {
            set_addr(&mut w, a.ip(), true);
            if let SocketAddr::V6(a6) = a {
                if a6.scope_id() != 0 {
                    w.addr_scope_id = a6.scope_id();
                }
            }
        }
        if self.json && !active {
            // The passive side has no summary of its own choosing; it still honours --json.
        }
        // After the original's checks: a bad file name fails before anything runs.
        let plot = self
            .plot
            .as_deref()
            .map(|a| crate::plot::Target::check(a).map_err(Fatal::new))
            .transpose()?;
        Ok(Resolved {
            wire: w,
            active,
            run_time,
            v6,
            recv_addr,
            send_addr,
            report_cpu: self.report_cpu,
            rtt_threshold,
            show_histogram: self.show_histogram,
            reset: self.reset,
            cancel_sent_to: self.cancel_sent_to,
            abort_after,
            use_json,
            loopback: self.loopback,
            json: self.json,
            transport_ib,
            plot,
        })
    }
}

/// Stores `ip` as the send (`send`) or receive address of `w`.
pub fn set_addr(w: &mut WireOptions, ip: IpAddr, send: bool) {
    match ip {
        IpAddr::V4(a) => {
            if send {
                w.send_addr = u32::from(a);
            } else {
                w.receive_addr = u32::from(a);
            }
        }
        IpAddr::V6(a) => {
            if send {
                w.send_addr6 = a.octets();
            } else {
                w.receive_addr6 = a.octets();
            }
        }
    }
}

/// Checks the sizes that the engine can serve (on our options and on options from a peer).
///
/// # Errors
/// A message naming the value.
pub fn check_limits(w: &WireOptions) -> Result<(), Fatal> {
    if w.req_depth == 0 {
        return Err(Fatal::new("req depth must be at least 1\n"));
    }
    if w.nr_tasks == 0 {
        return Err(Fatal::new("number of tasks must be at least 1\n"));
    }
    if w.req_size > MAX_MSG_SIZE {
        return Err(Fatal::new(format!(
            "req size {} is larger than the largest RDS message ({MAX_MSG_SIZE} bytes)\n",
            w.req_size
        )));
    }
    if w.ack_size > MAX_MSG_SIZE {
        return Err(Fatal::new(format!(
            "ack size {} is larger than the largest RDS message ({MAX_MSG_SIZE} bytes)\n",
            w.ack_size
        )));
    }
    let rdma = u64::from(w.rdma_size) * u64::from(w.rdma_vector);
    if rdma > MAX_RDMA_BYTES {
        return Err(Fatal::new(format!(
            "RDMA size * vector = {rdma} is larger than the largest RDMA operation ({} bytes)\n",
            MAX_RDMA_BYTES
        )));
    }
    let slots = u64::from(w.nr_tasks) * u64::from(w.nr_tasks) * u64::from(w.req_depth);
    if slots > MAX_SLOTS {
        return Err(Fatal::new(format!(
            "tasks * tasks * depth = {slots} is too large (at most {MAX_SLOTS})\n"
        )));
    }
    if u32::from(w.starting_port) + u32::from(w.nr_tasks) > u32::from(u16::MAX) {
        return Err(Fatal::new(format!(
            "-p {} with -t {}: task ports {}..{} do not fit below 65536 (at most -p {})\n",
            w.starting_port,
            w.nr_tasks,
            u32::from(w.starting_port) + 1,
            u32::from(w.starting_port) + u32::from(w.nr_tasks),
            u32::from(u16::MAX) - u32::from(w.nr_tasks)
        )));
    }
    Ok(())
}

fn page_size() -> u64 {
    // The original bounds --rdma-alignment by the page size; 4096 on every target we run on.
    4096
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_offer_the_options() {
        rds_cli::completions::assert_offers(
            &command(),
            "rds-stress",
            &[
                "-s",
                "-r",
                "-q",
                "-t",
                "-d",
                "--loopback",
                "--rdma-mode",
                "--json",
                "--log-level",
            ],
        );
    }

    #[test]
    fn version_names_the_protocol() {
        let protocol = crate::control::RDS_VERSION;
        assert!(VERSION.ends_with(&format!(" (protocol {protocol})")));
    }

    #[test]
    fn numbers_like_strtoull() {
        let m = u64::from(u32::MAX);
        assert_eq!(parse_ull("1024", m), Ok(1024));
        assert_eq!(parse_ull("0x10", m), Ok(16));
        assert_eq!(parse_ull("010", m), Ok(8));
        assert_eq!(parse_ull("4k", m), Ok(4096));
        assert_eq!(parse_ull("1M", m), Ok(1 << 20));
        assert_eq!(parse_ull("2g", m), Ok(2 << 30));
        assert_eq!(parse_ull("0", m), Ok(0));
        assert_eq!(parse_ull(" 7", m), Ok(7));
        assert!(parse_ull("k", m).is_err(), "a suffix needs digits");
        assert!(parse_ull("", m).is_err());
        assert!(parse_ull("4kb", m).is_err());
        assert!(parse_ull("08", m).is_err());
        assert!(parse_ull("0x", m).is_err());
        assert!(parse_ull("-1", m).is_err());
        assert!(parse_ull("4294967296", m).is_err());
        assert!(parse_ull("99999999999999999999999", u64::MAX).is_err());
        assert_eq!(parse_ull("18446744073709551615", u64::MAX), Ok(u64::MAX));
        assert_eq!(
            parse_ull("abc", m).unwrap_err().msg,
            "invalid number 'abc'\n"
        );
        assert_eq!(parse_ull("256", 255).unwrap_err().code, 1);
    }
}
