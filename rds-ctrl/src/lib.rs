//! `rds-ctrl`: the AIX `rdsctrl` command set for this stack: tunables (`help`, `set`, `get`,
//! `default`, with the AIX names and `set`'s AIX forms), the host daemon (`load`, `unload`,
//! `daemon`), the event ring and its level (`ras`), health (`health`), connections
//! (`conn restart|kill`), capture (`trace`), counters (`stats`), `version`, and the `info` and
//! `ping` aliases for `rds-info` and `rds-ping`.
//!
//! With `--json`, the commands that print a listing or a report (`get`, `health`, `ras`,
//! `ras extract`, `version`, `stats`) gather their data once and print it as one JSON
//! document instead of the text (the schema is in rds-ctrl(8)).
//!
//! Commands that act on a node reach it over its control socket ([`rds_core::ctl`]): the node
//! named with `--node`, else the daemon, else the only running node. Changing state needs
//! root or the node's owner; the node checks (`EPERM`). On a host whose kernel runs RDS and
//! where no daemon of ours runs, the tunable commands act on the kernel's sysctls
//! ([`kernel`]).
//!
//! Exit status: 0 done, 1 negative result (nothing to unload, already loaded), 2 error (usage,
//! permission, range, unreachable node); `health` exits as a monitoring plugin does
//! ([`health`]): 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN. `main` is
//! [`rds_cli::start::main`] with [`TOOL`], [`parse`] and [`run`]; errors become a status
//! with [`rds_cli::Failure::of`].
//!
//! Logging: `-v` (before the command) and `--log-level` set the level of this command's log
//! messages, and are passed on as `RDS_LOG` to what it starts (the daemon of `load`, the tool
//! of `info` and `ping`); `daemon` logs as a daemon ([`rds_cli::logger::daemon`]).
#![warn(missing_docs)]
#![deny(unsafe_code)]

pub mod config;
pub mod daemon;
pub mod health;
pub mod kernel;
pub mod load;
pub mod plugin;
pub mod ras;
pub mod trace;
pub mod util;

use std::ffi::OsString;
use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use rds_core::ctl::client::CtlClient;
use rds_core::ctl::{Reply, Request};
use rds_core::tunables::{AixTunable, TunableDef, Tunables, AIX_TUNABLES, TUNABLES};

use config::Config;

/// The RDS protocol version this stack speaks.
pub const RDS_PROTOCOL_VERSION: &str = "3.1";

/// Command-line arguments.
#[derive(Debug, Parser)]
#[command(
    name = "rds-ctrl",
    version,
    about = "Control RDS nodes and the host RDS daemon (AIX rdsctrl commands)",
    long_about = "Control RDS nodes and the host RDS daemon with the commands of AIX rdsctrl: \
                  tunables, loading and unloading the daemon, health, connections, capture, \
                  counters.\n\nCommands that act on a node use the one named with --node, else \
                  the daemon, else the only running node.",
    disable_help_subcommand = true,
    after_help = "Exit status: 0 done, 1 negative result, 2 error; health: 0 OK, 1 WARNING, \
                  2 CRITICAL, 3 UNKNOWN. See rds-ctrl(8)."
)]
pub struct Cli {
    /// The node to act on: its name, an address it owns or its pid (default: the daemon, else
    /// the only running node)
    #[arg(long, global = true, value_name = "NAME|ADDRESS|PID")]
    pub node: Option<String>,
    /// Which RDS `stats` reads: the kernel's counters or a node of ours.
    #[arg(long, global = true, value_name = "STACK", help = rds_cli::STACK_HELP,
          value_parser = rds_cli::stack_arg, default_value = "auto")]
    pub stack: rds_cli::StackChoice,
    /// Print one JSON document instead of the text (get, health, ras, ras extract, version,
    /// stats; see JSON SCHEMA in rds-ctrl(8))
    #[arg(long, global = true)]
    pub json: bool,
    /// `-v`: more log messages (before the command; after it, `info` and `ping` pass it on).
    #[arg(short = 'v', action = clap::ArgAction::Count, help = rds_cli::logger::VERBOSE_HELP)]
    pub verbose: u8,
    /// `--log-level`.
    #[arg(long, global = true, value_name = "LEVEL", value_parser = rds_cli::logger::level_arg,
          help = rds_cli::logger::LEVEL_HELP)]
    pub log_level: Option<log::LevelFilter>,
    /// The command.
    #[command(subcommand)]
    pub cmd: Cmd,
}

/// Transports `load` and `daemon` accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Transport {
    /// As the kernel chooses (the default): TCP, and IB where an RDMA device holds the
    /// address and rdma-core is present; quietly TCP only where IB is unavailable
    #[default]
    Auto,
    /// RDS over TCP only
    Tcp,
    /// RDS over InfiniBand/RoCE verbs only (needs rdma-core and an RDMA device)
    Ib,
    /// TCP, and IB where available
    All,
    /// AIX name for RDS over RoCE: this stack's IB transport (RoCE devices included)
    Ofed,
    /// AIX name for RDS over InfiniBand: this stack's IB transport
    Aixib,
}

