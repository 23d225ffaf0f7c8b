fn main() {
    eprintln!("rds-stress: under construction");
    std::process::exit(1);
}
