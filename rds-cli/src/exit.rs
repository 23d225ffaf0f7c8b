//! How a tool stops: every tool's `run` ends in an exit status or a [`Failure`] (the text for
//! standard error, already worded, and the status), and this module is the one mapping from
//! errors to those: [`Failure::of`] for the `anyhow` errors of rds-ctrl and rds-trace (1 for a
//! [`Negative`] result, 0 when the reader of the output went away, a broken pipe, 2 for any
//! other error: [`error_status`]), [`Failure::of_io`] for rds-info's write errors, and
//! [`Failure::usage`] for a command line clap refuses ([`usage_message`]: the tool's `prog: `
//! prefix; status [`USAGE_STATUS`], or the original tool's where it differs). The tools'
//! own error types (rds-stress's and rds-ping's, which carry the original tools' messages and
//! statuses) become a [`Failure`] at the end of their `run`.

use std::fmt;
use std::io;

/// A negative result (exit status 1), as opposed to an error (2): nothing to unload, no
/// trace running, a transport this host does not have.
#[derive(Debug)]
pub struct Negative(pub String);

impl fmt::Display for Negative {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Negative {}

/// The exit status of a usage error (an unknown option, a bad value clap refuses), as clap's;
/// rds-ping and rds-info keep the original tools' 1.
pub const USAGE_STATUS: u8 = 2;

/// A usage error as clap renders it (`error: ...`), with the tool's `prog: ` prefix in place
/// of clap's `error: `, so that every tool's messages start with its name.
pub fn usage_message(prog: &str, rendered: &str) -> String {
    let body = rendered.strip_prefix("error: ").unwrap_or(rendered);
    format!("{prog}: {body}")
}

/// Why a tool stops before its work is done: the text for standard error, printed as it is
/// (with its newline; empty prints nothing), and the exit status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// What to print on standard error.
    pub msg: String,
    /// The exit status.
    pub status: u8,
}

impl Failure {
    /// `msg` (printed as it is) and `status`.
    pub fn new(status: u8, msg: impl Into<String>) -> Failure {
        Failure {
            msg: msg.into(),
            status,
        }
    }

    /// A stop with nothing (more) to print: help shown, a broken pipe, a message already
    /// printed.
    pub fn quiet(status: u8) -> Failure {
        Failure::new(status, String::new())
    }

    /// `prog: msg` on a line of its own.
    pub fn line(status: u8, prog: &str, msg: impl fmt::Display) -> Failure {
        Failure::new(status, format!("{prog}: {msg}\n"))
    }

    /// An `anyhow` error: `prog: ` and its chain of causes, with [`error_status`] (nothing
    /// printed for a broken pipe).
    pub fn of(prog: &str, e: &anyhow::Error) -> Failure {
        match error_status(e) {
            0 => Failure::quiet(0),
            status => Failure::line(status, prog, format_args!("{e:#}")),
        }
    }

    /// A write error on the tool's output: 0 and nothing printed for a broken pipe (the
    /// reader went away), else `prog: error` with `status`.
    pub fn of_io(prog: &str, e: &io::Error, status: u8) -> Failure {
        if e.kind() == io::ErrorKind::BrokenPipe {
            return Failure::quiet(0);
        }
        Failure::line(status, prog, e)
    }

    /// A command line clap refused (or help and version, which it asked to print): help and
    /// version are printed on standard output and stop with 0; an error is the rendered
    /// message with the tool's prefix ([`usage_message`]) and `status`.
    pub fn usage(prog: &str, e: &clap::Error, status: u8) -> Failure {
        if !e.use_stderr() {
            let _ = e.print();
            return Failure::quiet(0);
        }
        Failure::new(status, usage_message(prog, &e.render().to_string()))
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.msg.trim_end())
    }
}

impl std::error::Error for Failure {}

