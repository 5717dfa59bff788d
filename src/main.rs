//! The `compactd` binary: the command line lives in the library (`compactd::cli`), so that
//! it reaches the engine through the crate's own paths rather than a public API made for it.

fn main() -> std::process::ExitCode {
    compactd::cli::main()
}
