//! Compaction and tree requests: `session/compact`, `session/abortCompaction`,
//! `session/prune`, `session/navigateTree`, `session/abortBranchSummary`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::common::{
    EntryId, ProgressToken, SessionId, SummarizerReport, SummaryDetails, WireEntry,
};

/// Params of `session/compact`. The request answers when the compaction is done; progress
/// and summary text stream meanwhile.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionCompactParams {
    pub session_id: SessionId,
    /// Appended to the summary prompt as the user's focus ("Additional focus").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_instructions: Option<String>,
    /// Summarise but write nothing: the result shows what the compaction would do
    /// (`entryId` absent, `preview: true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<bool>,
    /// Keep from this entry on ("summarise up to here"). It must lie on the branch after the
    /// latest compaction, and not be a tool result; else `invalidParams`. Default: the cut
    /// point from `compaction.keepRecentTokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_kept_entry_id: Option<EntryId>,
    /// Fail with `leafMoved` unless this is the current leaf.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_leaf_id: Option<EntryId>,
    /// Compact the branch that ends at this entry instead of the session's leaf (only with
    /// `preview`): what a program whose leaf is that entry, such as the agent owning a
    /// read-only session, would get.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaf_id: Option<EntryId>,
    /// The summary's size in tokens, overriding `compaction.detail`: it sizes the summarizer's
    /// output budget and the length the prompt asks for, the extractive summary's sections and
    /// the progress-ledger block. The result's `targetMet` says whether it was met.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub target_tokens: Option<u64>,
    /// Use the session's armed background compaction (`session/observeTurn`, or an append in
    /// the lead band) when it fits the leaf (`leafId`, else the session's): its result at
    /// once, written as drafted (with `preview`, returned), waiting for one that still runs.
    /// Otherwise, and with `customInstructions`, `firstKeptEntryId`, `targetTokens` or
    /// `expectedLeafId`, the compaction runs as without it. `backgroundOperationId` in the
    /// result says the armed result was used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_armed: Option<bool>,
    /// LSP client-initiated progress: `$/progress` for this compaction uses this token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_done_token: Option<ProgressToken>,
}

/// The result of a compaction (manual, preview or automatic).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompactResult {
    /// The appended `compaction` entry; absent for a preview.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry_id: Option<EntryId>,
    /// The summary the LLM will see, file lists included.
    pub summary: String,
    /// A few sentences for a UI (best effort: absent when it failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub short_summary: Option<String>,
    /// The first entry kept verbatim after the summary.
    pub first_kept_entry_id: EntryId,
    /// The context size before (from the latest usage; 0 when unknown).
    pub tokens_before: u64,
    /// The estimated context size after (summary plus kept messages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_after: Option<u64>,
    /// File lists, retained facts, and `summarizers`: which summarizer wrote each part and
    /// why the ones tried before it gave up (as stored in the entry's `details`).
    pub details: SummaryDetails,
    /// Data a `hooks/compacting` or `hooks/beforeCompact` answer asked to store on the entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preserve_data: Option<Map<String, Value>>,
    /// Whether this is a preview (nothing written).
    pub preview: bool,
    /// A preview of the session's own branch that can be written as is or edited with
    /// `session/commitCompaction` while the branch is unchanged (absent with `leafId` and on a
    /// read-only session). A session keeps its 8 latest previews, each for 30 minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview_id: Option<String>,
    /// With `targetTokens`: whether the summary (file tags, retained facts and ledger
    /// included) is within it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_met: Option<bool>,
    /// With `targetTokens`: the summary's size in tokens, by the session's counter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_tokens: Option<u64>,
    /// When `targetMet` is `false`: why (the retention guard had to add facts, the file lists
    /// and ledger alone are larger, or the summarizer's shortest summary is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_reason: Option<String>,
    /// With `useArmed`: the background compaction (its `operationId`) whose armed result this
    /// is; absent when the compaction summarised anew.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub background_operation_id: Option<String>,
    /// Whether a hook supplied the compaction.
    pub from_extension: bool,
    /// Which summarizer wrote the history summary: `extractive`, `provider/model`, `client`,
    /// `remote`, `hook`, or `none` when nothing was summarised. When it is a fallback,
    /// `details.summarizers` says why the summarizers before it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summarizer: Option<String>,
    /// Settings of the session's project file that were ignored (the keys that decide where
    /// data or credentials go, in a project the user does not trust), one line each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Params of `session/commitCompaction`: write a previewed compaction, the user's text in
