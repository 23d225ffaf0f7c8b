//! `rds-stress`: see the library documentation of this crate.

fn main() -> std::process::ExitCode {
    rds_cli::start::main(&rds_stress::TOOL, rds_stress::parse, rds_stress::run)
}
