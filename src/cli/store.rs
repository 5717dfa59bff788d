//! `compactd import FILE…` and `compactd export ID`: sessions into and out of the database of
//! `storage.backend = "postgres"` (`storage.postgres.url` or `$DATABASE_URL`). Import stores
//! each file in one transaction (all of it or nothing) with its exact bytes; export writes the
//! JSONL an imported file came from, byte for byte. Progress goes to stderr.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use compactd::session::postgres::PgStore;
use compactd::settings::SettingsStack;

use super::common::CliError;

/// Arguments of `compactd import`.
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// Session files (`.jsonl`) to store; each keeps its session id.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Overwrite a session already stored under the same id.
    #[arg(long)]
    pub replace: bool,
    /// The database (default: `storage.postgres.url`, else `$DATABASE_URL`).
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
}

/// Arguments of `compactd export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// The stored session's id.
    pub id: String,
    /// Write here instead of stdout (must not exist yet).
    #[arg(long, short, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// The database (default: `storage.postgres.url`, else `$DATABASE_URL`).
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
}

fn connect(url: Option<&str>) -> Result<Arc<PgStore>, CliError> {
    let mut settings = SettingsStack::discover(None)
        .effective()
        .map_err(|e| CliError(e.to_string()))?;
    if let Some(url) = url {
        settings.storage.postgres.url = Some(compactd::settings::DatabaseUrl::new(url));
    }
    compactd::engine::registry::connect_store(&settings).map_err(|e| CliError(e.to_string()))
}

/// Prints a progress line at most every half second.
struct Progress {
    last: std::sync::Mutex<Instant>,
}

impl Progress {
    fn tick(&self, what: &str, lines: usize, bytes: u64) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if last.elapsed().as_millis() >= 500 {
            *last = Instant::now();
            eprintln!("  {what}: {lines} lines, {:.1} MB", bytes as f64 / 1e6);
        }
    }
}

pub fn import(args: &ImportArgs) -> Result<(), CliError> {
    let store = connect(args.database_url.as_deref())?;
    let started = Instant::now();
    let (mut sessions, mut bytes) = (0usize, 0u64);
    let total = args.files.len();
    for (i, file) in args.files.iter().enumerate() {
        let shown = file.display().to_string();
        let progress = Arc::new(Progress {
            last: std::sync::Mutex::new(Instant::now()),
        });
        let tick = Arc::clone(&progress);
        let name = shown.clone();
        let (stored, report) =
            compactd::session::import_file(&store, file, args.replace, move |l, b| {
                tick.tick(&name, l, b)
            })
            .map_err(|e| CliError(format!("{shown}: {e}")))?;
        for s in &report.skipped {
            eprintln!(
                "{shown}:{}: warning: kept a malformed line as written: {}",
                s.line, s.reason
            );
        }
        if let Some(t) = &report.torn_tail {
            eprintln!(
                "{shown}:{}: warning: torn last line left out: {}",
                t.line, t.reason
            );
        }
        if let Some(v) = report.migrated_from {
            eprintln!("{shown}: migrated from version {v}: stored as version 3");
        }
        sessions += 1;
        bytes += stored.bytes;
        eprintln!(
            "[{}/{total}] {shown} -> {} ({} lines, {:.1} MB)",
            i + 1,
            stored.id,
            stored.lines,
            stored.bytes as f64 / 1e6
        );
    }
    eprintln!(
        "imported {sessions} sessions, {:.1} MB in {:.1} s into {}",
        bytes as f64 / 1e6,
        started.elapsed().as_secs_f64(),
        store.target()
    );
    Ok(())
}

pub fn export(args: &ExportArgs) -> Result<(), CliError> {
    let store = connect(args.database_url.as_deref())?;
    let progress = Progress {
        last: std::sync::Mutex::new(Instant::now()),
    };
    let mut tick = |lines: usize, bytes: u64| progress.tick(&args.id, lines, bytes);
    let written = match &args.out {
        Some(path) => {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(|e| CliError(format!("{}: {e}", path.display())))?;
            let mut out = std::io::BufWriter::new(file);
            let n = store
                .export(&args.id, &mut out, &mut tick)
                .map_err(|e| CliError(e.to_string()));
            let flushed = out
                .into_inner()
                .map_err(|e| CliError(format!("{}: {e}", path.display())))
                .and_then(|f| {
                    f.sync_all()
                        .map_err(|e| CliError(format!("{}: {e}", path.display())))
                });
            match (n, flushed) {
                (Ok(n), Ok(())) => n,
                (Err(e), _) | (_, Err(e)) => {
                    let _ = std::fs::remove_file(path);
                    return Err(e);
                }
            }
        }
        None => {
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            let n = store
                .export(&args.id, &mut out, &mut tick)
                .map_err(|e| CliError(e.to_string()))?;
            out.flush().map_err(|e| CliError(format!("stdout: {e}")))?;
            n
        }
    };
    eprintln!("exported {} ({:.1} MB)", args.id, written as f64 / 1e6);
    Ok(())
}
