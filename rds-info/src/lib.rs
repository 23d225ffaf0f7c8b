//! `rds-info`: shows the state of an RDS node with the tables of the original C `rds-info`.
//!
//! With `--stack kernel` (or `auto`, the default, on a host whose kernel has RDS loaded and no
//! `--node`), the tables are the kernel's, read with its `RDS_INFO_*` getsockopts as the
//! original does ([`kernel`]). Otherwise the node is reached over its control socket
//! ([`rds_core::ctl`]): the one named with `--node`, else the host daemon, else the only
//! running node. One [`InfoSnapshot`] is taken
//! and the selected categories are printed in the ASCII order of their option letters (the
//! original's order, whatever the command line says). Either source converts its rows into the
//! row types of [`format`], which prints them ([`node`] for a node of ours, [`kernel`] for the
//! kernel's RDS).
//!
//! Exit codes follow the original: 0 when the tables were printed (an unavailable category,
//! such as `-I` on a node without IB, is reported on stderr and is not fatal), 1 for a usage
//! error or when no node can be reached (the original's "Unable to create socket"). `main` is
//! [`rds_cli::start::main`] with [`TOOL`], [`parse`] and [`run`].
#![warn(missing_docs)]
#![deny(unsafe_code)]

pub mod format;
pub mod kernel;
pub mod metrics;
pub mod node;
pub mod prometheus;

use std::ffi::OsString;
use std::io::{self, Write};

use clap::{ArgAction, CommandFactory, Parser, ValueEnum};
use rds_core::ctl::client::CtlClient;
use rds_core::ctl::select::{running_nodes, RunningNode};
use rds_core::ctl::InfoSnapshot;

use format::{Category, Layout};
use metrics::{Metrics, Pick};

/// How `rds-info` (and `rds-ctrl stats`) print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Format {
    /// The tables
    #[default]
    Text,
    /// One JSON document (as --json)
    Json,
    /// The Prometheus text exposition format 0.0.4, for monitoring systems
    Prometheus,
}

/// Command-line arguments.
#[derive(Debug, Clone, Default, Parser)]
#[command(
    name = "rds-info",
    version,
    about = "Show RDS sockets, connections, queues and counters of an RDS node",
    long_about = "Show RDS sockets, connections, queues and counters of an RDS node, with the \
                  tables of the original rds-info.\n\nThe options -c -k -n -p -r -s -t -I -T \
                  limit output to the given sources; if none is given, all sources of rds-info \
                  2.0.7 are shown (-p too with -a). Tables are printed in the ASCII order of \
                  the option letters.",
    after_help = "If no options are given then all sources are used."
)]
pub struct Args {
    /// IB transport connections
    #[arg(short = 'I')]
    pub ib: bool,
    /// TCP transport sockets
    #[arg(short = 'T')]
    pub tcp: bool,
    /// statistic counters
    #[arg(short = 'c')]
    pub counters: bool,
    /// sockets
    #[arg(short = 'k')]
    pub sockets: bool,
    /// connections
    #[arg(short = 'n')]
    pub connections: bool,
    /// paths: every path of every connection (state, sequence numbers, queues)
    #[arg(short = 'p')]
    pub paths: bool,
    /// recv queue messages
    #[arg(short = 'r')]
    pub recv: bool,
    /// send queue messages
    #[arg(short = 's')]
    pub send: bool,
    /// retransmit queue messages
    #[arg(short = 't')]
    pub retrans: bool,
    /// More detail: per-path lines under TCP connections (-n), path and state of TCP sockets (-T)
    #[arg(short = 'v', action = ArgAction::Count)]
    pub verbose: u8,
    /// include both IPv6 and IPv4 RDS connections (rds-tools 2.3 column widths)
    #[arg(short = 'a')]
    pub all_families: bool,
    /// Print the node's snapshot as JSON (only the selected sources, if any); --format json
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    /// Output format: text (the tables), json (as --json) or prometheus (metrics in the
    /// Prometheus text format 0.0.4 for monitoring systems: -c counters, -n connections, -k
    /// sockets, -s -t -r queues, everything with no option; see METRICS in rds-info(1))
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = Format::Text)]
    pub format: Format,
    /// The node to ask: its name, an address it owns or its pid (default: the daemon, else the
    /// only running node)
    #[arg(long, value_name = "NAME|ADDRESS|PID")]
    pub node: Option<String>,
    /// List the running nodes and exit (as a JSON document with --json)
    #[arg(long)]
    pub list_nodes: bool,
    /// Which RDS to read: the kernel's tables or a node of ours.
    #[arg(long, value_name = "STACK", help = rds_cli::STACK_HELP,
          value_parser = rds_cli::stack_arg, default_value = "auto")]
    pub stack: rds_cli::StackChoice,
    /// Log level (`--log-level`; `-v` is the original's "more detail").
    #[command(flatten)]
    pub log: rds_cli::LogLevelArg,
}

