//! The man page agrees with the tool: the options of `man/rds-stress.1` are exactly those of
//! `--help` (the same clap definitions), and each is shown by `--help`.

#[test]
fn rds_stress_page_matches_help() {
    let text = rds_tests::manpage::assert_options_match("rds-stress.1", rds_stress::command());
    // The documented header line is the real one.
    assert!(text.contains(rds_stress::output::header().trim_end()));
}
