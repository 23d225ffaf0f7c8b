fn main() {
    eprintln!("rds-trace: under construction");
    std::process::exit(1);
}