/// rds-info for [`rds_cli::start::main`]: a usage error exits 1, as the original's.
pub const TOOL: rds_cli::start::Tool = rds_cli::start::Tool {
    name: "rds-info",
    command,
    usage_status: 1,
};

impl Args {
    /// The categories selected on the command line, in printing order; all when none is.
    pub fn categories(&self) -> Vec<Category> {
        let picked: Vec<Category> = Category::PRINT_ORDER
            .into_iter()
            .filter(|c| self.selected(*c))
            .collect();
        if !picked.is_empty() {
            return picked;
        }
        Category::PRINT_ORDER
            .into_iter()
            .filter(|c| *c != Category::Paths || self.all_families)
            .collect()
    }

    /// The output format: `--format`, or json with `--json`.
    pub fn output(&self) -> Format {
        if self.json {
            Format::Json
        } else {
            self.format
        }
    }

    /// The metric families `--format prometheus` prints: those of the selected categories.
    pub fn pick(&self) -> Pick {
        Pick::of(&self.categories(), self.any_selected())
    }

    /// Whether any category option was given.
    pub fn any_selected(&self) -> bool {
        Category::PRINT_ORDER.iter().any(|c| self.selected(*c))
    }

    fn selected(&self, c: Category) -> bool {
        match c {
            Category::Ib => self.ib,
            Category::Tcp => self.tcp,
            Category::Counters => self.counters,
            Category::Sockets => self.sockets,
            Category::Connections => self.connections,
            Category::Paths => self.paths,
            Category::Recv => self.recv,
            Category::Send => self.send,
            Category::Retrans => self.retrans,
        }
    }
}

/// The original usage text: version and explanations on stderr, the option list on stdout
/// (the original prints it with `printf`).
pub fn print_usage(bad: &str) {
    let mut err = io::stderr().lock();
    let _ = writeln!(err, "rds-info: Invalid option '{bad}'");
    let _ = writeln!(err, "rds-info version {}", env!("CARGO_PKG_VERSION"));
    let _ = writeln!(
        err,
        "The following options limit output to the given sources:"
    );
    let _ = err.flush();
    let mut out = io::stdout().lock();
    let _ = writeln!(out, "    -a include both IPv6 and IPv4 RDS connections");
    for c in Category::USAGE_ORDER {
        let _ = writeln!(out, "    -{} {}", c.letter(), c.description());
    }
    let _ = out.flush();
    let _ = write!(
        err,
        "\n\nIf no options are given then all sources are used.\n"
    );
}

/// Parses the command line (the program name first) and applies its log level. An unknown
/// option prints the original usage text ([`print_usage`]).
///
/// # Errors
/// Help or version (printed, status 0) and usage errors (status 1).
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Args, rds_cli::Failure> {
    match Args::try_parse_from(args) {
        Ok(a) => {
            a.log.apply();
            Ok(a)
        }
        Err(e) if e.kind() == clap::error::ErrorKind::UnknownArgument => {
            use clap::error::{ContextKind, ContextValue};
            let bad = match e.get(ContextKind::InvalidArg) {
                Some(ContextValue::String(s)) => s.clone(),
                _ => "?".into(),
            };
            print_usage(&bad);
            Err(rds_cli::Failure::quiet(TOOL.usage_status))
        }
        Err(e) => Err(rds_cli::Failure::usage(TOOL.name, &e, TOOL.usage_status)),
    }
}

