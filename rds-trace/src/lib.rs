//! `rds-trace`: wire capture of a running RDS node to pcap, text and JSON reports of captures,
//! and installation of the Wireshark dissector.
//!
//! Three modes, exactly one per run:
//! - `-w FILE` ([`capture`]): subscribes to a node's trace tap over its control socket and
//!   writes every RDS/TCP frame the node sends or receives as a classic pcap file (Ethernet,
//!   IPv4/IPv6, TCP with the server side on port 16385; see [`rds_core::trace::PcapSink`]),
//!   or with `--transport ib` every RDS/IB fragment as a classic pcap file of ERF InfiniBand
//!   records. `-w -` streams the capture to stdout, flushed after each batch of frames, for
//!   `rds-trace -w - | wireshark -k -i -`.
//! - `-r FILE` ([`report`]): one line per RDS frame of a capture (ours or tcpdump's), one
//!   JSON document with `--json`, or one JSON object per line with `--jsonl`. The line format is documented in [`report`] and in
//!   the man page `rds-trace(1)`.
//! - `--install-wireshark-plugin` ([`plugin`]): copies the dissector `wireshark/rds.lua`
//!   (embedded in the binary) into Wireshark's personal Lua plugin folder.
//!
//! Exit status: 0 success, 2 an error (bad arguments included); a broken pipe on stdout ends
//! the run with 0 ([`rds_cli::Failure::of`]). `main` is [`rds_cli::start::main`] with
//! [`TOOL`], [`parse`] and [`run`].
#![warn(missing_docs)]
#![deny(unsafe_code)]

pub mod capture;
pub mod plugin;
pub mod report;

use std::ffi::OsString;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgGroup, CommandFactory, Parser};

/// Default snap length (bytes kept per frame, RDS header included), as tcpdump's.
pub const DEFAULT_SNAPLEN: u32 = 262_144;

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "rds-trace",
    version,
    about = "Capture RDS traffic of a running node to pcap, and report captures",
    long_about = "Capture the RDS frames a running node (an embedded node or the rds-ctrl daemon) \
sends and receives, through its control socket, into a pcap file that Wireshark decodes with the \
dissector this tool installs; print captures as text or JSON.\n\n\
  rds-trace -w FILE [-s SNAPLEN] [-c COUNT] [-G SECONDS] [--node NAME|ADDRESS|PID] [--peer ADDR] [--port PORT] [--transport tcp|ib]\n\
  rds-trace -r FILE [--json | --jsonl] [--peer ADDR] [--port PORT]\n\
  rds-trace --install-wireshark-plugin [--plugin-dir DIR]\n\n\
A capture runs until COUNT frames, SECONDS, or SIGINT/SIGTERM (Ctrl-C), then closes the file and \
prints \"N frames captured, M dropped\" to stderr. Tracing needs root or the node's owner.",
    group(ArgGroup::new("mode").required(true).args(["write", "read", "install_wireshark_plugin"]))
)]
pub struct Cli {
    /// Capture to FILE (pcap); '-' streams to stdout
    #[arg(short = 'w', value_name = "FILE")]
    pub write: Option<PathBuf>,

    /// Print a report of the capture FILE, one line per RDS frame
    #[arg(short = 'r', value_name = "FILE")]
    pub read: Option<PathBuf>,

    /// Copy the Wireshark dissector (rds.lua) into the personal Lua plugin folder
    #[arg(long)]
    pub install_wireshark_plugin: bool,

