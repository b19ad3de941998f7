fn main() {
    std::process::exit(mozart_cli::main());
}
