//! Server-to-client requests: the hooks and the client summarizer. Each is sent only when
//! the client declared it in `initialize`, has a timeout, and "no answer" (an error, a
//! timeout, a disconnect) means "continue the default way".

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::common::{EntryId, OperationId, SessionId, WireEntry, WireMessage};
use super::events::CompactionReason;

/// Params of `hooks/beforeCompact` (the reference's `session_before_compact`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BeforeCompactParams {
    pub session_id: SessionId,
    pub operation_id: OperationId,
    pub reason: CompactionReason,
    /// What the default compaction would do.
    pub preparation: CompactionPreparation,
    /// The branch, root first.
    pub branch_entries: Vec<WireEntry>,
    /// The user's instructions (manual compaction only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_instructions: Option<String>,
}

/// The planned compaction, as `hooks/beforeCompact` sees it (spec §4.6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompactionPreparation {
    pub first_kept_entry_id: EntryId,
    /// Messages the history summary covers.
    pub messages_to_summarize: Vec<WireMessage>,
    /// The split turn's first part, summarised apart (empty unless `isSplitTurn`).
    pub turn_prefix_messages: Vec<WireMessage>,
    /// Messages kept verbatim.
    pub recent_messages: Vec<WireMessage>,
    pub is_split_turn: bool,
    pub tokens_before: u64,
    /// The previous compaction's summary, which the new one updates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_summary: Option<String>,
    /// Files touched so far.
    pub file_ops: FileOps,
}

/// File operations collected from tool calls (spec §4.13).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileOps {
    pub read: Vec<String>,
    pub written: Vec<String>,
    pub edited: Vec<String>,
}

/// Answer to `hooks/beforeCompact`. `{}` means "go on".
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BeforeCompactResponse {
    /// Stop the compaction: a manual one fails with `cancelled` ("Compaction cancelled"), an
    /// automatic one ends with `aborted: true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel: Option<bool>,
    /// Use this compaction instead of summarising (stored with `fromExtension: true`;
    /// `hooks/compacting` is then skipped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction: Option<HookCompaction>,
}

/// A compaction supplied by a hook.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookCompaction {
    pub summary: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub short_summary: Option<String>,
    /// Must be an entry on the branch after the latest compaction; else the answer is
    /// ignored (logged) and the default path continues.
    pub first_kept_entry_id: EntryId,
    pub tokens_before: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preserve_data: Option<Map<String, Value>>,
}

/// Params of `hooks/compacting` (the reference's `session.compacting`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompactingParams {
    pub session_id: SessionId,
    pub operation_id: OperationId,
    /// The messages to summarise, turn prefix included.
    pub messages: Vec<WireMessage>,
}

/// Answer to `hooks/compacting`. `{}` means "go on".
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompactingResponse {
    /// Lines added to the summary prompts as extra context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Vec<String>>,
    /// Replaces the history prompt (custom instructions are still added).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// Stored on the compaction entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preserve_data: Option<Map<String, Value>>,
}

/// Params of `hooks/beforeTree` (the reference's `session_before_tree`; sent for every
/// navigation, summarising or not).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BeforeTreeParams {
    pub session_id: SessionId,
    pub preparation: TreePreparation,
}

/// The planned navigation (spec §6.4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TreePreparation {
    pub target_id: EntryId,
    pub old_leaf_id: Option<EntryId>,
    pub common_ancestor_id: Option<EntryId>,
    /// The entries of the branch being left, oldest first.
    pub entries_to_summarize: Vec<WireEntry>,
    pub user_wants_summary: bool,
}

/// Answer to `hooks/beforeTree`. `{}` means "go on".
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BeforeTreeResponse {
    /// Do not navigate: the request answers `{cancelled: true}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel: Option<bool>,
    /// Use this branch summary (only when the navigation asked for one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<HookBranchSummary>,
}

/// A branch summary supplied by a hook.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookBranchSummary {
    pub summary: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

/// What a `summarizer/summarize` call is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum SummaryPurpose {
    /// The history summary of a compaction (initial or update).
    History,
    /// The summary of a split turn's prefix.
    TurnPrefix,
    /// The short summary for a UI.
    Short,
    /// A branch summary on navigation.
    Branch,
}

/// Params of `summarizer/summarize`: the client runs one LLM call with its own model access.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SummarizeParams {
    pub session_id: SessionId,
    pub purpose: SummaryPurpose,
    /// The system prompt to send.
    pub system_prompt: String,
    /// The user prompt (the serialised conversation and instructions).
    pub prompt: String,
    /// The output budget.
    pub max_tokens: u64,
}

/// Answer to `summarizer/summarize`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SummarizeResponse {
    /// The summary text.
    pub text: String,
}
