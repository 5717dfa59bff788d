//! The `compactd` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cli;

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
    /// Compact a session now: summarise old history, keep the recent part (or preview it).
    Compact(cli::compact::CompactArgs),
    /// Move the session's leaf to another entry, optionally summarising the branch left.
    Navigate(cli::navigate::NavigateArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Schema { out } => return schema(out),
        Command::Compact(args) => cli::compact::run(args),
        Command::Navigate(args) => cli::navigate::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(cli::common::CliError(message)) => {
            eprintln!("compactd: {message}");
            ExitCode::FAILURE
        }
    }
}

fn schema(out: &std::path::Path) -> ExitCode {
    match compactd::rpc::protocol::write_schemas(out) {
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
    }
}
