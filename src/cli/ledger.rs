//! `compactd ledger SESSION`: the progress ledger of the session's branch, as
//! `session/ledger` returns it.

use std::fmt::Write;
use std::path::PathBuf;

use crate::engine::Ledger;
use crate::protocol::{RequestStatus, SessionLedgerResult};
use crate::server::to_proto;

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
