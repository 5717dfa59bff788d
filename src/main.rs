//! The `compactd` command line.

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
