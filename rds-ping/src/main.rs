//! rds-ping: see the library documentation and `man/rds-ping.1`.

fn main() -> std::process::ExitCode {
    rds_cli::start::main(&rds_ping::TOOL, rds_ping::parse, rds_ping::run)
}
