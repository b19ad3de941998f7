//! Stand-in AI CLI (placeholder).
fn main() {
    eprintln!("mozart-standin: not yet implemented");
    std::process::exit(2);
}
