//! The tools' logger: the library (`rds-core`) and the tools log through the `log` facade, and
//! this is the one logger behind it in every tool, writing one line per message on standard
//! error.
//!
//! Level: `--log-level LEVEL`, else the `RDS_LOG` environment variable (`error`, `warn`,
//! `info`, `debug`, `trace` or `off`), else the tool's default (`warn`; the daemon `info`);
//! each `-v` (where a tool has it) raises that to `info`, `debug`, `trace`. `RDS_IB_DEBUG`
//! (any value) keeps its old meaning: the IB transport's `debug` messages whatever the level.
//!
//! Lines ([`Style`]): a tool writes `prog: message`, with `warning: `, `debug: ` or `trace: `
//! after the name for those levels (debug and trace lines also say the time and where in the
//! code); the daemon writes `YYYY-MM-DD HH:MM:SS rds-ctrl daemon[PID]: message` (its log file
//! under `rds-ctrl load`), or under systemd (`JOURNAL_STREAM` or `INVOCATION_ID` set) the
//! sd-daemon priority prefix and the message only, `<6>message`, which journald files with
//! its priority (3 err, 4 warning, 6 info, 7 debug) and its own timestamp.

use std::io::Write;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering::Relaxed};
use std::sync::OnceLock;

pub use log::LevelFilter;
use log::{Level, Log, Metadata, Record};

/// The environment variable that sets the level.
pub use rds_core::env::LOG as ENV;

/// Where the IB transport's messages come from (their `log` target starts with it).
pub const IB_TARGET: &str = "rds_core::node::ib";

/// The level names, as `--log-level` and `RDS_LOG` take them.
pub const LEVELS: &str = "error, warn, info, debug, trace or off";

/// `--log-level`'s help line.
pub const LEVEL_HELP: &str = "Log messages of LEVEL and above on standard error: error, warn, \
                              info, debug, trace or off (default: RDS_LOG, else warn)";

/// `-v`'s help line, for the tools that have it.
pub const VERBOSE_HELP: &str = "Log more on standard error: -v info, -vv debug, -vvv trace \
                                (see --log-level)";

/// How a line looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// `prog: message` (a command-line tool).
    Tool,
    /// `YYYY-MM-DD HH:MM:SS prog[PID]: message` (a daemon writing to a file or a terminal).
    Daemon,
    /// `<N>message`, N the sd-daemon priority (a daemon whose standard error is the journal).
    Journal,
}

/// The logger's state: set once at start, the level changed by the command line.
struct Logger {
    /// The program's name (`rds-ping`), or the daemon's (`rds-ctrl daemon`).
    name: OnceLock<&'static str>,
    /// The [`Style`], as a number.
    style: AtomicU8,
    /// The level in force, as `LevelFilter as usize`.
    level: AtomicUsize,
    /// `RDS_IB_DEBUG`: the IB transport's debug messages whatever the level.
    ib_debug: AtomicBool,
}

static LOGGER: Logger = Logger {
    name: OnceLock::new(),
    style: AtomicU8::new(0),
    level: AtomicUsize::new(LevelFilter::Warn as usize),
    ib_debug: AtomicBool::new(false),
};

/// What decides the level, kept so that the command line can change it after the start.
struct Choice {
    default: AtomicUsize,
    env: AtomicUsize,
    verbose: AtomicU8,
    explicit: AtomicUsize,
}

/// `usize::MAX` in [`Choice`]: not given.
const UNSET: usize = usize::MAX;

static CHOICE: Choice = Choice {
    default: AtomicUsize::new(LevelFilter::Warn as usize),
    env: AtomicUsize::new(UNSET),
    verbose: AtomicU8::new(0),
    explicit: AtomicUsize::new(UNSET),
};

fn filter_of(n: usize) -> LevelFilter {
    match n {
        0 => LevelFilter::Off,
        1 => LevelFilter::Error,
        2 => LevelFilter::Warn,
        3 => LevelFilter::Info,
        4 => LevelFilter::Debug,
        _ => LevelFilter::Trace,
    }
}

