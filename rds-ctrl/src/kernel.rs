//! Tunables on a host whose kernel runs RDS: `get`, `set` and `default` read and write
//! `/proc/sys/net/rds/…` (the kernel's `net.rds.*` sysctls), and `-p` keeps the values in a
//! sysctl.d file that `systemd-sysctl` (or `sysctl --system`) applies at boot.
//!
//! A host counts as a kernel host when `/proc/sys/net/rds` exists (the `rds` module is
//! loaded), no daemon of ours runs and no `--node` is given. `RDS_CTRL_ROOT` names another
//! root directory for `/proc/sys` and `/etc/sysctl.d` (tests use a temporary one).

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use rds_core::tunables::{AixTunable, TunableDef, TUNABLES};

/// The sysctl.d file `-p` writes, relative to the root.
pub const SYSCTL_FILE: &str = "etc/sysctl.d/90-rds.conf";

/// The root directory (`RDS_CTRL_ROOT`, else `/`).
pub fn root() -> PathBuf {
    rds_core::env::ctrl_root().unwrap_or_else(|| PathBuf::from("/"))
}

/// The kernel's RDS sysctl directory.
pub fn sysctl_dir() -> PathBuf {
    root().join("proc/sys/net/rds")
}

/// The sysctl.d file.
pub fn sysctl_file() -> PathBuf {
    root().join(SYSCTL_FILE)
}

/// Whether the kernel's RDS is loaded here.
pub fn kernel_rds() -> bool {
    sysctl_dir().is_dir()
}

/// Whether the kernel's RDS/TCP (`rds_tcp`) is loaded: it adds `net.rds.tcp`.
pub fn kernel_tcp() -> bool {
    sysctl_dir().join("tcp").is_dir()
}

/// Whether the kernel's RDS/IB (`rds_rdma`) is loaded: it adds `net.rds.ib`.
pub fn kernel_ib() -> bool {
    sysctl_dir().join("ib").is_dir()
}

/// Whether tunable commands act on the kernel: no `--node`, no daemon of ours, and the
/// kernel's RDS is loaded.
pub fn is_kernel_host(node: Option<&str>) -> bool {
    node.is_none() && rds_core::ctl::find_daemon().is_none() && kernel_rds()
}

/// Every sysctl under the directory as `(net.rds.name, value)`, sorted by name.
///
/// # Errors
/// The directory cannot be read.
pub fn list() -> anyhow::Result<Vec<(String, String)>> {
    fn walk(
        dir: &Path,
        prefix: &str,
        depth: u32,
        out: &mut Vec<(String, String)>,
    ) -> io::Result<()> {
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            let name = format!("{prefix}.{}", e.file_name().to_string_lossy());
            let ty = e.file_type()?;
            if ty.is_dir() && depth < 3 {
                walk(&e.path(), &name, depth + 1, out)?;
            } else if ty.is_file() {
                // Write-only or unreadable entries are left out.
                if let Ok(v) = std::fs::read_to_string(e.path()) {
                    out.push((name, v.trim().replace(['\t', '\n'], " ")));
                }
            }
        }
        Ok(())
    }
    let dir = sysctl_dir();
    let mut out = Vec::new();
    walk(&dir, "net.rds", 0, &mut out).with_context(|| format!("reading {}", dir.display()))?;
    out.sort();
    Ok(out)
}