/// The clap command (for man page checks).
pub fn command() -> clap::Command {
    Args::command()
}

/// Runs `rds-info` with standard output; returns the exit code.
///
/// # Errors
/// A failed write of the output: status 1, or 0 and nothing said for a closed pipe
/// ([`rds_cli::Failure::of_io`]).
pub fn run(args: Args) -> Result<u8, rds_cli::Failure> {
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    execute(&args, &mut out)
        .and_then(|code| out.flush().map(|()| code))
        .map_err(|e| rds_cli::Failure::of_io(TOOL.name, &e, 1))
}

/// Runs `rds-info`; returns the exit code. Output goes to `out`, diagnostics to stderr.
///
/// # Errors
/// Only write errors on `out` (a closed pipe is for the caller to treat as success).
pub fn execute(args: &Args, out: &mut dyn Write) -> io::Result<u8> {
    if args.list_nodes {
        return list_nodes(out, args.output() == Format::Json);
    }
    if args.node.is_none() && rds_cli::info_stack(args.stack) == rds_cli::StackChoice::Kernel {
        return run_kernel(args, out);
    }
    let mut client = match CtlClient::connect_node(args.node.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rds-info: {e}");
            return Ok(1);
        }
    };
    let snap = match client.info() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("rds-info: node '{}': {e}", client.hello.node);
            return Ok(1);
        }
    };
    if args.output() == Format::Prometheus {
        out.write_all(
            Metrics::of_node(&client.hello, &snap, args.pick())
                .exposition()
                .as_bytes(),
        )?;
        out.flush()?;
        return Ok(0);
    }
    if args.output() == Format::Json {
        let v = json(args, &client.hello.node, &snap);
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&v).unwrap_or_else(|_| "{}".into())
        )?;
        return Ok(0);
    }
    let layout = Layout {
        all_families: args.all_families,
        verbose: args.verbose,
        // Every socket of an embedded node is its own process's; the daemon's belong to its
        // clients.
        socket_pid: (client.hello.node != rds_core::ctl::DAEMON_NAME).then_some(client.hello.pid),
    };
    for c in args.categories() {
        print_table(out, node::table(&snap, c, layout), layout)?;
        if let Some((n, what)) = omitted(&snap.omitted, c).filter(|&(n, _)| n > 0) {
            out.flush()?;
            eprintln!("rds-info: {n} more {what} not listed (a node's reply holds the first ones)");
        }
    }
    out.flush()?;
    Ok(0)
}

/// Prints a table, or its source's reason for not giving it (on stderr, not fatal).
fn print_table(out: &mut dyn Write, t: Result<format::Table, String>, l: Layout) -> io::Result<()> {
    match t {
        Ok(t) => {
            let mut s = String::new();
            format::render(&mut s, &t, l);
            out.write_all(s.as_bytes())
        }
        Err(msg) => {
            out.flush()?;
            eprintln!("{msg}");
            Ok(())
        }
    }
}

/// `run` on the kernel's RDS.
fn run_kernel(args: &Args, out: &mut dyn Write) -> io::Result<u8> {
    if let Some(why) = rds_core::kernel::unavailable_reason() {
        eprintln!("rds-info: --stack kernel: {why}");
        return Ok(1);
    }
    let k = match rds_core::kernel::tables::KernelInfo::open() {
        Ok(k) => k,
        Err(e) => {
            eprintln!("rds-info: Unable to create socket: {e}");
            return Ok(1);
        }
    };
    if args.output() == Format::Prometheus {
        let (m, errors) = Metrics::of_kernel(&k, args.pick());
        out.write_all(m.exposition().as_bytes())?;
        out.flush()?;
        for e in errors {
            eprintln!("rds-info: {e}");
        }
        return Ok(0);
    }
    if args.output() == Format::Json {
        let v = kernel::json(&k, &args.categories(), args.all_families);
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&v).unwrap_or_else(|_| "{}".into())
        )?;
        return Ok(0);
    }
    let layout = Layout {
        all_families: args.all_families,
        verbose: args.verbose,
        socket_pid: None,
    };
    for c in args.categories() {
        print_table(out, kernel::table(&k, c, args.all_families), layout)?;
    }
    out.flush()?;
    Ok(0)
}