fn style_of(n: u8) -> Style {
    match n {
        1 => Style::Daemon,
        2 => Style::Journal,
        _ => Style::Tool,
    }
}

/// Parses a level name (any case), as `--log-level` and `RDS_LOG` take them.
///
/// # Errors
/// A message naming the levels.
pub fn level_arg(s: &str) -> Result<LevelFilter, String> {
    LevelFilter::from_str(s.trim()).map_err(|_| format!("invalid level '{s}' ({LEVELS})"))
}

/// The level `verbose` `-v`s ask for (none for 0).
pub fn verbosity(verbose: u8) -> Option<LevelFilter> {
    match verbose {
        0 => None,
        1 => Some(LevelFilter::Info),
        2 => Some(LevelFilter::Debug),
        _ => Some(LevelFilter::Trace),
    }
}

/// The level in force for a tool whose default is `default`: `explicit` (`--log-level`),
/// else `env` (`RDS_LOG`) or the default, raised by `-v`s.
pub fn resolve(
    default: LevelFilter,
    env: Option<LevelFilter>,
    verbose: u8,
    explicit: Option<LevelFilter>,
) -> LevelFilter {
    if let Some(l) = explicit {
        return l;
    }
    let base = env.unwrap_or(default);
    verbosity(verbose).map_or(base, |v| v.max(base))
}

fn apply() {
    let get = |a: &AtomicUsize| match a.load(Relaxed) {
        UNSET => None,
        n => Some(filter_of(n)),
    };
    let level = resolve(
        filter_of(CHOICE.default.load(Relaxed)),
        get(&CHOICE.env),
        CHOICE.verbose.load(Relaxed),
        get(&CHOICE.explicit),
    );
    LOGGER.level.store(level as usize, Relaxed);
    let max = if LOGGER.ib_debug.load(Relaxed) {
        level.max(LevelFilter::Debug)
    } else {
        level
    };
    log::set_max_level(max);
}

/// Installs the logger for the tool `prog` (style [`Style::Tool`], default level `warn`),
/// with the level of `RDS_LOG`. An invalid `RDS_LOG` is said once (a warning) and ignored.
/// Later calls do nothing.
pub fn init(prog: &'static str) {
    let _ = LOGGER.name.set(prog);
    install();
}

/// Reads the environment and installs the logger, once.
fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        LOGGER.ib_debug.store(rds_core::env::ib_debug(), Relaxed);
        let bad = match rds_core::env::log_level() {
            Some(v) => match level_arg(&v) {
                Ok(l) => {
                    CHOICE.env.store(l as usize, Relaxed);
                    None
                }
                Err(e) => Some(e),
            },
            _ => None,
        };
        if log::set_logger(&LOGGER).is_err() {
            return;
        }
        apply();
        if let Some(e) = bad {
            log::warn!("{ENV}: {e}; using the default");
        }
    });
}

/// Applies the command line: `verbose` `-v`s and `--log-level`.
pub fn set_command_line(verbose: u8, explicit: Option<LevelFilter>) {
    CHOICE.verbose.store(verbose, Relaxed);
    if let Some(l) = explicit {
        CHOICE.explicit.store(l as usize, Relaxed);
    }
    apply();
}

/// The level in force (what `RDS_LOG` should say to pass it on to a program this one starts).
pub fn level() -> LevelFilter {
    filter_of(LOGGER.level.load(Relaxed))
}

