//! The `compactd` command line: `serve` (the default: the stdio daemon) and the one-shot
//! commands. `src/main.rs` only calls [`main`]. Read commands (`context`, `tree`, `plan`)
//! open the session file read-only and never modify it; `prune` rewrites it atomically;
//! `compact`, `navigate` and `undo` append to it (nothing when cancelled or previewed); `fork` writes
//! a new file and only reads the source; `import` and `export` move sessions into and out of
//! the PostgreSQL backend. With `--json`, each prints a protocol type (`CLI_OUTPUTS` in
//! `protocol/cli.rs` lists them).

mod blobs;
mod common;
mod compact;
mod context;
mod error;
mod eval;
mod fork;
mod guest;
mod ledger;
mod navigate;
mod plan;
mod prune;
mod recall;
mod store;
mod tree;
mod undo;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// compactd: keeps coding-agent conversations inside their LLM context window.
#[derive(Debug, Parser)]
#[command(version = env!("COMPACTD_VERSION"), about)]
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
    /// Run an MCP server on stdin/stdout: recall (search_history, read_history_entry) and
    /// context_usage as tools for any agent that speaks the Model Context Protocol.
    Mcp,
    /// Write the JSON Schemas of the protocol and the settings into a directory.
    Schema {
        /// The directory to write into (created if missing), e.g. `schema`.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// Compact a session now: summarise old history, keep the recent part (or preview it).
    Compact(compact::CompactArgs),
    /// Move the session's leaf to another entry, optionally summarising the branch left.
    Navigate(navigate::NavigateArgs),
    /// Undo a compaction (default: the latest on the branch) or an earlier undo, appending
    /// a branch with the context as if it had never run (or as it was).
    Undo(undo::UndoArgs),
    /// The messages an LLM would see at the session's leaf, with token figures.
    Context(context::ContextArgs),
    /// The session tree, with the leaf, labels and a preview of each entry.
    Tree(tree::TreeArgs),
    /// Where a compaction would cut now (no summary, nothing written).
    Plan(plan::PlanArgs),
    /// The progress ledger of the session's branch: requests, files, errors, pins, next step.
    Ledger(ledger::LedgerArgs),
    /// Pin a fact: carried verbatim through every later compaction until unpinned.
    Pin(ledger::PinArgs),
    /// Unpin a pin (by its id, as `compactd ledger` shows it).
    Unpin(ledger::UnpinArgs),
    /// Compact the session at several points (nothing written) and score what each summary
    /// kept of its progress ledger: requests, files, unresolved errors, pins.
    Eval(eval::EvalArgs),
    /// Prune old tool outputs in the live context (originals stay recoverable in the file).
    Prune(prune::PruneArgs),
    /// Find text in a session, compacted history and blob-stored full texts included.
    Search(recall::SearchArgs),
    /// Print one entry as written, full texts and pruned originals restored.
    Show(recall::ShowArgs),
    /// Report the blob references of session files; `--gc` deletes unreferenced blobs.
    Blobs(blobs::BlobsArgs),
    /// Write a new session from a branch of this one (`--at ID`) or from a copy of all of it.
    Fork(fork::ForkArgs),
    /// Store session files in the PostgreSQL database (`storage.postgres.url`, `DATABASE_URL`).
    Import(store::ImportArgs),
    /// Write a stored session as JSONL (the same bytes as the file it was imported from).
    Export(store::ExportArgs),
    /// Print the shell completion script of bash, zsh or fish (see the README's Install).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages (`compactd.1` and one per command) into a directory, or print
    /// `compactd.1` to stdout without `--out`.
    Man {
        /// The directory to write into (created if missing), e.g. `~/.local/share/man/man1`.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
}

/// The whole command line: parses the arguments, then serves or runs one command.
pub fn main() -> ExitCode {
    crate::files::ignore_file_size_signal();
    crate::files::return_large_buffers_to_the_system();
    let cli = Cli::parse();
    // One-shot commands report a file's malformed, torn or duplicate lines themselves, as
    // `FILE:LINE: warning: …` (cli/common.rs); the loader's own log line would say it twice.
    if !matches!(cli.command, None | Some(Command::Serve | Command::Mcp))
        && let Err(message) = init_logging(&cli.serve, "warn,compactd::session::file::load=error")
    {
        eprintln!("compactd: {message}");
        return ExitCode::FAILURE;
    }
    let result = match &cli.command {
        None | Some(Command::Serve) => return serve(&cli.serve),
        Some(Command::Mcp) => return mcp(&cli.serve),
        Some(Command::Schema { out }) => schema(out),
        Some(Command::Compact(args)) => compact::run(args),
        Some(Command::Navigate(args)) => navigate::run(args),
        Some(Command::Undo(args)) => undo::run(args),
        Some(Command::Context(args)) => context::run(args),
        Some(Command::Tree(args)) => tree::run(args),
        Some(Command::Plan(args)) => plan::run(args),
        Some(Command::Ledger(args)) => ledger::run(args),
        Some(Command::Pin(args)) => ledger::run_pin(args),
        Some(Command::Unpin(args)) => ledger::run_unpin(args),
        Some(Command::Eval(args)) => eval::run(args),
        Some(Command::Prune(args)) => prune::run(args),
        Some(Command::Search(args)) => recall::run_search(args),
        Some(Command::Show(args)) => recall::run_show(args),
        Some(Command::Blobs(args)) => blobs::run(args),
        Some(Command::Fork(args)) => fork::run(args),
        Some(Command::Import(args)) => store::import(args),
        Some(Command::Export(args)) => store::export(args),
        Some(Command::Completions { shell }) => completions(*shell),
        Some(Command::Man { out }) => man(out.as_deref()),
    };
    guest::remove_copies();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(common::CliError { message, code }) => {
            eprintln!("compactd: {message}");
            ExitCode::from(code)
        }
    }
}