/// place of the generated one when given. The retention guard and the progress-ledger block
/// apply to an edited summary as to a generated one, and `details.edited` is `true`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CommitCompactionParams {
    pub session_id: SessionId,
    /// The `previewId` of a `session/compact` preview result.
    pub preview_id: String,
    /// The summary to write instead of the previewed one (not empty). File tags and the
    /// `<progress-ledger>` block the text lacks are appended again, as are facts the retention
    /// guard requires (under "Retained Facts").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// The short summary to write instead of the previewed one (empty: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub short_summary: Option<String>,
    /// LSP client-initiated progress for the commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_done_token: Option<ProgressToken>,
}

/// Result of `session/abortCompaction` and `session/abortBranchSummary`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AbortResult {
    /// Whether something was running and has been told to stop. The aborted operation
    /// reports its own end (`cancelled` error, or `aborted: true` in its event).
    pub aborted: bool,
}

/// Params of `session/prune`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionPruneParams {
    pub session_id: SessionId,
    /// Report what would be pruned without changing anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
    /// Fail with `leafMoved` unless this is the current leaf.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_leaf_id: Option<EntryId>,
}

/// Result of `session/prune`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PruneResult {
    /// Tool results replaced by a notice (or that would be, on a dry run).
    pub pruned_count: u64,
    /// Estimated tokens saved in the live context.
    pub tokens_saved: u64,
    /// The pruned `toolResult` entries; their original output stays recoverable.
    pub pruned_entry_ids: Vec<EntryId>,
    /// Whether this was a dry run.
    pub dry_run: bool,
}

/// Params of `session/navigateTree`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NavigateTreeParams {
    pub session_id: SessionId,
    /// The entry to move to. A user message (or custom message) target moves the leaf to
    /// its parent and returns its text as `editorText`.
    pub target_id: EntryId,
    /// Summarise the branch being left (default `false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summarize: Option<bool>,
    /// Added to the branch summary prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_instructions: Option<String>,
    /// `customInstructions` replace the prompt instead of being added to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_instructions: Option<bool>,
    /// Fail with `leafMoved` unless this is the current leaf.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_leaf_id: Option<EntryId>,
    /// Summarise (when asked) but write nothing and leave the leaf where it is: the result's
    /// `summary` is what the navigation would attach, `leafId` where the leaf would go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<bool>,
    /// Navigate from this entry instead of the session's leaf (only with `preview`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaf_id: Option<EntryId>,
    /// LSP client-initiated progress for the branch summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_done_token: Option<ProgressToken>,
}

/// The branch summary a previewed `session/navigateTree` would attach.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BranchSummaryPreview {
    /// The entry's `summary` (preamble and file tags included).
    pub summary: String,
    /// File lists and retained facts, or what a hook supplied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    /// Whether a hook supplied it.
    pub from_extension: bool,
    /// Which summarizer wrote it (`extractive`, `provider/model`, `client`, `hook`, …).
    pub summarizer: String,
    /// Which summarizer wrote it and why the ones tried before it gave up (empty for a
    /// hook's summary).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub summarizers: Vec<SummarizerReport>,
}

/// Result of `session/navigateTree` (spec §6.4, plus the new leaf).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NavigateTreeResult {
    /// The target user message's text, for an editor to pre-fill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub editor_text: Option<String>,
    /// The navigation did not happen (a hook cancelled it, or the summary was aborted).
    pub cancelled: bool,
    /// The branch summary was aborted (`session/abortBranchSummary`, cancel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aborted: Option<bool>,
    /// The appended `branch_summary` entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_entry: Option<WireEntry>,
    /// For a preview: the summary the navigation would attach.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<BranchSummaryPreview>,
    /// With a summary (attached or previewed): which summarizer wrote it (`hook` for a
    /// hook's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summarizer: Option<String>,
    /// With a summary compactd wrote: which summarizer wrote it and why the ones tried
    /// before it gave up (also in the entry's `details.summarizers`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub summarizers: Vec<SummarizerReport>,
    /// The leaf now (unchanged when cancelled); `null` when the branch is empty.
    pub leaf_id: Option<EntryId>,
}
