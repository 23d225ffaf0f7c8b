//! Command line: the options of rds-ping 2.3 (`-c -n -i -I -Q`), parsed and validated with the
//! original's messages, plus `-w` (deadline), `-W` (reply timeout), `--json` and `-v` (name
//! the node).

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use clap::Parser;
use rds_cli::{parse_seconds, parse_size};

/// Sockets when neither `-n` nor a small `-c` says otherwise.
pub const DEFAULT_SOCKETS: usize = 8;
/// Most sockets `-n` accepts.
pub const MAX_SOCKETS: usize = 32;
/// The original's default interval: one second and one microsecond.
pub const DEFAULT_INTERVAL: Duration = Duration::from_micros(1_000_001);
/// How long a ping may wait for its reply before it counts as lost.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Parser)]
#[command(
    name = "rds-ping",
    version,
    about = "Send RDS pings (zero-length messages to RDS port 0) and report the replies",
    long_about = "Sends zero-length RDS messages to port 0 of the destination, which answers \
                  each with a pong, and prints one line per reply with its round-trip time. \
                  Compatible with rds-ping of rds-tools 2.3; it ends with a summary and never \
                  waits forever for replies that do not come."
)]
struct Cli {
    /// Stop after COUNT pings (0 = no limit); suffixes k, m, g
    #[arg(short = 'c', value_name = "COUNT", allow_hyphen_values = true)]
    count: Option<String>,
    /// Number of RDS sockets used, 1 to 32 (default 8, or COUNT when it is smaller)
    #[arg(short = 'n', value_name = "SOCKETS", allow_hyphen_values = true)]
    sockets: Option<String>,
    /// Interval between pings in seconds; suffixes ms/msec and us/usec (default 1)
    #[arg(short = 'i', value_name = "INTERVAL", allow_hyphen_values = true)]
    interval: Option<String>,
    /// Source address (default: the one the route to the destination uses)
    #[arg(short = 'I', value_name = "ADDRESS")]
    source: Option<String>,
    /// RDS type of service, 0 to 255 (RDS/TCP maps every TOS to 0, as the kernel does)
    #[arg(short = 'Q', value_name = "TOS", allow_hyphen_values = true)]
    tos: Option<String>,
    /// Stop after SECONDS in all, whatever the count
    #[arg(short = 'w', value_name = "SECONDS", allow_hyphen_values = true)]
    deadline: Option<String>,
    /// Count a ping as lost when no reply came within SECONDS (default 10)
    #[arg(short = 'W', value_name = "SECONDS", allow_hyphen_values = true)]
    timeout: Option<String>,
    /// Print the result as one JSON object instead of lines and a summary
    #[arg(long)]
    json: bool,
    /// Name the RDS node the pings go through on standard error (for --node in the other tools)
    #[arg(short = 'v', long = "verbose")]
    verbose: bool,
    #[arg(long, value_name = "STACK", help = rds_cli::STACK_HELP)]
    stack: Option<String>,
    /// Destination host or address
    #[arg(value_name = "DESTINATION")]
    dest: Vec<String>,
}

/// What to do, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Opts {
    /// Pings to send (0 = no limit).
    pub count: u64,
    /// Number of sockets.
    pub sockets: usize,
    /// Interval between pings.
    pub interval: Duration,
    /// Source address given with `-I`.
    pub source: Option<IpAddr>,
    /// Type of service.
    pub tos: u8,
    /// Overall deadline.
    pub deadline: Option<Duration>,
    /// Reply timeout per ping.
    pub timeout: Duration,
    /// JSON output.
    pub json: bool,
    /// Name the node on stderr (`-v`).
    pub verbose: bool,
    /// The destination as given.
    pub dest_name: String,
    /// The destination's address.
    pub dest: IpAddr,
    /// Which RDS serves the sockets (`--stack`).
    pub stack: rds_cli::Stack,
}

/// Why the command line was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum OptError {
    /// Help or version was asked for: print this text on stdout, exit 0.
    Info(String),
    /// Print this message, then the usage block (exit 1).
    Usage(String),
    /// Print this message (exit 1).
    Fatal(String),
}

/// The original's usage block, extended by our options.
pub fn usage_text(complaint: &str) -> String {
    format!(
        "rds-ping version {}\n{complaint}\n\
         Usage: rds-ping [options] dst_addr\n\
         Options:\n \
         -c count      limit packet count\n \
         -i timeout    interval to wait (seconds by default) between sends\n \
         -n number     number of RDS sockets used\n \
         -I interface  source IP address\n \
         -Q tos        type of service\n \
         -w deadline   stop after this many seconds\n \
         -W timeout    seconds to wait for each reply\n \
         --json        print the result as JSON\n \
         -v            name the RDS node used, on stderr\n \
         --stack S     kernel, user or auto: which RDS to use\n",
        env!("CARGO_PKG_VERSION")
    )
}

/// A host name or a numeric address: the first address it resolves to.
pub fn resolve(name: &str) -> Option<IpAddr> {
    if let Ok(ip) = name.parse::<IpAddr>() {
        return Some(ip);
    }
    // "[v6]" as some users write it.
    if let Some(ip) = name
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .and_then(|n| n.parse::<IpAddr>().ok())
    {
        return Some(ip);
    }
    if name.is_empty() || name.contains(char::is_whitespace) {
        return None;
    }
    let addrs: Vec<SocketAddr> = (name, 0u16).to_socket_addrs().ok()?.collect();
    addrs.first().map(SocketAddr::ip)
}

