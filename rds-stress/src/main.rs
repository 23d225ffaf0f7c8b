fn main() {
    std::process::exit(rds_stress::main_code());
}
