//! `man/rds-ping.1` documents exactly the options of `--help`.

use std::collections::BTreeSet;

use assert_cmd::Command;
use regex::Regex;

#[test]
fn man_page_options_match_help() {
    let help = Command::cargo_bin("rds-ping")
        .unwrap()
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let opt = Regex::new(r"(?m)^\s+(?:(-[A-Za-z])(?:, )?)?(--[a-z-]+)?").unwrap();
    let mut from_help = BTreeSet::new();
    for c in opt.captures_iter(&help) {
        for i in 1..=2 {
            if let Some(m) = c.get(i) {
                from_help.insert(m.as_str().to_string());
            }
        }
    }
    let page =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../man/rds-ping.1")).unwrap();
    // Options in the OPTIONS section: each .TP tag line.
    let mut in_opts = false;
    let mut from_man = BTreeSet::new();
    let lines: Vec<&str> = page.lines().collect();
    // `\-\-log\-level`: a roff hyphen inside a long name too.
    let tag = Regex::new(r"\\-(\\-)?([A-Za-z](?:[a-z-]|\\-)*)").unwrap();
    for w in lines.windows(2) {
        if let Some(t) = w[0].strip_prefix(".SH ") {
            in_opts = t == "OPTIONS";
        }
        if in_opts && w[0] == ".TP" {
            for c in tag.captures_iter(w[1]) {
                let dashes = if c.get(1).is_some() { "--" } else { "-" };
                from_man.insert(format!("{dashes}{}", c[2].replace("\\-", "-")));
            }
        }
    }
    assert_eq!(from_man, from_help, "man OPTIONS vs --help");
    assert!(from_help.contains("-W") && from_help.contains("--json"));
}
