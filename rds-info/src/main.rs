//! `rds-info`: see the library documentation of this crate.

use std::io::{self, BufWriter, Write};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = match rds_info::parse(std::env::args_os()) {
        rds_info::Parsed::Run(a) => a,
        rds_info::Parsed::Exit(code) => return ExitCode::from(code),
    };
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let r = rds_info::run(&args, &mut out).and_then(|code| out.flush().map(|()| code));
    match r {
        Ok(code) => ExitCode::from(code),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rds-info: {e}");
            ExitCode::from(1)
        }
    }
}