/// How many entries of a category's list the node left out of the snapshot, and what they are.
fn omitted(o: &rds_core::ctl::InfoOmitted, c: Category) -> Option<(u64, &'static str)> {
    match c {
        Category::Connections | Category::Paths => Some((o.connections, "connections")),
        Category::Sockets => Some((o.sockets, "sockets")),
        Category::Send => Some((o.send, "send queue messages")),
        Category::Retrans => Some((o.retrans, "retransmit queue messages")),
        Category::Recv => Some((o.recv, "receive queue messages")),
        Category::Tcp => Some((o.tcp, "TCP sockets")),
        Category::Ib | Category::Counters => None,
    }
}

/// The snapshot as JSON, limited to the selected categories when any was selected.
pub fn json(args: &Args, node: &str, snap: &InfoSnapshot) -> serde_json::Value {
    let mut v = serde_json::to_value(snap).unwrap_or(serde_json::Value::Null);
    if let serde_json::Value::Object(map) = &mut v {
        if args.any_selected() {
            let keep: Vec<&str> = args
                .categories()
                .iter()
                .filter_map(|c| match c {
                    Category::Ib => None,
                    Category::Tcp => Some("tcp"),
                    Category::Counters => Some("counters"),
                    Category::Sockets => Some("sockets"),
                    Category::Connections | Category::Paths => Some("connections"),
                    Category::Recv => Some("recv"),
                    Category::Send => Some("send"),
                    Category::Retrans => Some("retrans"),
                })
                .collect();
            map.retain(|k, _| k == "transports" || k == "omitted" || keep.contains(&k.as_str()));
        }
        if let Some(c) = map.get_mut("counters") {
            *c = counters_object(c);
        }
        map.insert("node".into(), serde_json::Value::String(node.to_string()));
    }
    v
}

/// The counters as one object `{name: value}` (the snapshot holds `[name, value]` pairs).
fn counters_object(pairs: &serde_json::Value) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    for p in pairs.as_array().into_iter().flatten() {
        if let (Some(name), Some(value)) = (p[0].as_str(), p.get(1)) {
            m.insert(name.to_string(), value.clone());
        }
    }
    serde_json::Value::Object(m)
}

/// `--list-nodes`: one row (or JSON object) per running node.
fn list_nodes(out: &mut dyn Write, json: bool) -> io::Result<u8> {
    let nodes = running_nodes();
    if json {
        let v = serde_json::json!({
            "nodes": nodes.iter().map(node_json).collect::<Vec<_>>(),
        });
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&v).unwrap_or_else(|_| "{}".into())
        )?;
        return Ok(if nodes.is_empty() { 1 } else { 0 });
    }
    if nodes.is_empty() {
        eprintln!("rds-info: no RDS node is running");
        return Ok(1);
    }
    let mut t = rds_cli::table(vec![
        "Node",
        "Pid",
        "Program",
        "Owner",
        "Addresses",
        "Version",
        "Socket",
    ]);
    for n in &nodes {
        let socket = n.endpoint.path.display().to_string();
        let row = match &n.hello {
            Some(h) => vec![
                n.name().to_string(),
                h.pid.to_string(),
                n.program.clone().unwrap_or_else(|| "-".into()),
                h.owner_uid.to_string(),
                h.addrs
                    .iter()
                    .map(|a| format::addr(*a))
                    .collect::<Vec<_>>()
                    .join(" "),
                h.version.clone(),
                socket,
            ],
            None => vec![
                n.name().to_string(),
                "-".into(),
                "-".into(),
                "-".into(),
                "unreachable".into(),
                "-".into(),
                socket,
            ],
        };
        t.add_row(row);
    }
    writeln!(out, "{t}")?;
    Ok(0)
}

