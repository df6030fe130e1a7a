//! The `tokensel` command line (see `tokensel --help`).

fn main() {
    std::process::exit(tokensel::main_entry());
}
