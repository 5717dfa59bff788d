//! Hooks around compaction and navigation (spec §7). A hook answering `None` (timeout, failure,
//! not declared by the client) means "no answer": the default path continues.

use futures::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::compaction::FileOps;
use crate::session::{Entry, EntrySpan};

/// What `before_compact` sees: the prepared compaction and the branch it came from.
#[derive(Debug, Clone)]
pub struct BeforeCompactRequest<'a> {
    pub session_id: &'a str,
    /// The compaction's operation id (the one its events carry).
    pub operation_id: &'a str,
    /// Entries of the current path, root first.
    pub branch_entries: &'a [Entry],
    /// The messages that will be summarised (history, then the turn prefix of a split turn).
    pub messages_to_summarize: &'a EntrySpan,
    pub turn_prefix_messages: &'a EntrySpan,
    /// The messages kept after the summary.
    pub recent_messages: &'a EntrySpan,
    /// File operations of the summarised span (and the previous summary's file lists).
    pub file_ops: &'a FileOps,
    pub first_kept_entry_id: &'a str,
    pub is_split_turn: bool,
    pub tokens_before: u64,
    pub previous_summary: Option<&'a str>,
    pub custom_instructions: Option<&'a str>,
    pub reason: super::CompactReason,
    /// Fires when the compaction is aborted.
    pub cancel: CancellationToken,
}

/// A compaction supplied by a hook instead of the summarizer's.
#[derive(Debug, Clone, PartialEq)]
pub struct HookCompaction {
    pub summary: String,
    pub short_summary: Option<String>,
    /// Validated by the engine: must be a valid cut point on the current path (spec §13 #7);
    /// an invalid one makes the engine ignore the hook compaction with a warning.
    pub first_kept_entry_id: String,
    pub tokens_before: Option<u64>,
    pub details: Option<Value>,
    pub preserve_data: Option<Value>,
}

/// `before_compact`'s answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BeforeCompactReply {
    pub cancel: bool,
    pub compaction: Option<HookCompaction>,
}

/// What `compacting` sees.
#[derive(Debug, Clone)]
pub struct CompactingRequest<'a> {
    pub session_id: &'a str,
    /// The compaction's operation id (the one its events carry).
    pub operation_id: &'a str,
    /// messagesToSummarize ++ turnPrefixMessages.
    pub messages: &'a EntrySpan,
    pub cancel: CancellationToken,
}

/// `compacting`'s answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompactingReply {
    /// Extra context lines, rendered as `- line` in `<additional-context>`.
    pub context: Vec<String>,
    /// Replaces the base history prompt (custom instructions are still appended).
    pub prompt: Option<String>,
    /// Stored on the compaction entry.
    pub preserve_data: Option<Value>,
}

/// What `before_tree` sees.
#[derive(Debug, Clone)]
pub struct BeforeTreeRequest<'a> {
    pub session_id: &'a str,
    pub target_id: &'a str,
    pub old_leaf_id: Option<&'a str>,
    pub common_ancestor_id: Option<&'a str>,
    /// The abandoned branch's entries, chronological.
    pub entries_to_summarize: &'a [Entry],
    pub user_wants_summary: bool,
    pub cancel: CancellationToken,
}

/// `before_tree`'s answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BeforeTreeReply {
    pub cancel: bool,
    /// `(summary, details)`, used only when a summary was asked for.
    pub summary: Option<(String, Option<Value>)>,
}

/// The hooks the engine calls; the daemon implements them with server-to-client requests.
pub trait EngineHooks: Send + Sync {
    /// Whether [`EngineHooks::before_compact`] is answered by someone, who then gets the
    /// whole branch (a partly loaded stored session is loaded whole for it).
    fn wants_branch_entries(&self) -> bool {
        false
    }
    fn before_compact<'a>(
        &'a self,
        req: BeforeCompactRequest<'a>,
    ) -> BoxFuture<'a, Option<BeforeCompactReply>>;
    fn compacting<'a>(
        &'a self,
        req: CompactingRequest<'a>,
    ) -> BoxFuture<'a, Option<CompactingReply>>;
    fn before_tree<'a>(
        &'a self,
        req: BeforeTreeRequest<'a>,
    ) -> BoxFuture<'a, Option<BeforeTreeReply>>;
}

/// No hooks: every call answers `None`.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHooks;

impl EngineHooks for NoHooks {
    fn before_compact<'a>(
        &'a self,
        _req: BeforeCompactRequest<'a>,
    ) -> BoxFuture<'a, Option<BeforeCompactReply>> {
        Box::pin(async { None })
    }
    fn compacting<'a>(
        &'a self,
        _req: CompactingRequest<'a>,
    ) -> BoxFuture<'a, Option<CompactingReply>> {
        Box::pin(async { None })
    }
    fn before_tree<'a>(
        &'a self,
        _req: BeforeTreeRequest<'a>,
    ) -> BoxFuture<'a, Option<BeforeTreeReply>> {
        Box::pin(async { None })
    }
}
