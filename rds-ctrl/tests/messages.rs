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