fn schema(out: &std::path::Path) -> Result<(), common::CliError> {
    let paths = crate::protocol::write_schemas(out).map_err(|error| {
        common::CliError::new(format!("cannot write to {}: {error}", out.display()))
    })?;
    eprintln!("wrote {} schema files to {}", paths.len(), out.display());
    Ok(())
}

/// The completion script of `shell`, generated from the CLI definition, on stdout.
fn completions(shell: clap_complete::Shell) -> Result<(), common::CliError> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "compactd", &mut script);
    write_stdout(&script)
}

/// Writes `bytes` to stdout; a closed pipe (`| head`) is not an error.
fn write_stdout(bytes: &[u8]) -> Result<(), common::CliError> {
    common::print(&String::from_utf8_lossy(bytes))
}

/// Man pages generated from the CLI definition: all of them into `out`, or the top one on stdout.
fn man(out: Option<&std::path::Path>) -> Result<(), common::CliError> {
    let command = Cli::command().version(env!("CARGO_PKG_VERSION"));
    let Some(out) = out else {
        let mut page = Vec::new();
        clap_mangen::Man::new(command).render(&mut page)?;
        return write_stdout(&page);
    };
    let failed = |error: std::io::Error| {
        common::CliError::new(format!("cannot write to {}: {error}", out.display()))
    };
    std::fs::create_dir_all(out).map_err(failed)?;
    clap_mangen::generate_to(command, out).map_err(failed)?;
    eprintln!("wrote the man pages to {}", out.display());
    Ok(())
}

/// Runs the daemon, then exits the process: tokio's stdin reader blocks a thread in `read`,
/// so returning from `main` could wait forever on it.
fn serve(args: &ServeArgs) -> ExitCode {
    if let Err(message) = init_logging(args, "info") {
        eprintln!("compactd: {message}");
        return ExitCode::FAILURE;
    }
    if std::io::stdin().is_terminal() {
        // Someone typed `compactd` in a terminal: say what it is waiting for.
        eprintln!(
            "compactd {}: waiting for JSON-RPC on stdin (LSP Content-Length frames, or one JSON \
             object per line); editors and agents start it themselves. Ctrl-D ends it; \
             `compactd --help` lists the one-shot commands.",
            env!("CARGO_PKG_VERSION")
        );
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
        match crate::server::serve_stdio(crate::settings::SettingsStack::discover(None)).await {
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

/// Runs the MCP server until stdin ends, then exits the process (as [`serve`]).
fn mcp(args: &ServeArgs) -> ExitCode {
    if let Err(message) = init_logging(args, "warn") {
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
    let settings = crate::settings::SettingsStack::discover(None);
    let code = match runtime.block_on(crate::mcp::serve_stdio(settings)) {
        Ok(()) => 0,
        Err(error) => {
            tracing::error!(%error, "compactd mcp stops on an I/O error");
            1
        }
    };
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
            let file = std::sync::Arc::new(std::sync::Mutex::new(file));
            builder
                .with_writer(move || Lossy(LockedFile(file.clone())))
                .init();
        }
        None => builder.with_writer(|| Lossy(std::io::stderr())).init(),
    }
    Ok(())
}

/// A log writer that drops what it cannot write. A log line is never worth a request: when
/// stderr or the log file fails (a full disk, `ulimit -f`, a closed pipe), tracing would report
/// it with `eprintln!`, which panics on the same broken stderr and takes down the task that
/// logged, so its request would never be answered.
struct Lossy<W: std::io::Write>(W);

impl<W: std::io::Write> std::io::Write for Lossy<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = self.0.write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = self.0.flush();
        Ok(())
    }
}

/// The log file, shared by every thread that logs.
struct LockedFile(std::sync::Arc<std::sync::Mutex<std::fs::File>>);

impl std::io::Write for LockedFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut file = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        file.write(buf)
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        // One lock for the whole line, so lines of two threads never interleave.
        let mut file = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        file.write_all(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let mut file = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        file.flush()
    }
}
