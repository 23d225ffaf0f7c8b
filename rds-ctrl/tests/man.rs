//! The man pages agree with the tools: options and commands of `man/rds-info.1` and
//! `man/rds-ctrl.8` are exactly those of `--help` (the same clap definitions), and `man/rds.7`
//! lists exactly the tunables and counters of the stack.

use std::collections::BTreeSet;

use rds_tests::manpage::{clap_options, options, page, section, tags};

#[test]
fn rds_info_page_matches_help() {
    rds_tests::manpage::assert_options_match("rds-info.1", rds_info::command());
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