impl Transport {
    /// The transport this stack runs for it: `ofed` and `aixib` are [`Transport::Ib`].
    pub fn stack(self) -> Transport {
        match self {
            Transport::Ofed | Transport::Aixib => Transport::Ib,
            t => t,
        }
    }

    /// The name the user gave.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Auto => "auto",
            Transport::Tcp => "tcp",
            Transport::Ib => "ib",
            Transport::All => "all",
            Transport::Ofed => "ofed",
            Transport::Aixib => "aixib",
        }
    }
}

/// `ras` arguments: a level, or `extract`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RasArg {
    /// Keep connections going down and errors
    Minimal,
    /// Also connections coming up and resets (the default)
    Normal,
    /// Also drops, and connections appearing and going away
    Detail,
    /// Also every other counter change
    Maximal,
    /// Print the event ring
    Extract,
}

/// `conn` actions.
#[derive(Debug, Subcommand)]
pub enum ConnAction {
    /// Restart a connection: it reconnects and retransmits what was not acknowledged
    Restart {
        /// Local address
        src: IpAddr,
        /// Peer address
        dst: IpAddr,
    },
    /// Kill a connection: it is dropped with its queued messages (their senders get their
    /// buffer space back); new messages connect again
    Kill {
        /// Local address
        src: IpAddr,
        /// Peer address
        dst: IpAddr,
    },
}

/// `trace` actions.
#[derive(Debug, Subcommand)]
pub enum TraceAction {
    /// Start capturing to FILE (pcap) in the background with rds-trace
    Start {
        /// Capture file
        file: PathBuf,
        /// Bytes kept per frame
        snaplen: u32,
    },
    /// Stop the running capture
    Stop,
    /// Print a capture file (rds-trace -r FILE)
    Report {
        /// Capture file
        file: PathBuf,
    },
}

/// `stats` actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatsAction {
    /// Zero every counter
    Reset,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// List the tunables with description, default, range and unit, or describe one
    Help {
        /// A tunable (full name or last component) or a command
        name: Option<String>,
    },
    /// Set tunables on the running node (checks range and privilege): NAME=VALUE,
    /// NAME= VALUE, NAME =VALUE, NAME = VALUE or NAME VALUE, several in one command
    Set {
        /// Also save them in the config file read at daemon start (a sysctl.d file on a
        /// kernel host)
        #[arg(short = 'p')]
        persistent: bool,
        /// Assignments: tunable (full name, last component or AIX name) and value (a
        /// number; on/off for booleans)
        #[arg(required = true, value_name = "NAME[=]VALUE")]
        assignments: Vec<String>,
    },
    /// Show tunables of the running node (or of the config file with -p)
    Get {
        /// Show the persistent values (config file over defaults) instead
        #[arg(short = 'p')]
        persistent: bool,
        /// Tunable (all when omitted)
        name: Option<String>,
    },
    /// Reset a tunable (all when omitted) to its default
    Default {
        /// Also remove it from the config file
        #[arg(short = 'p')]
        persistent: bool,
        /// Tunable (all when omitted)
        name: Option<String>,
    },
    /// Start the host daemon in the background and wait until it answers (ofed and aixib,
    /// the AIX names, load the IB transport)
    Load {
        /// Transport
        #[arg(value_enum, default_value_t = Transport::Auto)]
        transport: Transport,
        /// An address for the daemon (repeatable; default: the host's unicast addresses)
        #[arg(long = "addr", value_name = "A")]
        addrs: Vec<IpAddr>,
        /// How long to wait for the daemon (seconds, or with ms, s or m)
        #[arg(long, default_value = "10", value_name = "SECS", value_parser = rds_cli::duration_arg)]
        timeout: Duration,
    },
    /// Stop the host daemon and wait until it is gone
    Unload {
        /// How long to wait for the daemon to stop (seconds, or with ms, s or m)
        #[arg(long, default_value = "15", value_name = "SECS", value_parser = rds_cli::duration_arg)]
        timeout: Duration,
    },
    /// Run the host daemon in the foreground (systemd; stops on SIGTERM or SIGINT)
    Daemon {
        /// Transport
        #[arg(value_enum, default_value_t = Transport::Auto)]
        transport: Transport,
        /// An address for the daemon (repeatable; default: the host's unicast addresses)
        #[arg(long = "addr", value_name = "A")]
        addrs: Vec<IpAddr>,
        /// Start a new session first
        #[arg(long, hide = true)]
        detach: bool,
    },
    /// The event ring: set what it keeps (minimal, normal, detail, maximal; -p also saves
    /// the level), print it (extract), or show the level (no argument)
    Ras {
        /// Also save the level in the config file read at daemon start
        #[arg(short = 'p')]
        persistent: bool,
        /// A level, or extract
        #[arg(value_enum)]
        what: Option<RasArg>,
    },
    /// Health check as a monitoring plugin: 'RDS OK|WARNING|CRITICAL|UNKNOWN - summary |
    /// perfdata', exit 0|1|2|3, then the report (uptime, connections, reconnects, drops,
    /// congestion)
    Health,
    /// Run rds-info with the remaining arguments
    Info {
        /// rds-info arguments
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Run rds-ping with the remaining arguments
    Ping {
        /// rds-ping arguments
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Restart or kill a connection
    Conn {
        /// What to do
        #[command(subcommand)]
        action: ConnAction,
    },
    /// Capture RDS traffic with rds-trace: start FILE SNAPLEN | stop | report FILE
    Trace {
        /// What to do
        #[command(subcommand)]
        action: TraceAction,
    },
    /// Print the RDS protocol version and the tool version
    Version,
    /// Print the counters, or zero them with 'reset'
    Stats {
        /// reset: zero every counter
        #[arg(value_enum)]
        action: Option<StatsAction>,
        /// Output format: text (rds-info's counter table), json (as --json) or prometheus
        /// (the counters, connection, socket and queue gauges in the Prometheus text format
        /// 0.0.4, for monitoring systems; see METRICS in rds-ctrl(8))
        #[arg(long, value_enum, value_name = "FORMAT", default_value_t = rds_info::Format::Text)]
        format: rds_info::Format,
    },
    /// Start a new session and exec a program (used by load and trace start)
    #[command(name = "__exec-detached", hide = true)]
    ExecDetached {
        /// Program
        program: OsString,
        /// Its arguments
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
}

/// The clap command (for man page checks).
pub fn command() -> clap::Command {
    Cli::command()
}

/// rds-ctrl for [`rds_cli::start::main`].
pub const TOOL: rds_cli::start::Tool = rds_cli::start::Tool {
    name: "rds-ctrl",
    command,
    usage_status: rds_cli::USAGE_STATUS,
};

/// The daemon's name in its log lines.
pub const DAEMON_LOG_NAME: &str = "rds-ctrl daemon";

/// Parses the command line (the program name first; a usage error of `health` exits 3,
/// [`usage_status`]) and applies its log level: a daemon's lines for `daemon`, and the level
/// given on the command line passed on as `RDS_LOG` to the programs this one starts.
///
/// # Errors
/// Help, version or a usage error ([`rds_cli::Failure::usage`]).
pub fn parse(args: Vec<OsString>) -> Result<Cli, rds_cli::Failure> {
    let status = usage_status(&args);
    let cli: Cli = rds_cli::exit::parse(TOOL.name, args, status)?;
    if matches!(cli.cmd, Cmd::Daemon { .. }) {
        rds_cli::logger::daemon(DAEMON_LOG_NAME);
    }
    rds_cli::logger::set_command_line(cli.verbose, cli.log_level);
    if cli.verbose > 0 || cli.log_level.is_some() {
        let level = rds_cli::logger::level().as_str().to_ascii_lowercase();
        std::env::set_var(rds_cli::logger::ENV, level);
    }
    Ok(cli)
}

/// Runs a parsed command line with standard output; returns the exit status.
///
/// # Errors
/// What stops it, with its status ([`rds_cli::Failure::of`]: a [`util::Negative`] result 1,
/// a closed pipe 0, else 2; a failed write of the output 2).
pub fn run(cli: Cli) -> Result<u8, rds_cli::Failure> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let r = execute(cli, &mut out);
    let flushed = out.flush();
    match r {
        Ok(code) => match flushed {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                Err(rds_cli::Failure::line(2, TOOL.name, e))
            }
            _ => Ok(code),
        },
        Err(e) => Err(rds_cli::Failure::of(TOOL.name, &e)),
    }
}

