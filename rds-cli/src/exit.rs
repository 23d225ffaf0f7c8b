//! The exit status of a tool that stopped on an error: 1 for a negative result, 0 when the
//! reader of its output went away (a broken pipe), 2 for any other error.

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