/// One node of `--list-nodes --json` (the schema in rds-info(1)).
fn node_json(n: &RunningNode) -> serde_json::Value {
    let mut v = serde_json::json!({
        "name": n.name(),
        "socket": n.endpoint.path.display().to_string(),
        "reachable": n.hello.is_some(),
    });
    if let (Some(h), serde_json::Value::Object(m)) = (&n.hello, &mut v) {
        m.insert("pid".into(), h.pid.into());
        m.insert(
            "program".into(),
            n.program
                .clone()
                .map_or(serde_json::Value::Null, Into::into),
        );
        m.insert("owner_uid".into(), h.owner_uid.into());
        m.insert(
            "addresses".into(),
            h.addrs
                .iter()
                .map(|a| format::addr(*a))
                .collect::<Vec<_>>()
                .into(),
        );
        m.insert("version".into(), h.version.clone().into());
        m.insert("rds_protocol".into(), h.rds_protocol.clone().into());
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_offer_the_options() {
        rds_cli::completions::assert_offers(
            &command(),
            "rds-info",
            &[
                "-c",
                "-k",
                "-n",
                "-I",
                "-T",
                "--json",
                "--format",
                "--list-nodes",
                "--log-level",
            ],
        );
    }

    fn args(v: &[&str]) -> Args {
        match parse(v.iter().map(OsString::from)) {
            Ok(a) => a,
            Err(f) => panic!("exit {}: {}", f.status, f.msg),
        }
    }

    #[test]
    fn categories_follow_letter_order() {
        let a = args(&["rds-info", "-t", "-c", "-T", "-n"]);
        let l: String = a.categories().iter().map(|c| c.letter()).collect();
        assert_eq!(l, "Tcnt");
        let all: String = args(&["rds-info"])
            .categories()
            .iter()
            .map(|c| c.letter())
            .collect();
        assert_eq!(all, "ITcknrst");
        let all_a: String = args(&["rds-info", "-a"])
            .categories()
            .iter()
            .map(|c| c.letter())
            .collect();
        assert_eq!(all_a, "ITcknprst");
        let a = args(&["rds-info", "-vvcn"]);
        assert_eq!(a.verbose, 2);
        assert!(a.counters && a.connections);
    }

    #[test]
    fn unknown_option_is_a_usage_error() {
        assert_eq!(
            parse(["rds-info", "-x"].iter().map(OsString::from)).unwrap_err(),
            rds_cli::Failure::quiet(1)
        );
        assert_eq!(
            parse(["rds-info", "-+"].iter().map(OsString::from)).unwrap_err(),
            rds_cli::Failure::quiet(1)
        );
    }

    #[test]
    fn formats() {
        assert_eq!(args(&["rds-info"]).output(), Format::Text);
        assert_eq!(args(&["rds-info", "--json"]).output(), Format::Json);
        assert_eq!(
            args(&["rds-info", "--format", "json"]).output(),
            Format::Json
        );
        let a = args(&["rds-info", "-c", "--format", "prometheus"]);
        assert_eq!(a.output(), Format::Prometheus);
        assert!(a.pick().counters && !a.pick().connections && !a.pick().node_info);
        assert_eq!(args(&["rds-info", "--format=prometheus"]).pick(), Pick::ALL);
        for bad in [
            &["rds-info", "--json", "--format", "prometheus"][..],
            &["rds-info", "--format", "xml"],
            &["rds-info", "--format"],
        ] {
            let f = parse(bad.iter().map(OsString::from)).unwrap_err();
            assert_eq!(f.status, 1);
            assert!(f.msg.starts_with("rds-info: "), "{}", f.msg);
        }
    }

    #[test]
    fn cli_is_consistent() {
        command().debug_assert();
    }
}