/// The kernel sysctl a name stands for: a full `net.rds.…` name, a last component, or an AIX
/// name with a kernel equivalent. Returns the full name and its file.
///
/// # Errors
/// The name is unknown, is this stack's own tunable, or is an AIX name with no equivalent.
pub fn resolve(name: &str) -> anyhow::Result<(String, PathBuf)> {
    if let Some(a) = AixTunable::find(name) {
        if let Some(why) = a.not_applicable() {
            bail!("{why}");
        }
    }
    let name = AixTunable::find(name)
        .and_then(|a| a.target)
        .unwrap_or(name);
    if let Some(d) = TunableDef::find(name).filter(|d| !d.kernel) {
        bail!("{}", not_in_kernel(d));
    }
    let all = list()?;
    let full = if name.starts_with("net.rds.") {
        all.iter().find(|(n, _)| n == name)
    } else {
        all.iter().find(|(n, _)| n.rsplit('.').next() == Some(name))
    }
    .map(|(n, _)| n.clone());
    let Some(full) = full else {
        let hint = match TunableDef::find(name) {
            Some(d) if d.name.starts_with("net.rds.tcp.") => {
                " (it comes with rds_tcp: 'modprobe rds_tcp' as root)"
            }
            _ => "",
        };
        bail!(
            "unknown tunable '{name}': the kernel has no such sysctl under {}{hint} (see 'rds-ctrl get')",
            sysctl_dir().display()
        );
    };
    let rel = full.trim_start_matches("net.rds.").replace('.', "/");
    Ok((full, sysctl_dir().join(rel)))
}

/// Why one of this stack's own tunables has no kernel sysctl, and what the kernel uses.
fn not_in_kernel(d: &TunableDef) -> String {
    let kernel_uses = match d.name {
        "net.rds.sndbuf_default" => {
            "the kernel's RDS sockets start with net.core.wmem_default as their send buffer; \
             set that with 'sysctl -w net.core.wmem_default=BYTES'"
        }
        "net.rds.rcvbuf_default" => {
            "the kernel's RDS sockets start with net.core.rmem_default as their receive \
             buffer; set that with 'sysctl -w net.core.rmem_default=BYTES'"
        }
        "net.rds.sndbuf_max" => "the kernel caps SO_SNDBUF at net.core.wmem_max",
        "net.rds.rcvbuf_max" => "the kernel caps SO_RCVBUF at net.core.rmem_max",
        _ => "the kernel has no such setting",
    };
    format!(
        "{} is this stack's own tunable and does not apply to the kernel's RDS, which runs \
         here: {kernel_uses}",
        d.name
    )
}

/// Checks a value for the sysctl `full`: known tunables against their range, others as an
/// integer. Returns the text to write.
fn check_value(full: &str, value: &str) -> anyhow::Result<String> {
    if let Some(d) = TUNABLES.iter().find(|d| d.name == full) {
        let v = crate::parse_value(d, value)?;
        if !((d.min..=d.max).contains(&v) || (d.zero_ok && v == 0)) {
            bail!("{full}: value {v} out of range ({})", d.range_text());
        }
        return Ok(v.to_string());
    }
    let t = value.trim();
    if t.parse::<i64>().is_err() {
        bail!("{full}: invalid value '{value}' (expected an integer)");
    }
    Ok(t.to_string())
}

fn write_sysctl(full: &str, path: &Path, value: &str) -> anyhow::Result<()> {
    std::fs::write(path, format!("{value}\n")).map_err(|e| {
        let hint = if e.kind() == io::ErrorKind::PermissionDenied {
            " (the kernel's sysctls need root)"
        } else {
            ""
        };
        anyhow!("cannot set {full}: writing {}: {e}{hint}", path.display())
    })
}

/// The first line of a sysctl.d file this tool creates.
const HEADER: &str = "# RDS sysctls kept by 'rds-ctrl set -p' (see rds-ctrl(8)).";

/// The sysctl.d file's lines, in order (`key = value` settings and anything else).
struct SysctlFile {
    lines: Vec<String>,
}

