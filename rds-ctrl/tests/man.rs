//! The man pages agree with the tools: options and commands of `man/rds-info.1` and
//! `man/rds-ctrl.8` are exactly those of `--help` (the same clap definitions), and `man/rds.7`
//! lists exactly the tunables and counters of the stack.

use std::collections::BTreeSet;
use std::path::PathBuf;

fn page(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("man")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The lines of a `.SH` section.
fn section<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
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
fn tags<'a>(lines: &[&'a str]) -> Vec<&'a str> {
    lines
        .windows(2)
        .filter(|w| w[0] == ".TP")
        .map(|w| w[1])
        .collect()
}

/// Option spellings (`-x`, `--long`) written as `\-x` and `\-\-long` in a roff line.
fn options(line: &str) -> BTreeSet<String> {
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

fn clap_options(cmd: &clap::Command, skip_global: bool) -> BTreeSet<String> {
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

#[test]
fn rds_info_page_matches_help() {
    let text = page("rds-info.1");
    let mut in_page = BTreeSet::new();
    for t in tags(&section(&text, "OPTIONS")) {
        in_page.extend(options(t));
    }
    let mut cmd = rds_info::command();
    cmd.build();
    assert_eq!(in_page, clap_options(&cmd, false));
    // Every option the help text shows is also in the synopsis or description.
    let help = cmd.render_long_help().to_string();
    for o in &in_page {
        assert!(help.contains(o.as_str()), "{o} missing from --help");
    }
}

#[test]
fn rds_ctrl_page_matches_help() {
    let text = page("rds-ctrl.8");
    let mut cmd = rds_ctrl::command();
    cmd.build();
    // Global options.
    let mut global = BTreeSet::new();
    for t in tags(&section(&text, "OPTIONS")) {
        global.extend(options(t));
    }
    assert_eq!(global, clap_options(&cmd, false));
    // Commands and their options.
    let mut in_page = std::collections::BTreeMap::new();
    for t in tags(&section(&text, "COMMANDS")) {
        let rest = t
            .split_once(' ')
            .map_or("", |x| x.1)
            .trim_start_matches('"');
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .collect();
        in_page.insert(name, options(t));
    }
    let mut in_help = std::collections::BTreeMap::new();
    for sc in cmd.get_subcommands() {
        if sc.is_hide_set() {
            continue;
        }
        let mut opts = clap_options(sc, true);
        for nested in sc.get_subcommands() {
            opts.extend(clap_options(nested, true));
        }
        in_help.insert(sc.get_name().to_string(), opts);
    }
    assert_eq!(in_page, in_help);
}

#[test]
fn rds_page_lists_every_tunable_and_counter() {
    let text = page("rds.7");
    let names = |sec: &str| -> BTreeSet<String> {
        tags(&section(&text, sec))
            .iter()
            .filter_map(|t| t.strip_prefix(".B "))
            .map(|s| s.trim().to_string())
            .collect()
    };
    let tunables: BTreeSet<String> = rds_core::tunables::TUNABLES
        .iter()
        .map(|d| d.name.to_string())
        .collect();
    assert_eq!(names("TUNABLES"), tunables);
    let counters: BTreeSet<String> = rds_core::stats::CORE_NAMES
        .iter()
        .chain(rds_core::stats::TCP_NAMES)
        .map(|s| s.to_string())
        .collect();
    assert_eq!(names("COUNTERS"), counters);
    // Defaults in the page are the real ones.
    for d in rds_core::tunables::TUNABLES {
        let want = format!("Default {}, range {}", d.default_value(), d.range_text());
        assert!(text.contains(&want), "{}: '{want}' not in rds.7", d.name);
    }
}