/// Runs a parsed command line with `out` for its output; returns the exit status.
///
/// # Errors
/// Errors exit with status 2, [`util::Negative`] with 1; the caller prints them.
pub fn execute(cli: Cli, out: &mut dyn Write) -> anyhow::Result<u8> {
    let node = cli.node.as_deref();
    let json = cli.json;
    match cli.cmd {
        Cmd::Help { name } => help(out, name.as_deref()),
        Cmd::Set {
            persistent,
            assignments,
        } => {
            let pairs = parse_assignments(&assignments)?;
            if kernel::is_kernel_host(node) {
                return kernel::set(out, persistent, &pairs);
            }
            set(out, node, persistent, &pairs)
        }
        Cmd::Get { persistent, name } if kernel::is_kernel_host(node) => {
            kernel::get(out, persistent, name.as_deref(), json)
        }
        Cmd::Get { persistent, name } => get(out, node, persistent, name.as_deref(), json),
        Cmd::Default { persistent, name } if kernel::is_kernel_host(node) => {
            kernel::default(out, persistent, name.as_deref())
        }
        Cmd::Default { persistent, name } => default(out, node, persistent, name.as_deref()),
        Cmd::Load {
            transport,
            addrs,
            timeout,
        } => load::load(out, transport, &addrs, timeout),
        Cmd::Unload { timeout } => load::unload(out, timeout),
        Cmd::Daemon {
            transport,
            addrs,
            detach,
        } => daemon::run(&addrs, detach, transport),
        Cmd::Ras { persistent, what } => ras::command(out, node, persistent, what, json),
        Cmd::Health => health::command(out, node, json),
        Cmd::Info { mut args } => {
            if let Some(n) = node {
                args.splice(0..0, ["--node".into(), n.into()]);
            }
            if json {
                args.insert(0, "--json".into());
            }
            alias("rds-info", &args)
        }
        Cmd::Ping { mut args } => {
            if json {
                args.insert(0, "--json".into());
            }
            alias("rds-ping", &args)
        }
        Cmd::Conn { action } => conn(out, node, action),
        Cmd::Trace { action } => match action {
            TraceAction::Start { file, snaplen } => trace::start(out, &file, snaplen, node),
            TraceAction::Stop => trace::stop(out, Duration::from_secs(10)),
            TraceAction::Report { file } => trace::report(&file),
        },
        Cmd::Version => version(out, node, json),
        Cmd::Stats { action, format } => {
            let format = stats_format(json, format)?;
            if node.is_none() && kernel_stats(cli.stack)? {
                stats_kernel(out, action, format)
            } else {
                stats(out, node, action, format)
            }
        }
        Cmd::ExecDetached { program, args } => {
            let e = util::exec_detached(&program, &args);
            Err(anyhow!(e).context(format!("cannot run {}", program.to_string_lossy())))
        }
    }
}

