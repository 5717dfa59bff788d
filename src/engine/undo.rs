//! Undoing a compaction (or an undo) on an open session: the plan and the branch it writes
//! are `session::undo`'s; here the expected-leaf check and the outcome, shared by the daemon
//! ([`super::Engine::undo_compaction`]) and `compactd undo`.

use crate::session::{Entry, Session, plan_undo};

use super::EngineError;
use super::state::check_leaf;

/// What an undo wrote.
#[derive(Debug, Clone)]
pub struct UndoOutcome {
    /// The `compactd.undo` record, then the copies; the last is the new leaf.
    pub entries: Vec<Entry>,
    /// The entry undone: a compaction, or an earlier undo record.
    pub undone_entry_id: String,
    /// The compaction taken off the branch, or (`restored`) put back on it.
    pub compaction_id: String,
    pub restored: bool,
    pub old_leaf_id: Option<String>,
}

impl UndoOutcome {
    /// The `compactd.undo` entry written.
    pub fn undo_entry_id(&self) -> &str {
        &self.entries[0].id
    }

    /// The leaf after the undo.
    pub fn leaf_id(&self) -> &str {
        // Cannot fail: an undo writes at least its record.
        &self.entries.last().expect("an undo writes its record").id
    }
}

/// Undoes `entry_id` (default: the latest compaction on the branch) on `session`, which the
/// caller holds for writing with other writers' lines read in. The whole session is loaded
/// first (an undo may reach behind the part a stored session was opened with); the write is
/// checked under the writers' lock like every append.
pub fn undo_compaction(
    session: &mut Session,
    entry_id: Option<&str>,
    expected_leaf: &Option<Option<String>>,
) -> Result<UndoOutcome, EngineError> {
    check_leaf(session, expected_leaf)?;
    session.load_whole()?;
    let plan = plan_undo(session, entry_id)?;
    let written = session
        .append_planned(plan.entries, plan.old_leaf_id.clone())
        .map_err(EngineError::from_write)?
        .to_vec();
    Ok(UndoOutcome {
        entries: written,
        undone_entry_id: plan.undid,
        compaction_id: plan.compaction_id,
        restored: plan.restored,
        old_leaf_id: plan.old_leaf_id,
    })
}
