//! `rds-info`: see the library documentation of this crate.

fn main() -> std::process::ExitCode {
    rds_cli::start::main(&rds_info::TOOL, rds_info::parse, rds_info::run)
}
