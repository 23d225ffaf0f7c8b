//! The persistent tunables file read by the daemon at start (`set -p`, `default -p`).
//!
//! Location: `$RDS_CONFIG` if set; else `/etc/rds/rds.conf` for root; else
//! `$XDG_CONFIG_HOME/rds/rds.conf` (`~/.config/rds/rds.conf`).
//!
//! Format: one `name = value` per line (full `net.rds.…` names or their last component,
//! decimal values); blank lines and lines starting with `#` are ignored. Edits keep the other
//! lines (comments included) as they are and replace the file atomically.

use std::io;
use std::path::{Path, PathBuf};

use rds_core::tunables::{TunableDef, Tunables};

/// The config file's path for this user.
pub fn path() -> PathBuf {
    if let Some(p) = rds_core::env::config() {
        return p;
    }
    if nix::unistd::geteuid().is_root() {
        return PathBuf::from("/etc/rds/rds.conf");
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("rds").join("rds.conf")
}

/// One line of the file.
#[derive(Debug, Clone)]
enum Line {
    /// A setting (the tunable's full name).
    Setting {
        def: &'static TunableDef,
        value: u64,
    },
    /// Anything else, kept verbatim.
    Other(String),
}

/// The file's contents.
#[derive(Debug, Clone, Default)]
pub struct Config {
    lines: Vec<Line>,
}

impl Config {
    /// Parses the text; bad lines are kept verbatim and reported as warnings.
    pub fn parse(text: &str) -> (Config, Vec<String>) {
        let mut lines = Vec::new();
        let mut warnings = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let t = raw.trim();
            if t.is_empty() || t.starts_with('#') {
                lines.push(Line::Other(raw.to_string()));
                continue;
            }
            let parsed = t
                .split_once('=')
                .ok_or("expected 'name = value'")
                .and_then(|(n, v)| {
                    let def = TunableDef::find(n.trim()).ok_or("unknown tunable")?;
                    let value = v.trim().parse::<u64>().map_err(|_| "invalid value")?;
                    Ok((def, value))
                });
            match parsed {
                Ok((def, value)) => lines.push(Line::Setting { def, value }),
                Err(why) => {
                    warnings.push(format!("line {}: {why}: {t}", i + 1));
                    lines.push(Line::Other(raw.to_string()));
                }
            }
        }
        (Config { lines }, warnings)
    }

    /// Reads the file (a missing file is an empty config).
    ///
    /// # Errors
    /// The file exists but cannot be read.
    pub fn load(path: &Path) -> io::Result<(Config, Vec<String>)> {
        match std::fs::read_to_string(path) {
            Ok(t) => Ok(Config::parse(&t)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok((Config::default(), Vec::new())),
            Err(e) => Err(e),
        }
    }

    /// The settings in file order (the last one of a name wins when applied).
    pub fn settings(&self) -> Vec<(&'static TunableDef, u64)> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                Line::Setting { def, value } => Some((*def, *value)),
                Line::Other(_) => None,
            })
            .collect()
    }

    /// Sets `def` to `value`: replaces its first line, drops later duplicates, or appends.
    pub fn set(&mut self, def: &'static TunableDef, value: u64) {
        let mut done = false;
        self.lines.retain_mut(|l| match l {
            Line::Setting { def: d, value: v } if d.name == def.name => {
                if done {
                    false
                } else {
                    *v = value;
                    done = true;
                    true
                }
            }
            _ => true,
        });
        if !done {
            self.lines.push(Line::Setting { def, value });
        }
    }

    /// Removes the setting of `def`, or every setting when `None`.
    pub fn remove(&mut self, def: Option<&TunableDef>) {
        self.lines.retain(|l| match (l, def) {
            (Line::Setting { .. }, None) => false,
            (Line::Setting { def: d, .. }, Some(x)) => d.name != x.name,
            _ => true,
        });
    }

    /// The file's text.
    pub fn render(&self) -> String {
        let mut s = String::new();
        if self.lines.is_empty() {
            s.push_str("# RDS tunables read by 'rds-ctrl daemon' at start (see rds-ctrl(8)).\n");
        }
        for l in &self.lines {
            match l {
                Line::Setting { def, value } => s.push_str(&format!("{} = {value}\n", def.name)),
                Line::Other(t) => {
                    s.push_str(t);
                    s.push('\n');
                }
            }
        }
        s
    }

    /// Writes the file atomically, creating its directory.
    ///
    /// # Errors
    /// The directory or file cannot be written.
    pub fn save(&self, path: &Path) -> io::Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "rds.conf".into());
        let tmp = path.with_file_name(format!(".{name}.tmp{}", std::process::id()));
        std::fs::write(&tmp, self.render())?;
        std::fs::rename(&tmp, path).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
    }

    /// Applies the settings to `t`. A value that breaks a rule only together with another
    /// setting (minimum above maximum) is retried after the others; what still fails is
    /// returned as warnings and left out.
    pub fn apply(&self, t: &mut Tunables) -> Vec<String> {
        let mut pending = self.settings();
        for _ in 0..3 {
            let before = pending.len();
            pending.retain(|(def, v)| def.set(t, *v).is_err());
            if pending.is_empty() || pending.len() == before {
                break;
            }
        }
        pending
            .iter()
            .filter_map(|(def, v)| def.set(t, *v).err().map(|e| e.to_string()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_edit_render() {
        let (mut c, w) = Config::parse(
            "# mine\nmax_unacked_packets = 16\n\nnet.rds.ping_enable=0\nbogus = 1\nx\n",
        );
        assert_eq!(w.len(), 2, "{w:?}");
        assert_eq!(c.settings().len(), 2);
        c.set(TunableDef::find("ping_enable").unwrap(), 1);
        c.set(TunableDef::find("rds_tcp_sndbuf").unwrap(), 8192);
        c.remove(TunableDef::find("max_unacked_packets"));
        assert_eq!(
            c.render(),
            "# mine\n\nnet.rds.ping_enable = 1\nbogus = 1\nx\nnet.rds.tcp.rds_tcp_sndbuf = 8192\n"
        );
        c.remove(None);
        assert!(c.settings().is_empty());
    }

    #[test]
    fn apply_orders_min_and_max() {
        let (c, _) = Config::parse(
            "reconnect_min_delay_ms = 5000\nreconnect_max_delay_ms = 9000\nrds_tcp_sndbuf = 5\n",
        );
        let mut t = Tunables::default();
        let w = c.apply(&mut t);
        assert_eq!(t.reconnect_min_delay.as_millis(), 5000);
        assert_eq!(t.reconnect_max_delay.as_millis(), 9000);
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("out of range"), "{w:?}");
    }
}
