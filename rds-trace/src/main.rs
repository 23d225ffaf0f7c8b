//! `rds-trace`: see the library documentation of this crate.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = match rds_trace::Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            if !e.use_stderr() {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            eprint!(
                "{}",
                rds_cli::usage_message("rds-trace", &e.render().to_string())
            );
            return ExitCode::from(rds_cli::USAGE_STATUS);
        }
    };
    match rds_trace::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            let code = rds_trace::error_status(&e);
            if code != 0 {
                eprintln!("rds-trace: {e:#}");
            }
            ExitCode::from(code)
        }
    }
}