/// Parses and validates the command line (`args` without the program name).
///
/// # Errors
/// See [`OptError`].
pub fn parse<I, T>(args: I) -> Result<Opts, OptError>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(
        std::iter::once(std::ffi::OsString::from("rds-ping"))
            .chain(args.into_iter().map(Into::into)),
    ) {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            return Err(match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                    OptError::Info(e.render().to_string())
                }
                _ => OptError::Fatal(rds_cli::usage_message("rds-ping", &e.render().to_string())),
            });
        }
    };
    let count = match &cli.count {
        Some(s) => parse_size(s).ok_or_else(|| fatal(format!("Bad packet count <{s}>")))?,
        None => 0,
    };
    let interval = match &cli.interval {
        Some(s) => parse_seconds(s).map_err(|_| fatal(format!("Bad wait time <{s}>")))?,
        None => DEFAULT_INTERVAL,
    };
    let source = match &cli.source {
        Some(s) => Some(resolve(s).ok_or_else(|| fatal(format!("Unknown source address <{s}>")))?),
        None => None,
    };
    let tos = match &cli.tos {
        Some(s) => parse_size(s)
            .and_then(|v| u8::try_from(v).ok())
            .ok_or_else(|| fatal(format!("Bad tos <{s}>")))?,
        None => 0,
    };
    let sockets = match &cli.sockets {
        Some(s) => parse_size(s)
            .and_then(|v| usize::try_from(v).ok())
            .filter(|n| (1..=MAX_SOCKETS).contains(n))
            .ok_or_else(|| fatal(format!("Invalid number of sockets <{s}>")))?,
        None if count > 0 && count < DEFAULT_SOCKETS as u64 => count as usize,
        None => DEFAULT_SOCKETS,
    };
    let secs = |s: &Option<String>, what: &str| -> Result<Option<Duration>, OptError> {
        match s {
            Some(v) => parse_seconds(v)
                .ok()
                .filter(|d| !d.is_zero())
                .map(Some)
                .ok_or_else(|| fatal(format!("Bad {what} <{v}>"))),
            None => Ok(None),
        }
    };
    let stack = match &cli.stack {
        Some(v) => rds_cli::stack_arg(v).map_err(|m| fatal(format!("--stack: {m}")))?,
        None => rds_cli::Stack::Auto,
    };
    let deadline = secs(&cli.deadline, "deadline")?;
    let timeout = secs(&cli.timeout, "timeout")?.unwrap_or(DEFAULT_TIMEOUT);
    match cli.dest.as_slice() {
        [] => return Err(OptError::Usage("Missing destination address".into())),
        [_] => {}
        [_, extra, ..] => {
            return Err(OptError::Usage(format!(
                "One destination address only: extra operand '{extra}'"
            )))
        }
    }
    let dest_name = cli.dest[0].clone();
    let dest = resolve(&dest_name)
        .ok_or_else(|| fatal(format!("Cannot parse destination address <{dest_name}>")))?;
    if let Some(src) = source {
        if src.is_ipv4() != dest.is_ipv4() {
            return Err(fatal(
                "Source and destination address family are not the same".into(),
            ));
        }
    }
    Ok(Opts {
        count,
        sockets,
        interval,
        source,
        tos,
        deadline,
        timeout,
        json: cli.json,
        verbose: cli.verbose,
        dest_name,
        dest,
        stack,
    })
}

fn fatal(m: String) -> OptError {
    OptError::Fatal(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Opts, OptError> {
        parse(args.iter().copied())
    }

    #[test]
    fn defaults_and_socket_rule() {
        let o = p(&["127.0.0.1"]).unwrap();
        assert_eq!(o.count, 0);
        assert_eq!(o.sockets, 8);
        assert_eq!(o.interval, DEFAULT_INTERVAL);
        assert_eq!(o.timeout, DEFAULT_TIMEOUT);
        assert_eq!(o.deadline, None);
        assert_eq!(p(&["-c", "3", "127.0.0.1"]).unwrap().sockets, 3);
        assert_eq!(p(&["-c", "30", "127.0.0.1"]).unwrap().sockets, 8);
        assert_eq!(p(&["-c", "3", "-n", "5", "127.0.0.1"]).unwrap().sockets, 5);
        assert_eq!(p(&["-n", "32", "::1"]).unwrap().sockets, 32);
    }

    #[test]
    fn original_messages() {
        let f = |a: &[&str]| match p(a) {
            Err(OptError::Fatal(m)) => m,
            other => panic!("{other:?}"),
        };
        assert_eq!(f(&["-c", "x", "h"]), "Bad packet count <x>");
        assert_eq!(f(&["-i", "1x", "h"]), "Bad wait time <1x>");
        assert_eq!(f(&["-Q", "256", "h"]), "Bad tos <256>");
        assert_eq!(f(&["-n", "0", "h"]), "Invalid number of sockets <0>");
        assert_eq!(f(&["-n", "33", "h"]), "Invalid number of sockets <33>");
        assert_eq!(
            f(&["-I", "no such host!", "127.0.0.1"]),
            "Unknown source address <no such host!>"
        );
        assert_eq!(
            f(&["bad address!"]),
            "Cannot parse destination address <bad address!>"
        );
        assert_eq!(
            f(&["-I", "::1", "127.0.0.1"]),
            "Source and destination address family are not the same"
        );
        assert_eq!(f(&["-w", "0", "h"]), "Bad deadline <0>");
        assert_eq!(f(&["-W", "x", "h"]), "Bad timeout <x>");
        assert_eq!(
            p(&[]),
            Err(OptError::Usage("Missing destination address".into()))
        );
        assert_eq!(
            p(&["a", "b"]),
            Err(OptError::Usage(
                "One destination address only: extra operand 'b'".into()
            ))
        );
    }
}
