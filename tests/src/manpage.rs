//! Man pages against the tools' clap definitions: the option spellings a roff page documents
//! (`\-x`, `\-\-long` in the tags of a section) and those of a `clap::Command`.

use std::collections::BTreeSet;
use std::path::PathBuf;

/// `man/NAME` of the workspace.
pub fn page(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("man")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The lines of a `.SH` section.
pub fn section<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let mut v = Vec::new();
    let mut inside = false;
    for l in text.lines() {
        if let Some(t) = l.strip_prefix(".SH ") {
            inside = t.trim_matches('"') == name;
            continue;
        }
        if inside {
            v.push(l);
        }
    }
    assert!(!v.is_empty(), "no section {name}");
    v
}

/// The line after each `.TP` (the item's tag).
pub fn tags<'a>(lines: &[&'a str]) -> Vec<&'a str> {
    lines
        .windows(2)
        .filter(|w| w[0] == ".TP")
        .map(|w| w[1])
        .collect()
}

/// Option spellings (`-x`, `--long`) written as `\-x` and `\-\-long` in a roff line.
pub fn options(line: &str) -> BTreeSet<String> {
    let mut set = BTreeSet::new();
    let b = line.as_bytes();
    let mut i = 0;
    while i + 1 < b.len() {
        if &b[i..i + 2] != b"\\-" {
            i += 1;
            continue;
        }
        if b.get(i + 2..i + 4) == Some(b"\\-") {
            let start = i + 4;
            let mut end = start;
            while end < b.len() && (b[end].is_ascii_lowercase() || b[end] == b'-') {
                if b[end] == b'-' && end > 0 && b[end - 1] == b'\\' {
                    break;
                }
                end += 1;
            }
            // `\-\-list\-nodes`: a roff hyphen inside the name.
            let mut name = line[start..end].to_string();
            let mut j = end;
            while b.get(j..j + 2) == Some(b"\\-") {
                let s = j + 2;
                let mut e = s;
                while e < b.len() && b[e].is_ascii_lowercase() {
                    e += 1;
                }
                if e == s {
                    break;
                }
                name.push('-');
                name.push_str(&line[s..e]);
                j = e;
            }
            set.insert(format!("--{name}"));
            i = j;
        } else {
            let c = b.get(i + 2).copied().unwrap_or(b' ');
            let next = b.get(i + 3).copied().unwrap_or(b' ');
            if c.is_ascii_alphabetic() && !next.is_ascii_alphabetic() {
                set.insert(format!("-{}", c as char));
            }
            i += 3;
        }
    }
    set
}

/// The option spellings of `cmd` (without hidden ones; with `skip_global`, without global
/// options and help, for subcommands).
pub fn clap_options(cmd: &clap::Command, skip_global: bool) -> BTreeSet<String> {
    let mut set = BTreeSet::new();
    for a in cmd.get_arguments() {
        if a.is_hide_set() || (skip_global && a.is_global_set()) {
            continue;
        }
        if skip_global && a.get_id() == "help" {
            continue;
        }
        if let Some(s) = a.get_short() {
            set.insert(format!("-{s}"));
        }
        if let Some(l) = a.get_long() {
            set.insert(format!("--{l}"));
        }
    }
    set
}

/// Asserts that the OPTIONS section of `man/NAME` documents exactly the options of `cmd`
/// (hidden ones excepted) and that `--help` shows each; returns the page's text.
pub fn assert_options_match(name: &str, mut cmd: clap::Command) -> String {
    let text = page(name);
    let mut in_page = BTreeSet::new();
    for t in tags(&section(&text, "OPTIONS")) {
        in_page.extend(options(t));
    }
    cmd.build();
    assert_eq!(
        in_page,
        clap_options(&cmd, false),
        "{name} OPTIONS vs --help"
    );
    let help = cmd.render_long_help().to_string();
    for o in &in_page {
        assert!(help.contains(o.as_str()), "{o} missing from --help");
    }
    text
}