    /// Bytes kept per frame, RDS header included (at least 48 are kept; 0 = whole frames)
    #[arg(
        short = 's',
        value_name = "SNAPLEN",
        default_value_t = DEFAULT_SNAPLEN,
        conflicts_with_all = ["read", "install_wireshark_plugin"],
        value_parser = |s: &str| rds_cli::size_arg(s, 0, u64::from(u32::MAX)).map(|v| v as u32)
    )]
    pub snaplen: u32,

    /// Stop after COUNT frames
    #[arg(short = 'c', value_name = "COUNT", conflicts_with_all = ["read", "install_wireshark_plugin"], value_parser = |s: &str| rds_cli::size_arg(s, 1, u64::MAX))]
    pub count: Option<u64>,

    /// Stop after SECONDS (decimals allowed)
    #[arg(short = 'G', value_name = "SECONDS", conflicts_with_all = ["read", "install_wireshark_plugin"], value_parser = parse_seconds)]
    pub seconds: Option<Duration>,

    /// Node to trace: its name, an address it owns or its pid (default: the daemon, else the
    /// only node, else the nodes of the one process running them all)
    #[arg(long, value_name = "NAME|ADDRESS|PID", conflicts_with_all = ["read", "install_wireshark_plugin"])]
    pub node: Option<String>,

    /// Only frames to or from this peer address
    #[arg(long, value_name = "ADDR", conflicts_with = "install_wireshark_plugin")]
    pub peer: Option<IpAddr>,

    /// Only frames whose RDS source or destination port is PORT
    #[arg(long, value_name = "PORT", conflicts_with = "install_wireshark_plugin")]
    pub port: Option<u16>,

    /// Which transport's frames the capture holds: tcp (Ethernet pcap) or ib (ERF pcap);
    /// default ib when the node runs only IB, else tcp
    #[arg(long, value_name = "TRANSPORT", value_enum, conflicts_with_all = ["read", "install_wireshark_plugin"])]
    pub transport: Option<capture::CaptureTransport>,

    /// With -r: one JSON document ({"frames": [...]}) instead of text
    #[arg(long, conflicts_with_all = ["write", "install_wireshark_plugin", "jsonl"])]
    pub json: bool,

    /// With -r: JSON Lines, one JSON object per frame and line
    #[arg(long, conflicts_with_all = ["write", "install_wireshark_plugin"])]
    pub jsonl: bool,

    /// With --install-wireshark-plugin: install into DIR instead
    #[arg(long, value_name = "DIR", conflicts_with_all = ["write", "read"])]
    pub plugin_dir: Option<PathBuf>,

    /// With -w: which RDS to capture (a node of ours; the kernel's is captured with tcpdump)
    #[arg(long, value_name = "STACK", help = rds_cli::STACK_HELP, value_parser = rds_cli::stack_arg,
          default_value = "auto", conflicts_with_all = ["read", "install_wireshark_plugin"])]
    pub stack: rds_cli::StackChoice,

    /// Log level (`-v`, `--log-level`).
    #[command(flatten)]
    pub log: rds_cli::LogArgs,
}

/// rds-trace for [`rds_cli::start::main`].
pub const TOOL: rds_cli::start::Tool = rds_cli::start::Tool {
    name: "rds-trace",
    command,
    usage_status: rds_cli::USAGE_STATUS,
};

/// Parses the command line (the program name first) and applies its log level.
///
/// # Errors
/// Help, version or a usage error ([`rds_cli::Failure::usage`]).
pub fn parse(args: Vec<OsString>) -> Result<Cli, rds_cli::Failure> {
    let cli: Cli = rds_cli::exit::parse(TOOL.name, args, TOOL.usage_status)?;
    cli.log.apply();
    Ok(cli)
}

/// What to do on a host whose RDS is the kernel's: the capture comes from tcpdump, the
/// decoding from this tool or Wireshark with our dissector.
pub fn kernel_capture_hint() -> String {
    let mods = rds_core::kernel::transport_modules();
    let mods = if mods.is_empty() {
        "rds".to_string()
    } else {
        mods.join(", ")
    };
    format!(
        "RDS on this host is the kernel's ({mods}), and rds-trace -w captures nodes of ours. \
         Capture the kernel's RDS/TCP with tcpdump: `tcpdump -i any -s 0 -w rds.pcap tcp port \
         16385`, then decode it with `rds-trace -r rds.pcap` (or in Wireshark after \
         `rds-trace --install-wireshark-plugin`); --stack user traces a node of ours"
    )
}

/// `-G`: a positive number of seconds ([`rds_cli::parse_seconds`]).
fn parse_seconds(s: &str) -> Result<Duration, String> {
    match rds_cli::duration_arg(s)? {
        d if d.is_zero() => Err(format!("'{s}' must be a positive duration")),
        d => Ok(d),
    }
}

/// The clap command (for the man page check).
pub fn command() -> clap::Command {
    Cli::command()
}

/// Runs the tool; returns the exit status.
///
/// # Errors
/// Whatever stops the run, with its exit status ([`rds_cli::Failure::of`]).
pub fn run(cli: Cli) -> Result<u8, rds_cli::Failure> {
    run_cli(cli).map_err(|e| rds_cli::Failure::of(TOOL.name, &e))
}

