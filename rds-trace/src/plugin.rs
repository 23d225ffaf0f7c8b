//! `rds-trace --install-wireshark-plugin`: installs the RDS dissector for the user.
//!
//! The dissector (`wireshark/rds.lua` in the source tree) is embedded in the binary. It goes
//! to Wireshark's "Personal Lua Plugins" folder, `$HOME/.local/lib/wireshark/plugins/` on
//! Linux (what `tshark -G folders` reports; Wireshark does not look for Lua plugins under
//! `$XDG_CONFIG_HOME`), or to `--plugin-dir DIR`. Wireshark and tshark started afterwards
//! decode RDS without further options.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

/// The dissector's source.
pub const RDS_LUA: &str = include_str!("../../wireshark/rds.lua");
/// The installed file's name.
pub const FILE_NAME: &str = "rds.lua";

/// The personal Lua plugin folder: `$HOME/.local/lib/wireshark/plugins` (the home directory
/// from the password database when `HOME` is unset).
///
/// # Errors
/// No home directory can be found.
pub fn personal_dir() -> anyhow::Result<PathBuf> {
    let home = match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(h) => PathBuf::from(h),
        None => match nix::unistd::User::from_uid(nix::unistd::getuid()) {
            Ok(Some(u)) => u.dir,
            _ => bail!("cannot find the home directory (HOME is not set); use --plugin-dir"),
        },
    };
    Ok(home.join(".local/lib/wireshark/plugins"))
}

/// Writes `rds.lua` into `dir` (default [`personal_dir`]) and says where on `out`.
///
/// # Errors
/// The folder cannot be created or the file cannot be written.
pub fn install(dir: Option<&Path>, out: &mut dyn Write) -> anyhow::Result<u8> {
    let dir = match dir {
        Some(d) => d.to_path_buf(),
        None => personal_dir()?,
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(FILE_NAME);
    let old = std::fs::read(&path).ok();
    let what = match &old {
        Some(b) if b == RDS_LUA.as_bytes() => "already up to date",
        Some(_) => "updated",
        None => "installed",
    };
    if old.as_deref() != Some(RDS_LUA.as_bytes()) {
        // Write a temporary file and rename it, so a running Wireshark never sees half a file.
        let tmp = dir.join(format!(".{FILE_NAME}.{}", std::process::id()));
        std::fs::write(&tmp, RDS_LUA).with_context(|| format!("writing {}", tmp.display()))?;
        if let Err(e) = std::fs::rename(&tmp, &path) {
            let _ = std::fs::remove_file(&tmp);
            return Err(e).with_context(|| format!("writing {}", path.display()));
        }
    }
    writeln!(out, "RDS dissector {what}: {}", path.display())?;
    writeln!(
        out,
        "Wireshark and tshark started from now on decode RDS (TCP port 16385 and InfiniBand)."
    )?;
    Ok(0)
}
