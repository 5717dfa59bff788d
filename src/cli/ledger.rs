//! `compactd ledger SESSION`: the progress ledger of the session's branch, as
//! `session/ledger` returns it; `compactd pin` and `unpin` add to it, as `session/pin` and
//! `session/unpin` do.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use crate::compaction::{PIN_CUSTOM_TYPE, UNPIN_CUSTOM_TYPE};
use crate::engine::Ledger;
use crate::protocol::{RequestStatus, SessionLedgerResult, SessionPinResult, SessionUnpinResult};
use crate::server::to_proto;
use crate::session::{EntryKind, Session};

use super::common::{self, CliError};

/// Arguments of `compactd ledger`.
#[derive(Debug, clap::Args)]
pub struct LedgerArgs {
    /// The session file (`.jsonl`); it is only read.
    pub session: PathBuf,
    /// Print JSON instead of text (`SessionLedgerResult` in the schema).
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &LedgerArgs) -> Result<(), CliError> {
    let session = common::open(&args.session)?;
    let ledger = to_proto::ledger(&Ledger::derive(&session.path_to_leaf()));
    if args.json {
        common::print_json(&ledger)
    } else {
        common::print(&render(&ledger))
    }
}

fn render(l: &SessionLedgerResult) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "requests: {}", l.requests.len());
    for r in &l.requests {
        let status = match r.status {
            RequestStatus::Current => "current",
            RequestStatus::Answered => "answered",
            RequestStatus::Superseded => "superseded",
        };
        let text = r.text.replace('\n', "\n    ");
        let _ = writeln!(out, "  [{status}] {} {text}", r.entry_id);
    }
    let _ = writeln!(out, "files modified: {}", l.files.modified.len());
    for f in &l.files.modified {
        let _ = writeln!(out, "  {} ({:?})", f.path, f.last_op);
    }
    let _ = writeln!(out, "files read: {}", l.files.read.len());
    for f in &l.files.read {
        let _ = writeln!(out, "  {}", f.path);
    }
    let _ = writeln!(out, "errors: {}", l.errors.len());
    for e in &l.errors {
        let state = if e.resolved { "resolved" } else { "unresolved" };
        let _ = writeln!(out, "  [{state}] {} {} → {}", e.entry_id, e.command, e.text);
    }
    let _ = writeln!(out, "pins: {}", l.pins.len());
    for p in &l.pins {
        let _ = writeln!(out, "  {} {}", p.pin_id, p.text);
    }
    if let Some(next) = &l.next_step {
        let _ = writeln!(out, "next step: {next}");
    }
    out
}

/// Arguments of `compactd pin`.
#[derive(Debug, clap::Args)]
pub struct PinArgs {
    /// The session file (`.jsonl`); the pin is appended at its leaf.
    pub session: PathBuf,
    /// The fact to carry verbatim through every later compaction.
    pub text: String,
    /// Print JSON instead of text (`SessionPinResult` in the schema).
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `compactd unpin`.
#[derive(Debug, clap::Args)]
pub struct UnpinArgs {
    /// The session file (`.jsonl`); the unpin is appended at its leaf.
    pub session: PathBuf,
    /// The pin's id (its entry's id, as `compactd ledger` shows it).
    pub pin_id: String,
    /// Print JSON instead of text (`SessionUnpinResult` in the schema).
    #[arg(long)]
    pub json: bool,
}

/// `compactd pin SESSION TEXT`: what `session/pin` does, on a file.
pub fn run_pin(args: &PinArgs) -> Result<(), CliError> {
    if args.text.trim().is_empty() {
        return Err(CliError::new("a pin needs some text"));
    }
    let mut session = common::open(&args.session)?;
    let kind = EntryKind::Custom {
        custom_type: PIN_CUSTOM_TYPE.to_owned(),
        data: Some(serde_json::json!({ "text": args.text })),
    };
    let id = append(&mut session, &args.session, kind)?;
    if args.json {
        return common::print_json(&SessionPinResult {
            pin_id: id.clone(),
            leaf_id: id,
        });
    }
    common::print(&format!("pinned {id}\n"))
}

/// `compactd unpin SESSION PIN_ID`: what `session/unpin` does, on a file.
pub fn run_unpin(args: &UnpinArgs) -> Result<(), CliError> {
    let mut session = common::open(&args.session)?;
    let pinned = Ledger::derive(&session.path_to_leaf())
        .pins
        .iter()
        .any(|p| p.pin_id == args.pin_id);
    if !pinned {
        return Err(CliError::new(format!(
            "{}: {} is not a pin on the session's branch",
            args.session.display(),
            args.pin_id
        )));
    }
    let kind = EntryKind::Custom {
        custom_type: UNPIN_CUSTOM_TYPE.to_owned(),
        data: Some(serde_json::json!({ "pinId": args.pin_id })),
    };
    let id = append(&mut session, &args.session, kind)?;
    if args.json {
        return common::print_json(&SessionUnpinResult {
            entry_id: id.clone(),
            leaf_id: id,
        });
    }
    common::print(&format!("unpinned {} (entry {id})\n", args.pin_id))
}

fn append(session: &mut Session, path: &Path, kind: EntryKind) -> Result<String, CliError> {
    session
        .append(kind)
        .map(|entry| entry.id.clone())
        .map_err(|e| CliError::new(format!("{}: {e}", path.display())))
}
