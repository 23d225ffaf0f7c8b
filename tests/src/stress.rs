//! rds-stress output and the original C rds-stress, for the tests and benchmarks that run
//! either (`tests/tests/interop_stress.rs`, `interop_stress_rdma.rs`,
//! `bench_lab_app_path.rs`).
//!
//! Both programs print one row a second and an `(average)` row in the original's format
//! (`"%4u %6lu %6lu %10.2f %10.2f %10.2f %7.2f %8.2f %5.2f"`, the average row followed by
//! `"  (average)"`): tasks, tx/s, rx/s, tx+rx K/s, mbi K/s, mbo K/s, tx us/c, rtt us, cpu %.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The column header above the rows.
pub const HEADER: &str =
    "tsks   tx/s   rx/s  tx+rx K/s    mbi K/s    mbo K/s tx us/c   rtt us cpu %";
/// Column of tx/s in a row.
pub const TX_PER_SEC: usize = 1;

/// One output row, all nine columns as numbers; `None` for any other line (the average row
/// included, with its `(average)` suffix).
pub fn parse_row(line: &str) -> Option<[f64; 9]> {
    let f: Vec<&str> = line.split_whitespace().collect();
    match f.len() {
        9 => {}
        10 if f[9] == "(average)" => {}
        _ => return None,
    }
    let mut v = [0f64; 9];
    for (i, slot) in v.iter_mut().enumerate() {
        *slot = f[i].parse().ok()?;
    }
    Some(v)
}

/// Whether `line` is the `(average)` row (a row by [`parse_row`] ending in `(average)`).
pub fn is_average(line: &str) -> bool {
    line.trim_end().ends_with("(average)") && parse_row(line).is_some()
}

/// The `(average)` row of a finished run: its text and its columns. Fails, quoting the
/// output, when there is none or more than one.
pub fn average(out: &str) -> Result<(String, [f64; 9])> {
    let mut found = None;
    for l in out.lines().filter(|l| is_average(l)) {
        if found.is_some() {
            bail!("two (average) lines in:\n{out}");
        }
        let row = parse_row(l).context("average row")?;
        found = Some((l.trim_end().to_string(), row));
    }
    found.with_context(|| format!("no (average) line in:\n{out}"))
}

/// Our `rds-stress`: `RDS_STRESS_BIN` when set, else `target/<profile>/rds-stress` next to
/// the running test's executable (`target/<profile>/deps/..`).
pub fn our_rds_stress() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("RDS_STRESS_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().context("current_exe")?;
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .context("test executable not in target/<profile>/deps")?;
    let bin = dir.join("rds-stress");
    if !bin.is_file() {
        bail!(
            "our rds-stress is not built: {} is missing (cargo build --release -p rds-stress, \
             or run cargo test --workspace --release, or set RDS_STRESS_BIN)",
            bin.display()
        );
    }
    Ok(bin)
}

/// Builds (or takes from the lab cache) the static original C rds-stress of version `ver`
/// (`2.0.7` or `2.3.11`) with `tests/lab/build-c-rds-stress.sh`, which needs `RDS_TOOLS_GIT`
/// (a git clone of oracle/rds-tools holding the pinned commit); returns its path. Fails with
/// the script's message (how to make such a clone) when it cannot.
pub fn c_rds_stress(ver: &str) -> Result<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("lab/build-c-rds-stress.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg(ver)
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!(
            "build-c-rds-stress.sh {ver} failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !path.is_file() {
        bail!(
            "build-c-rds-stress.sh {ver} printed {}, which is not a file",
            path.display()
        );
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_and_average() {
        let out = "tsks   tx/s   rx/s  tx+rx K/s    mbi K/s    mbo K/s tx us/c   rtt us cpu %\n\
                   \x20  1   9619   9619   20419.81       0.00       0.00   17.15    91.63 -1.00\n\
                   ---------------------------------------------\n\
                   \x20  1  11041  11090   23493.51       0.00       0.00   14.64    80.56 -1.00  (average)\n\
                   rtt us percentiles: p50 40 p90 74 p99 140 p99.9 7936 max 45262\n";
        assert_eq!(out.lines().filter_map(parse_row).count(), 2);
        assert!(parse_row("tsks   tx/s   rx/s").is_none());
        let (line, row) = average(out).unwrap();
        assert!(line.ends_with("(average)"));
        assert_eq!(row[TX_PER_SEC], 11041.0);
        assert_eq!(row[7], 80.56);
        assert!(average("   1 2 3 4 5 6 7 8 9\n").is_err());
        let two = format!("{out}{out}");
        assert!(average(&two).is_err());
    }
}