/// Connects to the node the command acts on.
///
/// # Errors
/// No node runs, or the one named cannot be reached.
pub fn connect(node: Option<&str>) -> anyhow::Result<CtlClient> {
    Ok(CtlClient::connect_node(node)?)
}

fn alias(tool: &str, args: &[OsString]) -> anyhow::Result<u8> {
    let path = util::find_tool(tool)?;
    let e = util::exec(&path, args);
    Err(anyhow!(e).context(format!("cannot run {}", path.display())))
}

fn find(name: &str) -> anyhow::Result<&'static TunableDef> {
    if let Some(why) = AixTunable::find(name).and_then(AixTunable::not_applicable) {
        bail!("{why}");
    }
    TunableDef::find(name)
        .ok_or_else(|| anyhow!("unknown tunable '{name}' (see 'rds-ctrl help' for the list)"))
}

/// Parses `set`'s assignments as AIX `rdsctrl` takes them: `name=value`, `name= value`,
/// `name =value`, `name = value` and `name value`, one or more, in order.
///
/// # Errors
/// A name without a value, or an `=` without a name.
pub fn parse_assignments(args: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    let mut toks: Vec<&str> = Vec::new();
    for a in args {
        let mut rest = a.as_str();
        while let Some(i) = rest.find('=') {
            if i > 0 {
                toks.push(&rest[..i]);
            }
            toks.push("=");
            rest = &rest[i + 1..];
        }
        if !rest.is_empty() {
            toks.push(rest);
        }
    }
    let mut pairs = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let name = toks[i];
        if name == "=" {
            bail!("set: '=' without a tunable name before it (expected NAME=VALUE or NAME VALUE)");
        }
        i += 1;
        if toks.get(i) == Some(&"=") {
            i += 1;
        }
        let Some(value) = toks.get(i).filter(|t| **t != "=") else {
            bail!("set: no value for '{name}' (expected NAME=VALUE or NAME VALUE)");
        };
        pairs.push((name.to_string(), value.to_string()));
        i += 1;
    }
    if pairs.is_empty() {
        bail!("set: no assignment (expected NAME=VALUE or NAME VALUE)");
    }
    Ok(pairs)
}

/// Parses a tunable's value: a number, or for booleans on/off, yes/no, true/false.
///
/// # Errors
/// The value is not one of those.
pub fn parse_value(def: &TunableDef, v: &str) -> anyhow::Result<u64> {
    let t = v.trim();
    if def.unit == "boolean" {
        match t.to_ascii_lowercase().as_str() {
            "on" | "yes" | "true" => return Ok(1),
            "off" | "no" | "false" => return Ok(0),
            "0" => return Ok(0),
            "1" => return Ok(1),
            _ => bail!(
                "{}: invalid value '{v}' (expected 0 or 1, on or off, yes or no, true or false)",
                def.name
            ),
        }
    }
    t.parse::<u64>().map_err(|_| {
        anyhow!(
            "{}: invalid value '{v}' (expected a number in {})",
            def.name,
            def.range_text()
        )
    })
}

