//! `rds-ctrl`: see the library documentation of this crate.

use std::io::{self, BufWriter, Write};
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = match rds_ctrl::Cli::try_parse_from(&args) {
        Ok(c) => c,
        Err(e) => {
            if !e.use_stderr() {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            eprint!(
                "{}",
                rds_cli::usage_message("rds-ctrl", &e.render().to_string())
            );
            return ExitCode::from(rds_ctrl::usage_status(&args));
        }
    };
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let r = rds_ctrl::run(cli, &mut out);
    let flushed = out.flush();
    match r {
        Ok(code) => match flushed {
            Err(e) if e.kind() != io::ErrorKind::BrokenPipe => {
                eprintln!("rds-ctrl: {e}");
                ExitCode::from(2)
            }
            _ => ExitCode::from(code),
        },
        Err(e) => {
            let code = rds_ctrl::error_status(&e);
            if code != 0 {
                eprintln!("rds-ctrl: {e:#}");
            }
            ExitCode::from(code)
        }
    }
}
