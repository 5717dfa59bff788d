//! The `compactd` command line: `serve` (the default: the stdio daemon) and one-shot commands.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cli;

/// compactd: keeps coding-agent conversations inside their LLM context window.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    /// What to do; without a command, `serve`.
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

/// Options of the daemon (also accepted without the `serve` command).
#[derive(Debug, Clone, Default, clap::Args)]
struct ServeArgs {
    /// Write logs to this file instead of stderr.
    #[arg(long, value_name = "FILE", global = true)]
    log_file: Option<PathBuf>,
    /// Log filter: `error`, `warn`, `info`, `debug`, `trace`, or a tracing directive such as
    /// `compactd=debug`. Default: `$COMPACTD_LOG`, else `info` for the daemon and `warn` for
    /// one-shot commands.
    #[arg(long, value_name = "LEVEL", global = true)]
    log_level: Option<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the JSON-RPC daemon on stdin/stdout (the default).
    Serve,
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
    /// Write a new session from a branch of this one (`--at ID`) or from a copy of all of it.
    Fork(cli::fork::ForkArgs),
}

fn main() -> ExitCode {
    compactd::files::ignore_file_size_signal();
    let cli = Cli::parse();
    if !matches!(cli.command, None | Some(Command::Serve))
        && let Err(message) = init_logging(&cli.serve, "warn")
    {
        eprintln!("compactd: {message}");
        return ExitCode::FAILURE;
    }
    let result = match &cli.command {
        None | Some(Command::Serve) => return serve(&cli.serve),
        Some(Command::Schema { out }) => schema(out),
        Some(Command::Compact(args)) => cli::compact::run(args),
        Some(Command::Navigate(args)) => cli::navigate::run(args),
        Some(Command::Context(args)) => cli::context::run(args),
        Some(Command::Tree(args)) => cli::tree::run(args),
        Some(Command::Plan(args)) => cli::plan::run(args),
        Some(Command::Prune(args)) => cli::prune::run(args),
        Some(Command::Fork(args)) => cli::fork::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(cli::common::CliError(message)) => {
            eprintln!("compactd: {message}");
            ExitCode::FAILURE
        }
    }
}

fn schema(out: &std::path::Path) -> Result<(), cli::common::CliError> {
    let paths = compactd::protocol::write_schemas(out).map_err(|error| {
        cli::common::CliError(format!("cannot write to {}: {error}", out.display()))
    })?;
    eprintln!("wrote {} schema files to {}", paths.len(), out.display());
    Ok(())
}

/// Runs the daemon, then exits the process: tokio's stdin reader blocks a thread in `read`,
/// so returning from `main` could wait forever on it.
fn serve(args: &ServeArgs) -> ExitCode {
    if let Err(message) = init_logging(args, "info") {
        eprintln!("compactd: {message}");
        return ExitCode::FAILURE;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("compactd: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(async {
        match compactd::server::serve_stdio(compactd::settings::SettingsStack::discover(None)).await
        {
            Ok(reason) => {
                tracing::info!(?reason, "compactd stops");
                reason.exit_code()
            }
            Err(error) => {
                tracing::error!(%error, "compactd stops on an I/O error");
                1
            }
        }
    });
    std::process::exit(code);
}

/// Logs go to stderr or `--log-file`, never stdout (stdout carries the protocol).
/// `default_level` applies when neither `--log-level` nor `$COMPACTD_LOG` says otherwise: the
/// daemon logs `info`, one-shot commands only `warn` (e.g. a model that failed before the
/// extractive fallback), so their stderr stays a progress line and real problems.
fn init_logging(args: &ServeArgs, default_level: &str) -> Result<(), String> {
    use tracing_subscriber::EnvFilter;
    let filter = match &args.log_level {
        Some(level) => EnvFilter::try_new(level).map_err(|e| format!("--log-level: {e}"))?,
        None => EnvFilter::try_from_env("COMPACTD_LOG")
            .unwrap_or_else(|_| EnvFilter::new(default_level)),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false);
    match &args.log_file {
        Some(path) => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| format!("cannot open the log file {}: {e}", path.display()))?;
            builder.with_writer(std::sync::Mutex::new(file)).init();
        }
        None => builder.with_writer(std::io::stderr).init(),
    }
    Ok(())
}