fn help(out: &mut dyn Write, name: Option<&str>) -> anyhow::Result<u8> {
    match name {
        None => {
            // Text for a person: wrapped to the terminal (80 columns when not on one).
            let width = rds_cli::table::terminal_width().map_or(80, usize::from);
            let para = |out: &mut dyn Write, text: &str| -> std::io::Result<()> {
                for (i, l) in rds_cli::table::wrap(text, width.saturating_sub(4).max(20))
                    .iter()
                    .enumerate()
                {
                    writeln!(out, "{}{l}", if i == 0 { "" } else { "    " })?;
                }
                Ok(())
            };
            para(
                out,
                "Tunables (rds-ctrl set [-p] NAME=VALUE or NAME VALUE; short names and the AIX \
                 names work too):",
            )?;
            let mut t = rds_cli::table(vec!["Name", "Default", "Range", "Unit", "Description"]);
            for d in TUNABLES {
                t.add_row(vec![
                    d.name.to_string(),
                    d.default_value().to_string(),
                    d.range_text(),
                    d.unit.to_string(),
                    d.desc.to_string(),
                ]);
            }
            if rds_cli::table::too_wide(&t) {
                // A narrow terminal: one tunable per paragraph, its description wrapped.
                for d in TUNABLES {
                    writeln!(
                        out,
                        "{} = {} ({} {})",
                        d.name,
                        d.default_value(),
                        d.range_text(),
                        d.unit
                    )?;
                    for l in rds_cli::table::wrap(d.desc, width.saturating_sub(4).max(20)) {
                        writeln!(out, "    {l}")?;
                    }
                    if let Some(a) = d.aix_name() {
                        writeln!(out, "    AIX rdsctrl name: {a}")?;
                    }
                }
            } else {
                writeln!(out, "{t}")?;
            }
            para(out, &aix_names_text())?;
            para(
                out,
                "Commands: help [tunable], set [-p], get [-p], default [-p], load \
                 [tcp|ib|all|ofed|aixib], unload, daemon, ras [-p] \
                 [minimal|normal|detail|maximal|extract], health, info, ping, conn \
                 restart|kill, trace start|stop|report, version, stats [reset]",
            )?;
            para(
                out,
                "'rds-ctrl help COMMAND' or 'rds-ctrl --help' for details.",
            )?;
            Ok(0)
        }
        Some(n) => {
            if let Some(why) = AixTunable::find(n).and_then(AixTunable::not_applicable) {
                writeln!(out, "{why}")?;
                return Ok(0);
            }
            if let Some(d) = TunableDef::find(n) {
                writeln!(out, "{}", d.name)?;
                writeln!(out, "  {}", d.desc)?;
                writeln!(out, "  default: {}", d.default_value())?;
                writeln!(out, "  range:   {}", d.range_text())?;
                writeln!(out, "  unit:    {}", d.unit)?;
                writeln!(
                    out,
                    "  {}",
                    if d.kernel {
                        "a Linux sysctl of the same name"
                    } else {
                        "this stack's own (Linux has no such sysctl)"
                    }
                )?;
                if let Some(a) = d.aix_name() {
                    writeln!(out, "  AIX rdsctrl name: {a}")?;
                }
                return Ok(0);
            }
            let mut cmd = Cli::command();
            if let Some(sc) = cmd.find_subcommand_mut(n).filter(|s| !s.is_hide_set()) {
                write!(out, "{}", sc.render_long_help())?;
                return Ok(0);
            }
            bail!("unknown tunable or command '{n}' (see 'rds-ctrl help' for the tunables)")
        }
    }
}

/// The help's paragraph on the AIX `rdsctrl` tunable names.
fn aix_names_text() -> String {
    let aliases: Vec<String> = AIX_TUNABLES
        .iter()
        .filter_map(|a| a.target.map(|t| format!("{} = {t}", a.name)))
        .collect();
    let none: Vec<&str> = AIX_TUNABLES
        .iter()
        .filter(|a| a.target.is_none())
        .map(|a| a.name)
        .collect();
    format!(
        "AIX rdsctrl names: {}; not applicable on this stack: {} ('rds-ctrl help NAME' says \
         why).",
        aliases.join(", "),
        none.join(", ")
    )
}

/// The persistent tunables: defaults with the config file applied.
pub(crate) fn persistent_values() -> anyhow::Result<(Tunables, Config)> {
    let path = config::path();
    let (c, warnings) =
        Config::load(&path).with_context(|| format!("reading {}", path.display()))?;
    for w in warnings {
        log::warn!("{}: {w}", path.display());
    }
    let mut t = Tunables::default();
    for w in c.apply(&mut t) {
        log::warn!("{}: {w}", path.display());
    }
    Ok((t, c))
}

