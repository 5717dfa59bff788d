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
    /// The messages an LLM would see at the session's leaf, with token figures.
    Context(cli::context::ContextArgs),
    /// The session tree, with the leaf, labels and a preview of each entry.
    Tree(cli::tree::TreeArgs),
    /// Where a compaction would cut now (no summary, nothing written).
    Plan(cli::plan::PlanArgs),
    /// Prune old tool outputs in the live context (originals stay recoverable in the file).
    Prune(cli::prune::PruneArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Schema { out } => return schema(out),
        Command::Compact(args) => cli::compact::run(args),
        Command::Navigate(args) => cli::navigate::run(args),
        Command::Context(args) => cli::context::run(args),
        Command::Tree(args) => cli::tree::run(args),
        Command::Plan(args) => cli::plan::run(args),
        Command::Prune(args) => cli::prune::run(args),
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
