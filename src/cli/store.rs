//! `compactd import FILE…` and `compactd export ID`: sessions into and out of the database of
//! `storage.backend = "postgres"` (`storage.postgres.url` or `$DATABASE_URL`). Import stores
//! each file in one transaction (all of it or nothing) with its exact bytes; export writes the
//! JSONL an imported file came from, byte for byte. Progress goes to stderr, a line per file;
//! a file that cannot be stored is reported and skipped (nothing of it is stored), the others
//! are stored, and the command fails at the end.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use crate::session::{Catalog, SessionError};
use crate::settings::{SettingsStack, StorageBackend};

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
    /// Also print one JSON object per file on stdout as it is done (`{"event":"stored",…}` or
    /// `{"event":"failed",…}`), then `{"event":"done",…}`.
    #[arg(long)]
    pub json: bool,
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

/// The catalog of the settings' `storage.backend`, or the database of `storage.postgres`
/// (or `url`) when the sessions are files: these commands move sessions between the two.
fn connect(url: Option<&str>) -> Result<Arc<dyn Catalog>, CliError> {
    let mut settings = SettingsStack::discover(None)
        .effective()
        .map_err(|e| CliError::new(e.to_string()))?;
    if let Some(url) = url {
        settings.storage.postgres.url = Some(crate::settings::DatabaseUrl::new(url));
    }
    if settings.storage.backend == StorageBackend::File {
        settings.storage.backend = StorageBackend::Postgres;
    }
    crate::engine::registry::connect_catalog(&settings).map_err(|e| CliError::new(e.to_string()))
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

/// What happened to one file of an import, as `--json` prints it (one line per file).
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase", tag = "event")]
enum ImportEvent {
    /// A file was stored (in one transaction: all of it).
    #[serde(rename_all = "camelCase")]
    Stored {
        file: PathBuf,
        session_id: String,
        lines: usize,
        bytes: u64,
        /// The version 1 or 2 file was stored as version 3.
        #[serde(skip_serializing_if = "Option::is_none")]
        migrated_from: Option<u64>,
        /// Malformed lines kept as written, a torn last line left out.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        warnings: Vec<String>,
    },
    /// A file was not stored (nothing of it is in the database); the import went on.
    #[serde(rename_all = "camelCase")]
    Failed {
        file: PathBuf,
        /// `alreadyExists`, `notFound`, `invalidHeader`, `notRegularFile`, `io` or `storage`.
        kind: &'static str,
        error: String,
    },
    /// The end of the run.
    #[serde(rename_all = "camelCase")]
    Done {
        files: usize,
        stored: usize,
        failed: usize,
        bytes: u64,
        seconds: f64,
    },
}

fn error_kind(e: &SessionError) -> &'static str {
    match e {
        SessionError::AlreadyExists { .. } => "alreadyExists",
        SessionError::NotFound { .. } => "notFound",
        SessionError::InvalidHeader { .. } => "invalidHeader",
        SessionError::NotRegularFile { .. } => "notRegularFile",
        SessionError::Io { .. } => "io",
        SessionError::Storage(_) | SessionError::LeafMoved { .. } => "storage",
        SessionError::EntryNotFound(_) => "invalidSession",
    }
}

fn print_event(event: &ImportEvent) -> Result<(), CliError> {
    let mut line = serde_json::to_string(event)?;
    line.push('\n');
    super::common::print(&line)
}

/// Stores every file, each in its own transaction, going on past a file that fails (it is
/// reported, and nothing of it is stored); fails at the end if any did. Progress on stderr:
/// one line per file; with `--json`, one JSON object per file on stdout as well.
pub fn import(args: &ImportArgs) -> Result<(), CliError> {
    let store = connect(args.database_url.as_deref())?;
    let started = Instant::now();
    let (mut stored_count, mut bytes) = (0usize, 0u64);
    let mut failures: Vec<String> = Vec::new();
    let total = args.files.len();
    for (i, file) in args.files.iter().enumerate() {
        let shown = file.display().to_string();
        let progress = Arc::new(Progress {
            last: std::sync::Mutex::new(Instant::now()),
        });
        let tick = Arc::clone(&progress);
        let name = shown.clone();
        let result = store.import(
            file,
            args.replace,
            Box::new(move |l, b| tick.tick(&name, l, b)),
        );
        let (stored, report) = match result {
            Ok(done) => done,
            Err(e) => {
                eprintln!("[{}/{total}] {shown}: error: {e} (not imported)", i + 1);
                failures.push(shown.clone());
                if args.json {
                    print_event(&ImportEvent::Failed {
                        file: file.clone(),
                        kind: error_kind(&e),
                        error: e.to_string(),
                    })?;
                }
                continue;
            }
        };
        let mut warnings = Vec::new();
        for s in &report.skipped {
            warnings.push(format!(
                "line {}: kept a malformed line as written: {}",
                s.line, s.reason
            ));
        }
        if let Some(t) = &report.torn_tail {
            warnings.push(format!(
                "line {}: torn last line left out: {}",
                t.line, t.reason
            ));
        }
        for w in &warnings {
            eprintln!("{shown}: warning: {w}");
        }
        if let Some(v) = report.migrated_from {
            eprintln!("{shown}: migrated from version {v}: stored as version 3");
        }
        stored_count += 1;
        bytes += stored.bytes;
        eprintln!(
            "[{}/{total}] {shown} -> {} ({} lines, {:.1} MB)",
            i + 1,
            stored.id,
            stored.lines,
            stored.bytes as f64 / 1e6
        );
        if args.json {
            print_event(&ImportEvent::Stored {
                file: file.clone(),
                session_id: stored.id,
                lines: stored.lines,
                bytes: stored.bytes,
                migrated_from: report.migrated_from,
                warnings,
            })?;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "imported {stored_count} of {total} sessions, {:.1} MB in {seconds:.1} s into {}",
        bytes as f64 / 1e6,
        store.target()
    );
    if args.json {
        print_event(&ImportEvent::Done {
            files: total,
            stored: stored_count,
            failed: failures.len(),
            bytes,
            seconds,
        })?;
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(CliError::new(format!(
            "{} of {total} files were not imported: {}",
            failures.len(),
            failures.join(", ")
        )))
    }
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
                .map_err(|e| CliError::new(format!("{}: {e}", path.display())))?;
            let mut out = std::io::BufWriter::new(file);
            let n = store
                .export(&args.id, &mut out, &mut tick)
                .map_err(|e| CliError::new(e.to_string()));
            let flushed = out
                .into_inner()
                .map_err(|e| CliError::new(format!("{}: {e}", path.display())))
                .and_then(|f| {
                    f.sync_all()
                        .map_err(|e| CliError::new(format!("{}: {e}", path.display())))
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
                .map_err(|e| CliError::new(e.to_string()))?;
            out.flush()
                .map_err(|e| CliError::new(format!("stdout: {e}")))?;
            n
        }
    };
    eprintln!("exported {} ({:.1} MB)", args.id, written as f64 / 1e6);
    Ok(())
}
