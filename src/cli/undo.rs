//! `compactd undo SESSION [--entry ID]`: the context as if a compaction had never run,
//! written as a new branch (see `src/session/undo.rs`); `--entry` an undo entry puts its
//! compaction back.

use std::path::PathBuf;

use crate::engine::{UndoOutcome, undo_compaction};
use crate::server::to_proto;

use super::common::{self, CliError};
use super::compact::open_writable;

/// Arguments of `compactd undo`.
#[derive(Debug, clap::Args)]
pub struct UndoArgs {
    /// The session file (`.jsonl`).
    pub session: PathBuf,
    /// What to undo: a compaction on the branch, or an earlier undo entry (which puts its
    /// compaction back). Default: the latest compaction on the branch.
    #[arg(long, value_name = "ID")]
    pub entry: Option<String>,
    /// Print the result as JSON (a `session/undoCompaction` result, the protocol's schema).
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &UndoArgs) -> Result<(), CliError> {
    let mut session = open_writable(&args.session)?;
    common::settings_for(&mut session);
    let outcome = undo_compaction(&mut session, args.entry.as_deref(), &None)
        .map_err(|e| CliError::new(format!("{}: {e}", args.session.display())))?;
    if args.json {
        return common::print_json(&to_proto::undo_result(&outcome));
    }
    common::print(&pretty(&outcome))
}

fn pretty(o: &UndoOutcome) -> String {
    let verb = if o.restored {
        "restored compaction"
    } else {
        "undid compaction"
    };
    let mut text = format!("{verb} {}", o.compaction_id);
    if o.undone_entry_id != o.compaction_id {
        text.push_str(&format!(" (undoing undo entry {})", o.undone_entry_id));
    }
    text.push('\n');
    text.push_str(&format!(
        "undo entry {}, {} entries copied\n",
        o.undo_entry_id(),
        o.entries.len() - 1
    ));
    text.push_str(&format!(
        "leaf: {} (was {})\n",
        o.leaf_id(),
        o.old_leaf_id.as_deref().unwrap_or("(root)")
    ));
    text
}
