//! Helpers shared by the RDS tools (`rds-ping`, `rds-info`, `rds-stress`, `rds-ctrl`,
//! `rds-trace`), each written once with one rule:
//! - [`num`]: sizes and counts with a k/m/g suffix ([`parse_size`]) and seconds with an
//!   s/m/ms/us suffix ([`parse_seconds`]), as the rds-tools command lines take them;
//! - [`start`]: `main() -> ExitCode` around `run(parse())` for every tool ([`start::main`]);
//! - [`exit`]: how a tool stops on an error ([`Failure`]: the text and the exit status) and
//!   the one mapping from errors to statuses ([`error_status`], [`Negative`], a refused
//!   command line: [`Failure::usage`]);
//! - [`logger`]: the logger behind the `log` facade (levels from `RDS_LOG`, `--log-level`
//!   and `-v`; journald priorities for the daemon under systemd), with [`LogArgs`];
//! - [`signals`]: SIGINT and SIGTERM blocked and read from a signalfd ([`StopSignals`]);
//! - [`completions`]: bash, zsh and fish completions (`--generate-completions SHELL`);
//! - [`stack`]: the `--stack kernel|user|auto` option ([`stack_arg`], [`apply_stack`]);
//! - [`table`]: the tables the tools print ([`table()`]), the terminal's width and word
//!   wrapping for help text.
//!
//! Choosing a node (`--node NAME|ADDRESS|PID`, `rds_core::ctl::select`, with its one wording
//! of "several nodes") and speaking the control protocol are `rds_core::ctl`'s; this crate
//! holds only what is the tools' own. Each tool keeps its messages: the helpers return plain
//! values, the callers word the errors.
#![warn(missing_docs)]
#![deny(unsafe_code)]

pub mod completions;
pub mod exit;
pub mod logger;
pub mod num;
pub mod signals;
pub mod stack;
pub mod start;
pub mod table;

pub use exit::{error_status, usage_message, Failure, Negative, USAGE_STATUS};
pub use logger::{LogArgs, LogLevelArg};
pub use num::{duration_arg, parse_seconds, parse_size, size_arg, SecondsError, DURATION_SYNTAX};
pub use signals::StopSignals;
pub use stack::{apply_stack, info_stack, stack_arg, StackChoice, STACK_HELP};
pub use table::table;
