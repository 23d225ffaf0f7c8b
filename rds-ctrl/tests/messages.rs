//! Messages of `rds-ctrl` that need no node: a bad tunable value names what is accepted, a
//! duration takes the tools' one syntax, usage errors and the version.

use std::time::Duration;

#[test]
fn boolean_tunable_names_its_spellings() {
    let run = tempfile::tempdir().unwrap();
    assert_cmd::Command::cargo_bin("rds-ctrl")
        .unwrap()
        .env("RDS_RUNTIME_DIR", run.path())
        .args(["set", "ping_enable", "maybe"])
        .timeout(Duration::from_secs(30))
        .assert()
        .code(2)
        .stdout("")
        .stderr(
            "rds-ctrl: net.rds.ping_enable: invalid value 'maybe' \
             (expected 0 or 1, on or off, yes or no, true or false)\n",
        );
}

fn ctrl(run: &std::path::Path, args: &[&str]) -> assert_cmd::assert::Assert {
    assert_cmd::Command::cargo_bin("rds-ctrl")
        .unwrap()
        .env("RDS_RUNTIME_DIR", run)
        .args(args)
        .timeout(Duration::from_secs(30))
        .assert()
}

#[test]
fn timeouts_are_durations() {
    let run = tempfile::tempdir().unwrap();
    // Parsed, then nothing to unload: a negative result.
    for t in ["1.5", "500ms", "2s", "1m"] {
        ctrl(run.path(), &["unload", "--timeout", t])
            .code(1)
            .stdout("");
    }
    ctrl(run.path(), &["unload", "--timeout", "1.5x"])
        .code(2)
        .stdout("")
        .stderr(predicates::str::contains(
            "invalid value '1.5x' for '--timeout <SECS>': '1.5x' is not a duration \
             (seconds, or a number with ms, s or m)",
        ));
    ctrl(run.path(), &["load", "--timeout", "-1"])
        .code(2)
        .stderr(predicates::str::contains("unexpected argument '-1'"));
}

#[test]
fn usage_errors_and_version() {
    let run = tempfile::tempdir().unwrap();
    ctrl(run.path(), &["--bogus"])
        .code(2)
        .stdout("")
        .stderr(predicates::str::starts_with(
            "rds-ctrl: unexpected argument '--bogus' found\n",
        ));
    ctrl(run.path(), &["--version"])
        .code(0)
        .stdout(format!("rds-ctrl {}\n", env!("CARGO_PKG_VERSION")));
}

/// `rds-ctrl help` fits a narrow terminal (`COLUMNS`, or the terminal's own width): the
/// tunables become a list with wrapped descriptions. Printed to a pipe without `COLUMNS`, the
/// table keeps one line per tunable, for scripts.
#[test]
fn help_fits_the_terminal_width() {
    let run = tempfile::tempdir().unwrap();
    for cols in [80usize, 60] {
        let out = assert_cmd::Command::cargo_bin("rds-ctrl")
            .unwrap()
            .env("RDS_RUNTIME_DIR", run.path())
            .env("COLUMNS", cols.to_string())
            .arg("help")
            .timeout(Duration::from_secs(30))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        let s = String::from_utf8(out.stdout).unwrap();
        let wide: Vec<&str> = s.lines().filter(|l| l.chars().count() > cols).collect();
        assert!(wide.is_empty(), "lines over {cols} columns: {wide:#?}");
        for d in rds_core::tunables::TUNABLES {
            assert!(
                s.contains(d.name),
                "{} missing at {cols} columns:\n{s}",
                d.name
            );
        }
    }
    let out = assert_cmd::Command::cargo_bin("rds-ctrl")
        .unwrap()
        .env("RDS_RUNTIME_DIR", run.path())
        .env_remove("COLUMNS")
        .arg("help")
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    let s = String::from_utf8(out.stdout).unwrap();
    for d in rds_core::tunables::TUNABLES {
        let row = s
            .lines()
            .find(|l| l.starts_with(&format!("| {} ", d.name)))
            .unwrap_or_else(|| panic!("{} not on one line:\n{s}", d.name));
        assert!(row.contains(d.desc), "{row}");
    }
}
