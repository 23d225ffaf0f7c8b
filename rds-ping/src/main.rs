//! rds-ping: see the library documentation and `man/rds-ping.1`.

fn main() {
    std::process::exit(rds_ping::main_with(std::env::args_os().skip(1)));
}
