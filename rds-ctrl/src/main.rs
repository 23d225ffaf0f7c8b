//! `rds-ctrl`: see the library documentation of this crate.

fn main() -> std::process::ExitCode {
    rds_cli::start::main(&rds_ctrl::TOOL, rds_ctrl::parse, rds_ctrl::run)
}
