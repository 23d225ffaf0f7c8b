//! Command line: the options of rds-ping 2.3 (`-c -n -i -I -Q`), parsed and validated with the
//! original's messages, plus `-w` (deadline), `-W` (reply timeout), `--json`, `-v` (name the
//! node), and the several-destination form: more than one destination, `-f FILE`, `-a`, `-u`
//! ([`Opts::multi`]; the list itself is read and checked in [`crate::targets`]).

use std::net::IpAddr;
use std::time::Duration;

use clap::Parser;
use rds_cli::{parse_seconds, parse_size};

pub use crate::targets::{resolve, Dest};

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
    /// Stop after COUNT pings (to each destination; 0 = no limit); suffixes k, m, g
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
    /// Print the result as one JSON object (with several destinations, an array of them)
    /// instead of lines and a summary
    #[arg(long)]
    json: bool,
    /// Name the RDS node the pings go through on standard error (for --node in the other tools)
    #[arg(short = 'v', long = "verbose")]
    verbose: bool,
    #[arg(long, value_name = "STACK", help = rds_cli::STACK_HELP)]
    stack: Option<String>,
    /// Log level (`--log-level`; `-v` names the node).
    #[command(flatten)]
    log: rds_cli::LogLevelArg,
    /// Read destinations from FILE, one per line ("-": standard input; blank lines and
    /// #-comments ignored)
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    file: Option<std::path::PathBuf>,
    /// With several destinations: print only those that answered
    #[arg(short = 'a', long = "alive", conflicts_with = "unreach")]
    alive: bool,
    /// With several destinations: print only those that did not answer
    #[arg(short = 'u', long = "unreach")]
    unreach: bool,
    /// Destination host or address; several are pinged in parallel, one summary line each
    #[arg(value_name = "DESTINATION")]
    dest: Vec<String>,
}

/// Which destinations the several-destination form lists (`-a`, `-u`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Show {
    /// A summary line for each.
    All,
    /// The names of those that answered (`-a`).
    Alive,
    /// The names of those that did not (`-u`).
    Unreachable,
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
    /// The destinations, in the order given (one in the original form).
    pub dests: Vec<Dest>,
    /// The several-destination form: more than one destination, `-f`, `-a` or `-u`. It pings
    /// in parallel and ends with one line per destination; without it, the original's output.
    pub multi: bool,
    /// What the several-destination form prints.
    pub show: Show,
    /// Which RDS serves the sockets (`--stack`).
    pub stack: rds_cli::StackChoice,
    /// `--log-level`.
    pub log_level: Option<rds_cli::logger::LevelFilter>,
}

impl Opts {
    /// The destination of the one-destination form.
    pub fn dest(&self) -> &Dest {
        &self.dests[0]
    }
}

/// Why the command line was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum OptError {
    /// Help or version was asked for: print this text on stdout, exit 0.
    Info(String),
    /// Print this message, then the usage block (exit 1, or 2 in the several-destination
    /// form).
    Usage(String),
    /// Print this message (exit 1, or 2 in the several-destination form).
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

/// Parses and validates the command line (`args` without the program name).
///
/// # Errors
/// See [`OptError`].
pub fn parse<I, T>(args: I) -> Result<Opts, OptError>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(with_name(args)) {
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
        None => rds_cli::StackChoice::Auto,
    };
    let deadline = secs(&cli.deadline, "deadline")?;
    let timeout = secs(&cli.timeout, "timeout")?.unwrap_or(DEFAULT_TIMEOUT);
    let multi = cli.dest.len() > 1 || cli.file.is_some() || cli.alive || cli.unreach;
    let mut names: Vec<crate::targets::Named> = cli
        .dest
        .iter()
        .map(|d| (d.clone(), String::new()))
        .collect();
    if let Some(path) = &cli.file {
        names.extend(crate::targets::read_file(path).map_err(fatal)?);
        if names.is_empty() {
            return Err(fatal(format!(
                "No destination in <{}>",
                crate::targets::file_label(path)
            )));
        }
    }
    if names.is_empty() {
        return Err(OptError::Usage("Missing destination address".into()));
    }
    let dests = crate::targets::resolve_all(&names, resolve).map_err(fatal)?;
    if let Some(src) = source {
        if dests.iter().any(|d| src.is_ipv4() != d.addr.is_ipv4()) {
            return Err(fatal(
                "Source and destination address family are not the same".into(),
            ));
        }
    }
    let show = if cli.alive {
        Show::Alive
    } else if cli.unreach {
        Show::Unreachable
    } else {
        Show::All
    };
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
        dests,
        multi,
        show,
        stack,
        log_level: cli.log.log_level,
    })
}

