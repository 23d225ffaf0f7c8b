//! The exit status of a tool that stopped on an error: 1 for a negative result, 0 when the
//! reader of its output went away (a broken pipe), 2 for any other error; usage errors with
//! the tool's `prog: ` prefix ([`usage_message`]) and status [`USAGE_STATUS`].

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