/// Parses `args` (the program name first) into the tool's `C`; help, version and usage
/// errors are a [`Failure`] ([`Failure::usage`] with `status`).
///
/// # Errors
/// That failure.
pub fn parse<C: clap::Parser>(
    prog: &str,
    args: impl IntoIterator<Item = std::ffi::OsString>,
    status: u8,
) -> Result<C, Failure> {
    C::try_parse_from(args).map_err(|e| Failure::usage(prog, &e, status))
}

/// The exit status for `e`: 1 when it is a [`Negative`], 0 when a broken pipe is anywhere in
/// its chain of causes (the caller prints nothing then), else 2.
pub fn error_status(e: &anyhow::Error) -> u8 {
    if e.downcast_ref::<Negative>().is_some() {
        return 1;
    }
    if e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    }) {
        return 0;
    }
    2
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context as _;

    #[test]
    fn usage_prefix() {
        assert_eq!(
            usage_message("rds-trace", "error: unexpected argument '-x' found\n"),
            "rds-trace: unexpected argument '-x' found\n"
        );
        assert_eq!(usage_message("rds-ping", "odd\n"), "rds-ping: odd\n");
    }

    #[test]
    fn failures() {
        let f = Failure::of(
            "rds-ctrl",
            &Negative("no RDS daemon is loaded".into()).into(),
        );
        assert_eq!(f, Failure::new(1, "rds-ctrl: no RDS daemon is loaded\n"));
        let e: anyhow::Result<()> =
            Err(io::Error::from(io::ErrorKind::NotFound)).context("opening x.pcap");
        let f = Failure::of("rds-trace", &e.unwrap_err());
        assert_eq!(f.status, 2);
        assert_eq!(f.msg, "rds-trace: opening x.pcap: entity not found\n");
        let pipe: anyhow::Result<()> =
            Err(io::Error::from(io::ErrorKind::BrokenPipe)).context("writing");
        assert_eq!(
            Failure::of("rds-trace", &pipe.unwrap_err()),
            Failure::quiet(0)
        );
        let pipe = io::Error::from(io::ErrorKind::BrokenPipe);
        assert_eq!(Failure::of_io("rds-info", &pipe, 1), Failure::quiet(0));
        let full = io::Error::other("disk full");
        let f = Failure::of_io("rds-info", &full, 1);
        assert_eq!(f, Failure::new(1, "rds-info: disk full\n"));
        assert_eq!(f.to_string(), "rds-info: disk full");
    }

    #[test]
    fn usage_failures() {
        #[derive(clap::Parser, Debug)]
        #[command(name = "rds-x", version)]
        struct Cli {
            #[arg(short = 'c')]
            count: Option<u32>,
        }
        let f = parse::<Cli>("rds-x", ["rds-x", "-z"].map(Into::into), USAGE_STATUS).unwrap_err();
        assert_eq!(f.status, 2);
        assert!(
            f.msg.starts_with("rds-x: unexpected argument '-z' found\n"),
            "{}",
            f.msg
        );
        let f = parse::<Cli>("rds-x", ["rds-x", "-c", "q"].map(Into::into), 1).unwrap_err();
        assert_eq!(f.status, 1);
        assert!(
            f.msg
                .starts_with("rds-x: invalid value 'q' for '-c <COUNT>'"),
            "{}",
            f.msg
        );
        let c = parse::<Cli>("rds-x", ["rds-x", "-c", "3"].map(Into::into), 2).unwrap();
        assert_eq!(c.count, Some(3));
    }

    #[test]
    fn statuses() {
        assert_eq!(
            error_status(&Negative("no trace is running".into()).into()),
            1
        );
        let pipe: anyhow::Result<()> =
            Err(io::Error::from(io::ErrorKind::BrokenPipe)).context("writing the capture");
        assert_eq!(error_status(&pipe.unwrap_err()), 0);
        assert_eq!(error_status(&anyhow::anyhow!("no RDS node is running")), 2);
        let other: anyhow::Result<()> =
            Err(io::Error::from(io::ErrorKind::NotFound)).context("opening");
        assert_eq!(error_status(&other.unwrap_err()), 2);
    }
}
