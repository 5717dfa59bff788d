//! The `compactd` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// compactd: keeps coding-agent conversations inside their LLM context window.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write the JSON Schemas of the protocol and the settings into a directory.
    Schema {
        /// The directory to write into (created if missing), e.g. `schema`.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Schema { out } => match compactd::rpc::protocol::write_schemas(&out) {
            Ok(paths) => {
                eprintln!("wrote {} schema files to {}", paths.len(), out.display());
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!(
                    "compactd schema: cannot write to {}: {error}",
                    out.display()
                );
                ExitCode::FAILURE
            }
        },
    }
}
