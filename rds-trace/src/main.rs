//! `rds-trace`: see the library documentation of this crate.

fn main() -> std::process::ExitCode {
    rds_cli::start::main(&rds_trace::TOOL, rds_trace::parse, rds_trace::run)
}
