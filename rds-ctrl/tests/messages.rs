//! Messages of `rds-ctrl` that need no node: a bad tunable value names what is accepted.

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
