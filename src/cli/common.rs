//! What the session commands share: opening a file read-only, the settings of its project,
//! the token counter, and output.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use crate::foreign::claude;
use crate::session::{LoadReport, Session};
use crate::settings::{Settings, SettingsStack};
use crate::summarize::SummaryReport;
use crate::tokens::TokenCounter;

pub use super::error::{CliError, EXIT_NOTHING_TO_COMPACT};

/// `--tokenizer` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TokenizerArg {
    Chars4,
    O200k,
    Cl100k,
}

impl TokenizerArg {
    pub fn name(self) -> &'static str {
        match self {
            TokenizerArg::Chars4 => "chars4",
            TokenizerArg::O200k => "o200k",
            TokenizerArg::Cl100k => "cl100k",
        }
    }
}

/// Opens a session file without ever writing to it; load warnings go to stderr. A Claude
/// Code transcript is refused: only the commands that read one ([`open_readable`]) and
/// `compact` know it.
pub fn open(path: &Path) -> Result<Session, CliError> {
    if super::guest::is_codex_rollout(path) {
        return Err(super::guest::refuse_rollout(path));
    }
    if claude::is_transcript(path) {
        return Err(CliError::new(format!(
            "{}: a Claude Code transcript: compactd compacts it (`compact`) and reads it \
             (`plan`, `context`, `search`, `show`, `tree`), nothing else",
            path.display()
        )));
    }
    let (session, report) = Session::open(path)?;
    warn_report(path, &report);
    Ok(session)
}

/// Opens a session file, or a Claude Code transcript or Codex rollout read into a session,
/// for a command that only reads it.
pub fn open_readable(path: &Path) -> Result<Session, CliError> {
    if claude::is_transcript(path) {
        return Ok(open_guest(path)?.session);
    }
    if super::guest::is_codex_rollout(path) {
        return super::guest::open_codex(path).map(|(session, _)| session);
    }
    open(path)
}

/// A Claude Code transcript opened as a compactd session: the session lives on a temporary
/// copy in compactd's format, deleted when this is dropped; the transcript is only read.
pub struct Guest {
    pub transcript: claude::Transcript,
    pub session: Session,
    _copy: tempfile::TempDir,
}

/// Reads the Claude Code transcript at `path` into a session.
pub fn open_guest(path: &Path) -> Result<Guest, CliError> {
    let transcript = claude::read(path)?;
    let copy = tempfile::Builder::new()
        .prefix("compactd-claude-")
        .tempdir()?;
    let file = copy.path().join(format!("{}.jsonl", transcript.session_id));
    std::fs::write(&file, &transcript.session_jsonl)?;
    let session = open(&file)?;
    Ok(Guest {
        transcript,
        session,
        _copy: copy,
    })
}

fn warn_report(path: &Path, report: &LoadReport) {
    for s in &report.skipped {
        eprintln!(
            "{}:{}: warning: skipped line: {}",
            path.display(),
            s.line,
            s.reason
        );
    }
    for d in &report.duplicate_ids {
        eprintln!(
            "{}:{}: warning: duplicate entry id {} (the first one wins)",
            path.display(),
            d.line,
            d.id
        );
    }
    if let Some(t) = &report.torn_tail {
        eprintln!(
            "{}:{}: warning: torn last line ignored: {}",
            path.display(),
            t.line,
            t.reason
        );
    }
}

/// The effective settings for a session: user file and the session's project file; a broken
/// layer is skipped with a warning. Applies `storage.sync` to the session's appends.
pub fn settings_for(session: &mut Session) -> Settings {
    let settings = settings_of(session);
    session.set_sync_policy(crate::engine::sync_policy(&settings));
    settings
}

/// The effective settings for a session, for commands that only read it.
pub fn settings_of(session: &Session) -> Settings {
    let cwd = &session.header().cwd;
    let project = (!cwd.is_empty()).then(|| Path::new(cwd));
    let stack = SettingsStack::discover(project);
    for w in stack.warnings() {
        eprintln!("warning: settings layer skipped: {}", w.message);
    }
    stack.effective().unwrap_or_else(|e| {
        eprintln!("warning: settings ignored: {e}");
        Settings::default()
    })
}

/// The counter asked for, or the one the settings name.
pub fn counter(
    arg: Option<TokenizerArg>,
    settings: &Settings,
) -> Result<Arc<dyn TokenCounter>, CliError> {
    Ok(crate::engine::token_counter(
        settings,
        arg.map(TokenizerArg::name),
    )?)
}

/// Writes `text` to stdout. A reader that stopped reading (`| head`) ends the output quietly,
/// as Unix tools do: a closed pipe is not an error.
pub fn print(text: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(CliError::new(format!("cannot write to stdout: {error}")))
        }
        _ => Ok(()),
    }
}

/// Writes `value` as pretty JSON and a newline to stdout.
pub fn print_json(value: &impl serde::Serialize) -> Result<(), CliError> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    print(&text)
}

/// One line of at most `max` characters.
pub fn one_line(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        flat
    } else {
        let cut: String = flat.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

/// One line per summarizer that gave up before a summary part was written, e.g.
/// `history: openai/gpt-4o gave up: HTTP 500 …; extractive wrote it`; empty when the first
/// summarizer wrote every part.
pub fn fallback_lines<'a>(
    reports: impl IntoIterator<Item = (crate::engine::Purpose, &'a SummaryReport)>,
) -> String {
    let mut text = String::new();
    for (part, report) in reports {
        for failure in &report.failures {
            text.push_str(&format!(
                "{}: {} gave up: {}\n",
                part.name(),
                failure.summarizer,
                one_line(&failure.reason, 200)
            ));
        }
        if !report.failures.is_empty() {
            text.push_str(&format!(
                "{}: {} wrote it\n",
                part.name(),
                report.summarizer
            ));
        }
    }
    text
}