/// Whether this process runs as a systemd service whose messages go to the journal:
/// `JOURNAL_STREAM` or `INVOCATION_ID` set (as systemd sets them for a unit's processes).
pub fn under_systemd() -> bool {
    ["JOURNAL_STREAM", "INVOCATION_ID"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
}

/// Makes this process's lines a daemon's, `name` its name in them (`rds-ctrl daemon`): the
/// default level becomes `info`, and the style [`Style::Journal`] under systemd
/// ([`under_systemd`]), else [`Style::Daemon`].
pub fn daemon(name: &'static str) {
    DAEMON_NAME.get_or_init(|| name);
    let style = if under_systemd() {
        Style::Journal
    } else {
        Style::Daemon
    };
    LOGGER.style.store(style as u8, Relaxed);
    CHOICE.default.store(LevelFilter::Info as usize, Relaxed);
    install();
    apply();
}

/// The daemon's name once [`daemon`] was called (the tool's name is kept for its own lines
/// before that).
static DAEMON_NAME: OnceLock<&'static str> = OnceLock::new();

/// The style in force.
pub fn style() -> Style {
    style_of(LOGGER.style.load(Relaxed))
}

/// The sd-daemon priority of a level (`<N>` in front of a journald line).
pub fn priority(l: Level) -> u8 {
    match l {
        Level::Error => 3,
        Level::Warn => 4,
        Level::Info => 6,
        Level::Debug | Level::Trace => 7,
    }
}

/// One log line (with its newline) in `style`, for `name`; `time` is the UTC date and time
/// `YYYY-MM-DD HH:MM:SS.mmm`, `pid` the process's.
pub fn line(
    style: Style,
    name: &str,
    level: Level,
    target: &str,
    msg: &str,
    time: &str,
    pid: u32,
) -> String {
    let detail = matches!(level, Level::Debug | Level::Trace);
    let word = match level {
        Level::Error | Level::Info => "",
        Level::Warn => "warning: ",
        Level::Debug => "debug: ",
        Level::Trace => "trace: ",
    };
    match style {
        Style::Tool if detail => {
            let clock = time.get(11..).unwrap_or(time);
            format!("{name}: {word}[{clock} {target}] {msg}\n")
        }
        Style::Tool => format!("{name}: {word}{msg}\n"),
        Style::Daemon => {
            let secs = time.get(..19).unwrap_or(time);
            let at = if detail {
                format!("{target}: ")
            } else {
                String::new()
            };
            format!("{secs} {name}[{pid}]: {word}{at}{msg}\n")
        }
        Style::Journal => {
            // journald takes each line for a message of its own: each gets the priority.
            let p = priority(level);
            let at = if detail {
                format!("{target}: ")
            } else {
                String::new()
            };
            let mut s = String::new();
            for (i, l) in msg.split('\n').enumerate() {
                if i == 0 {
                    s.push_str(&format!("<{p}>{at}{l}\n"));
                } else {
                    s.push_str(&format!("<{p}>{l}\n"));
                }
            }
            s
        }
    }
}

impl Log for Logger {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        m.level() <= filter_of(self.level.load(Relaxed))
            || (m.level() <= Level::Debug
                && self.ib_debug.load(Relaxed)
                && m.target().starts_with(IB_TARGET))
    }

    fn log(&self, r: &Record<'_>) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let style = style_of(self.style.load(Relaxed));
        let name = match style {
            Style::Tool => self.name.get().copied().unwrap_or("rds"),
            _ => DAEMON_NAME.get().copied().unwrap_or("rds"),
        };
        let time = rds_core::ras::utc_ms(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
        );
        let text = line(
            style,
            name,
            r.level(),
            r.target(),
            &r.args().to_string(),
            &time,
            std::process::id(),
        );
        // One write per line, so that lines of several threads do not mix.
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    }

    fn flush(&self) {}
}

/// `-v` and `--log-level`, for a tool whose `-v` is free (flattened into its clap command).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LogArgs {
    #[arg(short = 'v', action = clap::ArgAction::Count, help = VERBOSE_HELP)]
    /// `-v`s given.
    pub verbose: u8,
    #[arg(long, value_name = "LEVEL", value_parser = level_arg, help = LEVEL_HELP)]
    /// `--log-level`.
    pub log_level: Option<LevelFilter>,
}

impl LogArgs {
    /// Applies them to the logger ([`set_command_line`]).
    pub fn apply(&self) {
        set_command_line(self.verbose, self.log_level);
    }
}