impl SysctlFile {
    fn load(path: &Path) -> anyhow::Result<SysctlFile> {
        match std::fs::read_to_string(path) {
            Ok(t) => Ok(SysctlFile {
                lines: t.lines().map(str::to_string).collect(),
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(SysctlFile {
                lines: vec![HEADER.to_string()],
            }),
            Err(e) => Err(anyhow!("reading {}: {e}", path.display())),
        }
    }

    fn key(line: &str) -> Option<&str> {
        let t = line.trim();
        if t.starts_with('#') || t.starts_with(';') {
            return None;
        }
        t.split_once('=')
            .map(|(k, _)| k.trim().trim_start_matches('-'))
    }

    fn get(&self, key: &str) -> Option<String> {
        self.lines
            .iter()
            .rev()
            .find(|l| Self::key(l) == Some(key))
            .and_then(|l| l.split_once('=').map(|(_, v)| v.trim().to_string()))
    }

    fn set(&mut self, key: &str, value: &str) {
        let line = format!("{key} = {value}");
        match self.lines.iter().position(|l| Self::key(l) == Some(key)) {
            Some(i) => {
                self.lines[i] = line;
                let mut n = 0;
                self.lines.retain(|l| {
                    let dup = Self::key(l) == Some(key);
                    n += usize::from(dup);
                    !dup || n == 1
                });
            }
            None => self.lines.push(line),
        }
    }

    /// Removes `key`, or every `net.rds.` setting when `None`.
    fn remove(&mut self, key: Option<&str>) {
        self.lines.retain(|l| match (Self::key(l), key) {
            (Some(k), Some(want)) => k != want,
            (Some(k), None) => !k.starts_with("net.rds."),
            (None, _) => true,
        });
    }

    fn save(&self, path: &Path) -> anyhow::Result<()> {
        let mut text = String::new();
        for l in &self.lines {
            text.push_str(l);
            text.push('\n');
        }
        let write = || -> io::Result<()> {
            if let Some(d) = path.parent() {
                std::fs::create_dir_all(d)?;
            }
            let tmp = path.with_extension(format!("tmp{}", std::process::id()));
            std::fs::write(&tmp, &text)?;
            std::fs::rename(&tmp, path).inspect_err(|_| {
                let _ = std::fs::remove_file(&tmp);
            })
        };
        write().map_err(|e| anyhow!("cannot write {}: {e}", path.display()))
    }
}

/// `set [-p]` on the kernel: writes each sysctl (all are checked first), and with `-p` keeps
/// them in the sysctl.d file.
///
/// # Errors
/// An unknown or inapplicable name, a bad value, or a file that cannot be written.
pub fn set(
    out: &mut dyn Write,
    persistent: bool,
    pairs: &[(String, String)],
) -> anyhow::Result<u8> {
    let mut todo = Vec::new();
    for (name, value) in pairs {
        let (full, path) = resolve(name)?;
        let v = check_value(&full, value)?;
        todo.push((full, path, v));
    }
    for (full, path, v) in &todo {
        write_sysctl(full, path, v)?;
        writeln!(out, "{full} = {v}")?;
    }
    if persistent {
        let file = sysctl_file();
        let mut f = SysctlFile::load(&file)?;
        for (full, _, v) in &todo {
            f.set(full, v);
        }
        f.save(&file)?;
        for (full, _, v) in &todo {
            writeln!(out, "saved {full} = {v} in {}", file.display())?;
        }
    }
    Ok(0)
}

/// `get [-p] [name]` on the kernel: the sysctls as `name = value` lines (with `json`, one
/// object `{name: value}`, integers as numbers and other values as strings); with `-p`, the
/// values the sysctl.d file sets at boot in place of the current ones.
///
/// # Errors
/// An unknown name, or the directory cannot be read.
pub fn get(
    out: &mut dyn Write,
    persistent: bool,
    name: Option<&str>,
    json: bool,
) -> anyhow::Result<u8> {
    let want = name.map(resolve).transpose()?.map(|(f, _)| f);
    let file = if persistent {
        Some(SysctlFile::load(&sysctl_file())?)
    } else {
        None
    };
    let aix = name.filter(|x| AixTunable::find(x).is_some());
    let values = list()?
        .into_iter()
        .filter(|(n, _)| want.as_ref().is_none_or(|w| w == n))
        .map(|(n, v)| {
            let v = file.as_ref().and_then(|f| f.get(&n)).unwrap_or(v);
            (aix.map_or(n, str::to_string), json_value(v))
        })
        .collect();
    crate::print_tunables(out, values, json)
}

/// A sysctl's text as JSON: an integer as a number, anything else (several numbers, words)
/// as the string.
fn json_value(v: String) -> serde_json::Value {
    if let Ok(n) = v.parse::<u64>() {
        return n.into();
    }
    if let Ok(n) = v.parse::<i64>() {
        return n.into();
    }
    v.into()
}

/// `default [-p] [name]` on the kernel: writes the kernel's default to the sysctls this tool
/// knows the default of (all of them when no name is given); with `-p`, removes them from
/// the sysctl.d file.
///
/// # Errors
/// An unknown name, a sysctl whose default is not known here, or a file that cannot be
/// written.
pub fn default(out: &mut dyn Write, persistent: bool, name: Option<&str>) -> anyhow::Result<u8> {
    let present = list()?;
    let targets: Vec<(String, PathBuf, u64)> = match name {
        Some(n) => {
            let (full, path) = resolve(n)?;
            let Some(d) = TUNABLES.iter().find(|d| d.name == full) else {
                bail!("{full}: its kernel default is not known here; set it with 'rds-ctrl set {full} VALUE'");
            };
            vec![(full, path, d.default_value())]
        }
        None => TUNABLES
            .iter()
            .filter(|d| d.kernel && present.iter().any(|(n, _)| n == d.name))
            .map(|d| {
                let rel = d.name.trim_start_matches("net.rds.").replace('.', "/");
                (
                    d.name.to_string(),
                    sysctl_dir().join(rel),
                    d.default_value(),
                )
            })
            .collect(),
    };
    for (full, path, v) in &targets {
        write_sysctl(full, path, &v.to_string())?;
        writeln!(out, "{full} = {v} (the default)")?;
    }
    if persistent {
        let file = sysctl_file();
        let mut f = SysctlFile::load(&file)?;
        match name {
            Some(_) => {
                for (full, _, _) in &targets {
                    f.remove(Some(full));
                }
            }
            None => f.remove(None),
        }
        f.save(&file)?;
        let what = match name {
            Some(_) => targets
                .iter()
                .map(|t| t.0.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            None => "every net.rds setting".to_string(),
        };
        writeln!(out, "removed {what} from {}", file.display())?;
    }
    Ok(0)
}

/// What `load` and `unload` say on a kernel host: the kernel modules to use instead.
pub fn modules_note() -> String {
    let mut loaded = vec!["rds"];
    if kernel_tcp() {
        loaded.push("rds_tcp");
    }
    if kernel_ib() {
        loaded.push("rds_rdma");
    }
    format!(
        "the kernel's RDS is loaded on this host ({}); applications and rds-tools use it. \
         As root, 'modprobe rds_tcp' loads its TCP transport and 'modprobe rds_rdma' its \
         InfiniBand/RoCE transport (ofed, aixib); 'modprobe -r rds_tcp rds_rdma rds' unloads \
         it, after which 'rds-ctrl load' can start this stack's daemon",
        loaded.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysctl_file_edits_keep_other_lines() {
        let mut f = SysctlFile {
            lines: vec![
                "# mine".into(),
                "net.core.wmem_default = 1".into(),
                "net.rds.ping_enable=1".into(),
                "net.rds.ping_enable = 0".into(),
            ],
        };
        assert_eq!(f.get("net.rds.ping_enable").as_deref(), Some("0"));
        f.set("net.rds.ping_enable", "1");
        f.set("net.rds.max_unacked_packets", "16");
        assert_eq!(
            f.lines,
            [
                "# mine",
                "net.core.wmem_default = 1",
                "net.rds.ping_enable = 1",
                "net.rds.max_unacked_packets = 16"
            ]
        );
        f.remove(Some("net.rds.ping_enable"));
        assert_eq!(f.lines.len(), 3);
        f.remove(None);
        assert_eq!(f.lines, ["# mine", "net.core.wmem_default = 1"]);
    }
}