/// The clap command (for completions).
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    Cli::command()
}

fn with_name<I, T>(args: I) -> impl Iterator<Item = std::ffi::OsString>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    std::iter::once(std::ffi::OsString::from("rds-ping")).chain(args.into_iter().map(Into::into))
}

/// Whether `args` ask for the several-destination form (more than one destination, `-f`,
/// `-a` or `-u`), read as far as they can be when they are not a valid command line: the
/// exit status of a refused command line depends on it. Options are told from operands
/// with clap's own list of which options take a value; an unknown option is taken as a flag.
pub fn multi_form(args: &[std::ffi::OsString]) -> bool {
    use clap::CommandFactory;
    let cmd = Cli::command();
    let find_short = |c: char| cmd.get_arguments().find(|a| a.get_short() == Some(c));
    let find_long = |l: &str| cmd.get_arguments().find(|a| a.get_long() == Some(l));
    let takes_value = |a: &clap::Arg| a.get_action().takes_values();
    let (mut operands, mut multi) = (0usize, false);
    let mut mark = |a: &clap::Arg| {
        if matches!(a.get_id().as_str(), "file" | "alive" | "unreach") {
            multi = true;
        }
    };
    let mut it = args.iter().map(|a| a.to_string_lossy());
    while let Some(arg) = it.next() {
        if arg == "--" {
            operands += it.by_ref().count();
            break;
        }
        if let Some(long) = arg.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, _)) => (n, true),
                None => (long, false),
            };
            if let Some(a) = find_long(name) {
                mark(a);
                if takes_value(a) && !inline {
                    it.next();
                }
            }
        } else if let Some(shorts) = arg.strip_prefix('-').filter(|s| !s.is_empty()) {
            for (i, c) in shorts.char_indices() {
                let Some(a) = find_short(c) else { continue };
                mark(a);
                if takes_value(a) {
                    if i + c.len_utf8() == shorts.len() {
                        it.next();
                    }
                    break;
                }
            }
        } else {
            operands += 1;
        }
    }
    multi || operands > 1
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
            f(&["127.0.0.2", "bad!", "127.0.0.3"]),
            "Cannot parse destination address <bad!>"
        );
        assert_eq!(
            f(&["-I", "::1", "::2", "127.0.0.2"]),
            "Source and destination address family are not the same"
        );
    }

    #[test]
    fn the_several_destination_form() {
        let o = p(&["127.0.0.1"]).unwrap();
        assert!(!o.multi);
        assert_eq!(o.show, Show::All);
        let o = p(&["-c", "2", "127.0.0.2", "::1", "127.0.0.3"]).unwrap();
        assert!(o.multi);
        let names: Vec<&str> = o.dests.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["127.0.0.2", "::1", "127.0.0.3"]);
        assert_eq!(o.count, 2);
        // -a or -u alone make it, with one destination too.
        assert_eq!(p(&["-a", "127.0.0.2"]).unwrap().show, Show::Alive);
        assert!(p(&["-a", "127.0.0.2"]).unwrap().multi);
        assert_eq!(p(&["-u", "127.0.0.2"]).unwrap().show, Show::Unreachable);
        let args = |a: &[&str]| -> Vec<std::ffi::OsString> { a.iter().map(Into::into).collect() };
        assert!(!multi_form(&args(&["-c", "x", "127.0.0.2"])));
        assert!(!multi_form(&args(&["-x", "127.0.0.2"])));
        assert!(multi_form(&args(&["-x", "127.0.0.2", "127.0.0.3"])));
        assert!(multi_form(&args(&["-c", "x", "-f", "hosts"])));
        assert!(multi_form(&args(&["-au", "127.0.0.2"])));
        assert!(multi_form(&args(&["-Z", "-u", "127.0.0.2"])));
        assert!(multi_form(&args(&["-fhosts"])));
        assert!(multi_form(&args(&["--file=hosts", "-c"])));
        assert!(multi_form(&args(&["--alive"])));
        // Values are not destinations; a value that looks like an option is a value.
        assert!(!multi_form(&args(&[
            "-c",
            "3",
            "-I",
            "::1",
            "-Q",
            "-1",
            "127.0.0.2"
        ])));
        assert!(!multi_form(&args(&[
            "-c3", "-n", "2", "--stack", "user", "h"
        ])));
        assert!(!multi_form(&args(&["-i", "-f", "h"])));
        assert!(multi_form(&args(&["-c3", "h", "--", "-h2"])));
    }
}