/// `--log-level` alone, for a tool whose `-v` means something else (rds-ping, rds-info,
/// rds-stress).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LogLevelArg {
    #[arg(long, value_name = "LEVEL", value_parser = level_arg, help = LEVEL_HELP)]
    /// `--log-level`.
    pub log_level: Option<LevelFilter>,
}

impl LogLevelArg {
    /// Applies it to the logger ([`set_command_line`]).
    pub fn apply(&self) {
        set_command_line(0, self.log_level);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "2024-05-06 07:08:09.123";

    #[test]
    fn tool_lines() {
        let l = |lv, msg| line(Style::Tool, "rds-ping", lv, "rds_core::x", msg, T, 7);
        assert_eq!(
            l(Level::Error, "the RDS daemon went away"),
            "rds-ping: the RDS daemon went away\n"
        );
        assert_eq!(l(Level::Warn, "odd"), "rds-ping: warning: odd\n");
        assert_eq!(l(Level::Info, "node up"), "rds-ping: node up\n");
        assert_eq!(
            l(Level::Debug, "cm event"),
            "rds-ping: debug: [07:08:09.123 rds_core::x] cm event\n"
        );
        assert_eq!(
            l(Level::Trace, "t"),
            "rds-ping: trace: [07:08:09.123 rds_core::x] t\n"
        );
    }

    #[test]
    fn daemon_lines() {
        let l = |lv, msg| line(Style::Daemon, "rds-ctrl daemon", lv, "rds_ctrl", msg, T, 42);
        assert_eq!(
            l(Level::Info, "started"),
            "2024-05-06 07:08:09 rds-ctrl daemon[42]: started\n"
        );
        assert_eq!(
            l(Level::Warn, "no IB"),
            "2024-05-06 07:08:09 rds-ctrl daemon[42]: warning: no IB\n"
        );
        assert_eq!(
            l(Level::Debug, "x"),
            "2024-05-06 07:08:09 rds-ctrl daemon[42]: debug: rds_ctrl: x\n"
        );
    }

    #[test]
    fn journal_lines_carry_the_priority_and_no_time() {
        let l = |lv, msg| {
            line(
                Style::Journal,
                "rds-ctrl daemon",
                lv,
                "rds_ctrl",
                msg,
                T,
                42,
            )
        };
        assert_eq!(l(Level::Error, "ras error: x"), "<3>ras error: x\n");
        assert_eq!(l(Level::Warn, "no IB"), "<4>no IB\n");
        assert_eq!(l(Level::Info, "started"), "<6>started\n");
        assert_eq!(l(Level::Debug, "x"), "<7>rds_ctrl: x\n");
        assert_eq!(l(Level::Trace, "x"), "<7>rds_ctrl: x\n");
        assert_eq!(l(Level::Info, "a\nb"), "<6>a\n<6>b\n");
    }

    #[test]
    fn levels() {
        assert_eq!(level_arg("DEBUG"), Ok(LevelFilter::Debug));
        assert_eq!(level_arg("warn"), Ok(LevelFilter::Warn));
        assert_eq!(level_arg("off"), Ok(LevelFilter::Off));
        let e = level_arg("loud").unwrap_err();
        assert_eq!(
            e,
            "invalid level 'loud' (error, warn, info, debug, trace or off)"
        );
        use LevelFilter::*;
        assert_eq!(resolve(Warn, None, 0, None), Warn);
        assert_eq!(resolve(Info, None, 0, None), Info);
        assert_eq!(resolve(Warn, Some(Error), 0, None), Error);
        assert_eq!(resolve(Warn, None, 1, None), Info);
        assert_eq!(resolve(Warn, None, 2, None), Debug);
        assert_eq!(resolve(Warn, None, 9, None), Trace);
        // -v never lowers what RDS_LOG asked for; --log-level decides alone.
        assert_eq!(resolve(Warn, Some(Trace), 1, None), Trace);
        assert_eq!(resolve(Warn, Some(Trace), 1, Some(Error)), Error);
    }
}