pub(crate) fn save_config(c: &Config) -> anyhow::Result<PathBuf> {
    let path = config::path();
    c.save(&path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// Whether any node can be reached (for -p commands, which work without one).
pub(crate) fn try_connect(node: Option<&str>) -> anyhow::Result<Option<CtlClient>> {
    match CtlClient::connect_node(node) {
        Ok(c) => Ok(Some(c)),
        Err(rds_core::ctl::client::CtlError::NoNode(_))
            if node.is_none() && rds_core::ctl::discover().is_empty() =>
        {
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

fn set(
    out: &mut dyn Write,
    node: Option<&str>,
    persistent: bool,
    pairs: &[(String, String)],
) -> anyhow::Result<u8> {
    // Every name and value is checked before anything changes.
    let mut values = Vec::new();
    for (name, value) in pairs {
        let def = find(name)?;
        values.push((def, parse_value(def, value)?));
    }
    let client = if persistent {
        try_connect(node)?
    } else {
        Some(connect(node)?)
    };
    if let Some(mut c) = client {
        for &(def, v) in &values {
            c.call_ok(&Request::TunableSet {
                name: def.name.into(),
                value: v,
            })
            .with_context(|| format!("cannot set {} on node '{}'", def.name, c.hello.node))?;
            writeln!(out, "{} = {v}", def.name)?;
        }
    } else {
        // No node runs: check the values against the persistent set.
        let (mut t, _) = persistent_values()?;
        for &(def, v) in &values {
            def.set(&mut t, v)?;
        }
    }
    if persistent {
        let (_, mut c) = persistent_values()?;
        for &(def, v) in &values {
            c.set(def, v);
        }
        let path = save_config(&c)?;
        for &(def, v) in &values {
            writeln!(out, "saved {} = {v} in {}", def.name, path.display())?;
        }
    }
    Ok(0)
}

fn get(
    out: &mut dyn Write,
    node: Option<&str>,
    persistent: bool,
    name: Option<&str>,
    json: bool,
) -> anyhow::Result<u8> {
    let def = name.map(find).transpose()?;
    let values: Vec<(String, u64)> = if persistent {
        let (t, _) = persistent_values()?;
        TUNABLES
            .iter()
            .map(|d| (d.name.to_string(), d.get(&t)))
            .collect()
    } else {
        connect(node)?.tunables()?
    };
    // Asked by its AIX name, a tunable is shown under that name.
    let shown = name.filter(|n| AixTunable::find(n).is_some());
    let values: Vec<(String, serde_json::Value)> = values
        .into_iter()
        .filter(|(n, _)| def.is_none_or(|d| d.name == *n))
        .map(|(n, v)| (shown.map_or(n, str::to_string), v.into()))
        .collect();
    print_tunables(out, values, json)
}

/// Prints `get`'s result: `name = value` lines, or one JSON object `{name: value}` in the
/// same order.
pub(crate) fn print_tunables(
    out: &mut dyn Write,
    values: Vec<(String, serde_json::Value)>,
    json: bool,
) -> anyhow::Result<u8> {
    if json {
        let map: serde_json::Map<String, serde_json::Value> = values.into_iter().collect();
        return util::print_json(out, &serde_json::Value::Object(map));
    }
    for (n, v) in values {
        match v {
            serde_json::Value::String(s) => writeln!(out, "{n} = {s}")?,
            v => writeln!(out, "{n} = {v}")?,
        }
    }
    Ok(0)
}

fn default(
    out: &mut dyn Write,
    node: Option<&str>,
    persistent: bool,
    name: Option<&str>,
) -> anyhow::Result<u8> {
    let def = name.map(find).transpose()?;
    let client = if persistent {
        try_connect(node)?
    } else {
        Some(connect(node)?)
    };
    let what = def.map_or_else(|| "every tunable".to_string(), |d| d.name.to_string());
    if let Some(mut c) = client {
        c.call_ok(&Request::TunableDefault {
            name: def.map(|d| d.name.to_string()),
        })
        .with_context(|| format!("cannot reset {what} on node '{}'", c.hello.node))?;
        writeln!(out, "{what} reset to the default")?;
    }
    if persistent {
        let (_, mut c) = persistent_values()?;
        c.remove(def);
        let path = save_config(&c)?;
        writeln!(out, "removed {what} from {}", path.display())?;
    }
    Ok(0)
}

fn conn(out: &mut dyn Write, node: Option<&str>, action: ConnAction) -> anyhow::Result<u8> {
    let mut c = connect(node)?;
    match action {
        ConnAction::Restart { src, dst } => {
            c.call_ok(&Request::ConnRestart {
                laddr: src,
                faddr: dst,
            })
            .with_context(|| format!("cannot restart {src} -> {dst}"))?;
            writeln!(out, "connection {src} -> {dst} restarted")?;
        }
        ConnAction::Kill { src, dst } => {
            let r = c
                .call(
                    &Request::ConnKill {
                        laddr: src,
                        faddr: dst,
                    },
                    &[],
                )
                .with_context(|| format!("cannot kill {src} -> {dst}"))?;
            let n = match r.0 {
                Reply::Dropped { messages } => messages,
                _ => 0,
            };
            writeln!(
                out,
                "connection {src} -> {dst} killed; {n} queued message(s) dropped"
            )?;
        }
    }
    Ok(0)
}

fn version(out: &mut dyn Write, node: Option<&str>, json: bool) -> anyhow::Result<u8> {
    let hello = CtlClient::connect_node(node).ok().map(|c| c.hello);
    if json {
        let mut doc = serde_json::json!({
            "tool": "rds-ctrl",
            "version": env!("CARGO_PKG_VERSION"),
            "rds_protocol": RDS_PROTOCOL_VERSION,
        });
        if let Some(h) = hello {
            doc["node"] = serde_json::json!({
                "name": h.node,
                "version": h.version,
                "rds_protocol": h.rds_protocol,
                "pid": h.pid,
            });
        }
        return util::print_json(out, &doc);
    }
    writeln!(out, "rds-ctrl (rds-tools) {}", env!("CARGO_PKG_VERSION"))?;
    writeln!(out, "RDS protocol version {RDS_PROTOCOL_VERSION}")?;
    if let Some(c) = hello {
        writeln!(
            out,
            "node '{}': rds-tools {}, RDS protocol version {}, pid {}",
            c.node, c.version, c.rds_protocol, c.pid
        )?;
    }
    Ok(0)
}

/// Whether `stats` reads the kernel's counters: `--stack kernel`, or `auto` on a host whose
/// kernel has RDS loaded.
fn kernel_stats(stack: rds_cli::StackChoice) -> anyhow::Result<bool> {
    if rds_cli::info_stack(stack) != rds_cli::StackChoice::Kernel {
        return Ok(false);
    }
    if let Some(why) = rds_core::kernel::unavailable_reason() {
        return Err(anyhow!("--stack kernel: {why}"));
    }
    Ok(true)
}

/// `stats`' format: `--format`, or json with the global `--json`.
fn stats_format(json: bool, format: rds_info::Format) -> anyhow::Result<rds_info::Format> {
    use rds_info::Format;
    match (json, format) {
        (false, f) => Ok(f),
        (true, Format::Text | Format::Json) => Ok(Format::Json),
        (true, Format::Prometheus) => {
            bail!("stats: --json and --format prometheus do not go together; choose one")
        }
    }
}

/// `stats` on the kernel's RDS: `RDS_INFO_COUNTERS`, in the kernel's order (core, then each
/// loaded transport's), printed as rds-info prints them; as metrics, also its connections,
/// sockets and queues.
fn stats_kernel(
    out: &mut dyn Write,
    action: Option<StatsAction>,
    format: rds_info::Format,
) -> anyhow::Result<u8> {
    if action == Some(StatsAction::Reset) {
        return Err(anyhow!(
            "the kernel's RDS counters cannot be reset (the kernel has no call for it; they \
             restart from zero when the rds module is reloaded); use --stack user for a node \
             of ours"
        ));
    }
    let k = rds_core::kernel::tables::KernelInfo::open()
        .context("cannot read the kernel's RDS counters (RDS_INFO_COUNTERS)")?;
    if format == rds_info::Format::Prometheus {
        let (m, errors) = rds_info::metrics::Metrics::of_kernel(&k, rds_info::metrics::Pick::ALL);
        if m.counters.is_none() {
            bail!(
                "cannot read the kernel's RDS counters (RDS_INFO_COUNTERS): {}",
                errors.join("; ")
            );
        }
        for e in errors {
            log::warn!("{e}");
        }
        out.write_all(m.exposition().as_bytes())?;
        return Ok(0);
    }
    let counters = k
        .counters()
        .context("cannot read the kernel's RDS counters (RDS_INFO_COUNTERS)")?;
    print_counters(out, counters, format == rds_info::Format::Json)
}

/// Prints counters as rds-info's counter table, or as one JSON object.
fn print_counters(
    out: &mut dyn Write,
    counters: Vec<(String, u64)>,
    json: bool,
) -> anyhow::Result<u8> {
    if json {
        return util::print_json(out, &util::counters_json(counters));
    }
    let mut s = String::new();
    rds_info::format::render(
        &mut s,
        &rds_info::format::Table::Counters(counters),
        rds_info::format::Layout::default(),
    );
    out.write_all(s.as_bytes())?;
    Ok(0)
}

fn stats(
    out: &mut dyn Write,
    node: Option<&str>,
    action: Option<StatsAction>,
    format: rds_info::Format,
) -> anyhow::Result<u8> {
    let mut c = connect(node)?;
    if action == Some(StatsAction::Reset) {
        c.call_ok(&Request::StatsReset)
            .context("cannot reset the counters")?;
        writeln!(out, "counters of node '{}' reset", c.hello.node)?;
        return Ok(0);
    }
    if format == rds_info::Format::Prometheus {
        let snap = c.info()?;
        let m = rds_info::metrics::Metrics::of_node(&c.hello, &snap, rds_info::metrics::Pick::ALL);
        out.write_all(m.exposition().as_bytes())?;
        return Ok(0);
    }
    let counters = c.stats()?;
    print_counters(out, counters, format == rds_info::Format::Json)
}

/// The exit status of a usage error in `args` (the whole command line): UNKNOWN (3) for
/// `health`, a monitoring plugin; else [`rds_cli::USAGE_STATUS`].
pub fn usage_status(args: &[OsString]) -> u8 {
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        match a.to_str() {
            // The global options that take a value in the next argument.
            Some("--node" | "--stack" | "--log-level") => {
                it.next();
            }
            Some(o) if o.starts_with('-') => {}
            Some("health") => return plugin::Status::Unknown.code(),
            _ => break,
        }
    }
    rds_cli::USAGE_STATUS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_offer_the_commands_and_options() {
        rds_cli::completions::assert_offers(
            &command(),
            "rds-ctrl",
            &[
                "health",
                "load",
                "stats",
                "--node",
                "--json",
                "--log-level",
                "--format",
            ],
        );
    }

    #[test]
    fn cli_is_consistent() {
        command().debug_assert();
    }

    #[test]
    fn usage_errors_of_health_are_unknown() {
        let st = |a: &[&str]| usage_status(&a.iter().map(OsString::from).collect::<Vec<_>>());
        assert_eq!(st(&["rds-ctrl", "health", "--bogus"]), 3);
        assert_eq!(st(&["rds-ctrl", "--node", "x", "--json", "health", "x"]), 3);
        assert_eq!(st(&["rds-ctrl", "--node=x", "health", "x"]), 3);
        assert_eq!(st(&["rds-ctrl", "--node", "health", "stats", "-z"]), 2);
        assert_eq!(st(&["rds-ctrl", "stats", "health"]), 2);
        assert_eq!(st(&["rds-ctrl", "--bogus"]), 2);
        assert_eq!(st(&["rds-ctrl"]), 2);
    }

    #[test]
    fn stats_formats() {
        use rds_info::Format;
        let c = Cli::try_parse_from(["rds-ctrl", "stats", "--format", "prometheus"]).unwrap();
        assert!(matches!(
            c.cmd,
            Cmd::Stats {
                action: None,
                format: Format::Prometheus
            }
        ));
        assert_eq!(stats_format(true, Format::Text).unwrap(), Format::Json);
        assert_eq!(stats_format(false, Format::Json).unwrap(), Format::Json);
        assert_eq!(
            stats_format(true, Format::Prometheus)
                .unwrap_err()
                .to_string(),
            "stats: --json and --format prometheus do not go together; choose one"
        );
        assert!(Cli::try_parse_from(["rds-ctrl", "stats", "--format", "xml"]).is_err());
    }

    #[test]
    fn aliases_keep_their_arguments() {
        let c = Cli::try_parse_from(["rds-ctrl", "info", "-c", "-n", "--json"]).unwrap();
        match c.cmd {
            Cmd::Info { args } => assert_eq!(args, ["-c", "-n", "--json"]),
            other => panic!("{other:?}"),
        }
        let c = Cli::try_parse_from(["rds-ctrl", "ping", "-c", "3", "127.0.0.1"]).unwrap();
        assert!(matches!(c.cmd, Cmd::Ping { args } if args.len() == 3));
    }

    #[test]
    fn json_is_global() {
        for args in [
            &["rds-ctrl", "--json", "get"][..],
            &["rds-ctrl", "get", "--json"],
            &["rds-ctrl", "get", "-p", "ras_level", "--json"],
            &["rds-ctrl", "stats", "--json"],
            &["rds-ctrl", "ras", "extract", "--json"],
            &["rds-ctrl", "--node", "daemon", "health", "--json"],
        ] {
            assert!(Cli::try_parse_from(args).unwrap().json, "{args:?}");
        }
        assert!(!Cli::try_parse_from(["rds-ctrl", "get"]).unwrap().json);
        // Right after `info` or `ping` it is the global flag, which `run` passes on to the
        // tool; after the tool's first argument it is the tool's own.
        let c = Cli::try_parse_from(["rds-ctrl", "ping", "--json", "127.0.0.1"]).unwrap();
        assert!(c.json);
        assert!(matches!(c.cmd, Cmd::Ping { args } if args == ["127.0.0.1"]));
        let c = Cli::try_parse_from(["rds-ctrl", "ping", "-c", "1", "--json", "::1"]).unwrap();
        assert!(!c.json);
        assert!(matches!(c.cmd, Cmd::Ping { args } if args.len() == 4));
    }

    fn pairs(args: &[&str]) -> anyhow::Result<Vec<(String, String)>> {
        let v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        parse_assignments(&v)
    }

    #[test]
    fn every_aix_form_of_set() {
        let one = vec![("rds_sendspace".to_string(), "65536".to_string())];
        for form in [
            &["rds_sendspace=65536"][..],
            &["rds_sendspace=", "65536"],
            &["rds_sendspace", "=65536"],
            &["rds_sendspace", "=", "65536"],
            &["rds_sendspace", "65536"],
        ] {
            assert_eq!(pairs(form).unwrap(), one, "{form:?}");
        }
        assert_eq!(
            pairs(&["a=1", "b", "2", "c", "=", "3", "d=", "4"]).unwrap(),
            [("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")]
                .map(|(n, v)| (n.to_string(), v.to_string()))
        );
        assert_eq!(
            pairs(&["a="]).unwrap_err().to_string(),
            "set: no value for 'a' (expected NAME=VALUE or NAME VALUE)"
        );
        assert!(pairs(&["=1"]).is_err());
        assert!(pairs(&["a", "1", "b"]).is_err());
        assert!(pairs(&["a==1"]).is_err());
    }

    #[test]
    fn aix_transports_are_ib() {
        assert_eq!(Transport::Ofed.stack(), Transport::Ib);
        assert_eq!(Transport::Aixib.stack(), Transport::Ib);
        assert_eq!(Transport::All.stack(), Transport::All);
        assert_eq!(Transport::Auto.stack(), Transport::Auto);
        let c = Cli::try_parse_from(["rds-ctrl", "load"]).unwrap();
        assert!(matches!(
            c.cmd,
            Cmd::Load {
                transport: Transport::Auto,
                ..
            }
        ));
        let c = Cli::try_parse_from(["rds-ctrl", "load", "aixib"]).unwrap();
        assert!(matches!(
            c.cmd,
            Cmd::Load {
                transport: Transport::Aixib,
                ..
            }
        ));
    }

    #[test]
    fn values_and_booleans() {
        let d = find("ping_enable").unwrap();
        assert_eq!(parse_value(d, "off").unwrap(), 0);
        assert_eq!(parse_value(d, "1").unwrap(), 1);
        assert_eq!(
            parse_value(d, "maybe").unwrap_err().to_string(),
            "net.rds.ping_enable: invalid value 'maybe' \
             (expected 0 or 1, on or off, yes or no, true or false)"
        );
        let d = find("max_unacked_packets").unwrap();
        assert!(parse_value(d, "on").is_err());
        assert!(find("nope").is_err());
        assert_eq!(
            find("rds_recvspace").unwrap().name,
            "net.rds.rcvbuf_default"
        );
        assert!(find("rds_mclustsize")
            .unwrap_err()
            .to_string()
            .starts_with("rds_mclustsize is not applicable on this stack, because "));
    }
}
