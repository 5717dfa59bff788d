//! Other agents' session files on the command line: a Codex rollout is recognised by its
//! first line and read through a pi-format copy in a temporary directory (removed when the
//! command ends), so `plan`, `context`, `search`, `show` and `compact` work on it unchanged.
//! `compact` then appends Codex's own records to the rollout itself ([`append_codex`]); the
//! commands that would write compactd entries refuse it.

use std::io::{BufRead, Read, Write};
use std::path::Path;
use std::sync::Mutex;

use crate::foreign::codex::{Rollout, being_written, is_rollout};
use crate::session::{Session, iso_from_ms, now_ms};

use super::error::CliError;

/// The temporary copies read this run, removed by [`remove_copies`] when the command ends.
static COPIES: Mutex<Vec<tempfile::TempDir>> = Mutex::new(Vec::new());

/// Whether `path` is a Codex rollout (its first line is a `session_meta` record).
pub(crate) fn is_codex_rollout(path: &Path) -> bool {
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let mut first = Vec::new();
    let mut reader = std::io::BufReader::new(file).take(1 << 20);
    reader.read_until(b'\n', &mut first).is_ok() && is_rollout(first.trim_ascii_end())
}

/// The error of a command that does not take a Codex rollout.
pub(crate) fn refuse_rollout(path: &Path) -> CliError {
    CliError::new(format!(
        "{}: a Codex rollout: compactd compact, plan, context, search and show read it; this \
         command writes compactd's own entries, which Codex would not read",
        path.display()
    ))
}

/// Reads a Codex rollout into compactd's model of a session.
pub(crate) fn open_codex(path: &Path) -> Result<(Session, Rollout), CliError> {
    let bytes =
        std::fs::read(path).map_err(|e| CliError::new(format!("{}: {e}", path.display())))?;
    let rollout = Rollout::parse(&bytes)
        .map_err(|e| CliError::new(format!("{}: Codex rollout: {e}", path.display())))?;
    let dir = tempfile::tempdir()?;
    let copy = dir
        .path()
        .join(format!("codex-{}.jsonl", rollout.thread_id));
    std::fs::write(&copy, rollout.to_session_jsonl())?;
    let (session, _report) = Session::open(&copy)?;
    COPIES
        .lock()
        .map_err(|_| CliError::new("poisoned lock"))?
        .push(dir);
    Ok((session, rollout))
}

/// Refuses a rollout Codex is writing now (it holds it open, or wrote it a moment ago).
pub(crate) fn refuse_if_busy(path: &Path) -> Result<(), CliError> {
    match being_written(path) {
        Some(why) => Err(CliError::new(format!(
            "{}: not compacted, the file is in use: {why}",
            path.display()
        ))),
        None => Ok(()),
    }
}

/// Appends Codex's compaction records for `summary` (keeping the items from `first_kept_id`
/// verbatim) to the rollout, after checking it is still exactly as read and quiet. Only lines
/// are appended; every byte already there stays.
pub(crate) fn append_codex(
    path: &Path,
    rollout: &Rollout,
    summary: &str,
    first_kept_id: Option<&str>,
) -> Result<(), CliError> {
    refuse_if_busy(path)?;
    let lines = rollout.compaction_lines(summary, first_kept_id, &iso_from_ms(now_ms()));
    let mut file = std::fs::OpenOptions::new().append(true).open(path)?;
    if file.metadata()?.len() != rollout.len {
        return Err(CliError::new(format!(
            "{}: changed while compacting (Codex wrote to it); nothing written",
            path.display()
        )));
    }
    file.write_all(lines.as_bytes())?;
    file.sync_all()?;
    Ok(())
}

/// Removes the temporary copies (called once the command has finished).
pub(crate) fn remove_copies() {
    if let Ok(mut copies) = COPIES.lock() {
        copies.clear();
    }
}
