//! `session/undoCompaction`: the context as if a compaction had never run, written as a new
//! branch (the file stays append-only; see `src/session/undo.rs`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{EntryId, SessionId};

/// Params of `session/undoCompaction`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UndoCompactionParams {
    pub session_id: SessionId,
    /// What to undo: a compaction on the branch, or an earlier undo (its `undoEntryId`),
    /// which puts its compaction back. Default: the latest compaction on the branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry_id: Option<EntryId>,
    /// Fail with `leafMoved` unless this is the current leaf.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_leaf_id: Option<EntryId>,
}

/// Result of `session/undoCompaction`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UndoCompactionResult {
    /// The entries written, in order: the `compactd.undo` record, then the copies of what
    /// followed the undone entry on the branch.
    pub entry_ids: Vec<EntryId>,
    /// The `compactd.undo` entry: pass it as `entryId` to undo this undo.
    pub undo_entry_id: EntryId,
    /// The entry undone: a compaction, or an earlier undo entry.
    pub undone_entry_id: EntryId,
    /// The compaction taken off the branch, or (`restored`) put back on it.
    pub compaction_id: EntryId,
    /// `true` when this undo put a compaction back (an undo of an undo).
    pub restored: bool,
    /// The new leaf: the last entry written.
    pub leaf_id: EntryId,
    /// The leaf before the undo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_leaf_id: Option<EntryId>,
}