fn run_cli(cli: Cli) -> anyhow::Result<u8> {
    if let Some(file) = cli.read {
        let filter = report::Filter {
            peer: cli.peer,
            port: cli.port,
        };
        let format = if cli.json {
            report::Format::Json
        } else if cli.jsonl {
            report::Format::JsonLines
        } else {
            report::Format::Text
        };
        return report::run(&file, format, &filter);
    }
    if cli.install_wireshark_plugin {
        let stdout = std::io::stdout();
        return plugin::install(cli.plugin_dir.as_deref(), &mut stdout.lock());
    }
    let Some(file) = cli.write else {
        anyhow::bail!("one of -w, -r, --install-wireshark-plugin is needed");
    };
    if cli.node.is_none() && rds_cli::info_stack(cli.stack) == rds_cli::StackChoice::Kernel {
        if let Some(why) = rds_core::kernel::unavailable_reason() {
            anyhow::bail!("--stack kernel: {why}");
        }
        anyhow::bail!("{}", kernel_capture_hint());
    }
    capture::run(capture::Options {
        file,
        snaplen: cli.snaplen,
        count: cli.count,
        duration: cli.seconds,
        node: cli.node,
        peer: cli.peer,
        port: cli.port,
        transport: cli.transport,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_offer_the_options() {
        rds_cli::completions::assert_offers(
            &command(),
            "rds-trace",
            &[
                "-w",
                "-r",
                "-s",
                "-c",
                "-G",
                "--jsonl",
                "--install-wireshark-plugin",
                "-v",
                "--log-level",
            ],
        );
    }

    #[test]
    fn cli_is_consistent() {
        command().debug_assert();
    }

    #[test]
    fn modes_and_option_spellings() {
        let c = Cli::try_parse_from(["rds-trace", "-w", "x.pcap", "-s", "96", "-c", "5"]).unwrap();
        assert_eq!(c.write.as_deref(), Some(std::path::Path::new("x.pcap")));
        assert_eq!((c.snaplen, c.count), (96, Some(5)));
        let c = Cli::try_parse_from(["rds-trace", "-w", "x.pcap", "-s", "2k", "-c", "1m"]).unwrap();
        assert_eq!((c.snaplen, c.count), (2048, Some(1 << 20)));
        let c = Cli::try_parse_from(["rds-trace", "-w", "-", "-G", "1.5", "--node", "n"]).unwrap();
        assert_eq!(c.seconds, Some(Duration::from_millis(1500)));
        for (g, d) in [("500ms", 500), ("2s", 2000), ("1m", 60_000)] {
            let c = Cli::try_parse_from(["rds-trace", "-w", "-", "-G", g]).unwrap();
            assert_eq!(c.seconds, Some(Duration::from_millis(d)), "{g}");
        }
        assert_eq!(c.node.as_deref(), Some("n"));
        assert_eq!(c.snaplen, DEFAULT_SNAPLEN);
        let c = Cli::try_parse_from(["rds-trace", "-r", "x", "--json", "--port", "4000"]).unwrap();
        assert!(c.json && !c.jsonl && c.port == Some(4000));
        let c = Cli::try_parse_from(["rds-trace", "-r", "x", "--jsonl"]).unwrap();
        assert!(c.jsonl && !c.json);
        assert!(Cli::try_parse_from(["rds-trace", "--install-wireshark-plugin"]).is_ok());
        for bad in [
            vec!["rds-trace"],
            vec!["rds-trace", "-w", "a", "-r", "b"],
            vec!["rds-trace", "-r", "a", "-c", "3"],
            vec!["rds-trace", "-w", "a", "--json"],
            vec!["rds-trace", "-w", "a", "--jsonl"],
            vec!["rds-trace", "-r", "a", "--json", "--jsonl"],
            vec!["rds-trace", "-w", "a", "-c", "0"],
            vec!["rds-trace", "-w", "a", "-G", "0"],
            vec!["rds-trace", "-w", "a", "-G", "x"],
            vec!["rds-trace", "-w", "a", "-s", "-1"],
            vec!["rds-trace", "-w", "a", "--peer", "1.2.3"],
            vec!["rds-trace", "-w", "a", "--port", "65536"],
            vec!["rds-trace", "-w", "a", "--plugin-dir", "/tmp"],
            vec!["rds-trace", "-r", "a", "-s", "100"],
            vec!["rds-trace", "-r", "a", "--node", "x"],
            vec!["rds-trace", "--install-wireshark-plugin", "--json"],
            vec!["rds-trace", "--install-wireshark-plugin", "--port", "1"],
            vec!["rds-trace", "--install-wireshark-plugin", "-G", "1"],
        ] {
            assert!(Cli::try_parse_from(&bad).is_err(), "{bad:?}");
        }
    }
}
