//! Notifications from the server about a session: compaction, auto-compaction, navigation,
//! appends and auto-continue. They go to every connection that has the session open, so
//! two editors on one session see the same ordered stream.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{EntryId, OperationId, ProgressToken, SessionId, SummarizerReport, WireEntry};
use super::compaction::CompactResult;
use super::errors::ErrorInfo;

/// Why a compaction runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum CompactionReason {
    /// `session/compact`.
    Manual,
    /// The context passed the threshold.
    Threshold,
    /// The model's reply was a context-overflow error.
    Overflow,
}

/// Why an auto-compaction runs (the reference's `auto_compaction_start.reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum AutoCompactionReason {
    Threshold,
    Overflow,
}

impl From<AutoCompactionReason> for CompactionReason {
    fn from(reason: AutoCompactionReason) -> Self {
        match reason {
            AutoCompactionReason::Threshold => CompactionReason::Threshold,
            AutoCompactionReason::Overflow => CompactionReason::Overflow,
        }
    }
}

/// Which summary a delta belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum SummaryPart {
    /// The history summary.
    History,
    /// The summary of the split turn's prefix.
    TurnPrefix,
    /// The short summary for a UI.
    Short,
}

/// `session/compactionStarted`: any compaction (manual or automatic) began.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompactionStarted {
    pub session_id: SessionId,
    pub operation_id: OperationId,
    pub reason: CompactionReason,
    /// The `$/progress` token of this compaction, when progress is reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_done_token: Option<ProgressToken>,
}

/// `session/compactionDelta`: more summary text streamed from the summarizer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompactionDelta {
    pub session_id: SessionId,
    pub operation_id: OperationId,
    pub part: SummaryPart,
    /// Text to add to what this `part` streamed so far. `CompactResult.summary` in
    /// `session/compactionFinished` is authoritative.
    pub text: String,
    /// The summarizer started this part again (a retry or the next candidate): discard what
    /// it streamed so far before adding `text`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reset: bool,
}

/// `session/compactionFinished`: the compaction ended; authoritative.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompactionFinished {
    pub session_id: SessionId,
    pub operation_id: OperationId,
    /// The result when it succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<CompactResult>,
    /// Whether it was cancelled.
    pub aborted: bool,
    /// Why it failed, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
}

/// `session/autoCompactionStarted` (the reference's `auto_compaction_start`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoCompactionStarted {
    pub session_id: SessionId,
    pub reason: AutoCompactionReason,
    /// The operation id of the `session/compaction*` events of this run.
    pub operation_id: OperationId,
}

/// How an auto-compaction ended (the reference's `auto_compaction_end`, with skips told
/// apart from failures).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoCompactionOutcome {
    pub reason: AutoCompactionReason,
    /// The compaction, when one was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<CompactResult>,
    /// Cancelled by `session/abortCompaction`, a progress cancel, or a
    /// `hooks/beforeCompact` answer `{cancel: true}`.
    pub aborted: bool,
    /// Overflow recovery succeeded: the agent should send its request again with the
    /// context from `session/context`.
    pub will_retry: bool,
    /// Nothing was attempted (e.g. nothing to compact); not a failure.
    pub skipped: bool,
    /// Why it was skipped, when `skipped`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_reason: Option<String>,
    /// The failure, prefixed `Context overflow recovery failed: ` (overflow) or
    /// `Auto-compaction failed: ` (threshold) as in the reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
}

/// `session/autoCompactionFinished`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoCompactionFinished {
    pub session_id: SessionId,
    pub operation_id: OperationId,
    #[serde(flatten)]
    pub outcome: AutoCompactionOutcome,
}

/// `session/treeNavigated` (the reference's `session_tree`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TreeNavigated {
    pub session_id: SessionId,
    /// The leaf now (the summary entry when one was attached); `null` for an empty branch.
    pub new_leaf_id: Option<EntryId>,
    pub old_leaf_id: Option<EntryId>,
    /// The `branch_summary` entry, when one was appended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_entry: Option<WireEntry>,
    /// With a summary: whether a hook supplied it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_extension: Option<bool>,
    /// With a summary: which summarizer wrote it (`hook` for a hook's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summarizer: Option<String>,
    /// With a summary compactd wrote: which summarizer wrote it and why the ones tried
    /// before it gave up (also in the entry's `details.summarizers`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub summarizers: Vec<SummarizerReport>,
}

/// `session/entriesAppended`: entries were written to the session, by any client or by the
/// server itself (compaction, branch summary, auto-continue prompt), or by another daemon
/// sharing the session database (`external`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EntriesAppended {
    pub session_id: SessionId,
    /// The new entries as stored, in order.
    pub entries: Vec<WireEntry>,
    /// The leaf after the append.
    pub leaf_id: EntryId,
    /// Written by another process: another daemon on the same PostgreSQL database. Sent as
    /// soon as the database announces the write, without a request from this client. (A file
    /// session's other writers are read at the next request, without this notification.)
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub external: bool,
}

/// `session/autoContinue`: after a threshold compaction the server appended the synthetic
/// user message; the agent should run the model on `session/context` now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoContinue {
    pub session_id: SessionId,
    /// `Continue if you have next steps.`
    pub prompt: String,
    /// The appended user message entry (marked `synthetic: true`).
    pub entry_id: EntryId,
}

/// Where a background (speculative) compaction stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum BackgroundCompactionState {
    /// A reply entered `[threshold - leadTokens, threshold)`: a snapshot of the branch is
    /// being summarised while appends go on.
    Started,
    /// The result is ready and will be written when a reply crosses the threshold.
    Armed,
    /// The result was written: at the crossing (the `session/compaction*` events of the
    /// automatic compaction carry it) or by `session/compact {useArmed: true}`.
    Committed,
    /// The result was handed out as a preview (`session/compact {preview: true, useArmed:
    /// true}`): nothing is written until the client commits it (`session/commitCompaction`)
    /// or, for an agent's own file, the agent writes it itself.
    Previewed,
    /// The result was dropped; nothing was written (see `reason`).
    Discarded,
}

/// Why a background compaction was discarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum BackgroundDiscardReason {
    /// The leaf left the snapshot's branch (navigation, fork, another writer's rewrite).
    LeafLeftBranch,
    /// A compaction was written after the snapshot.
    CompactedSince,
    /// What was appended since the snapshot no longer fits in the kept part.
    DoesNotFit,
    /// `session/abortCompaction`, or the session closed.
    Aborted,
    /// The summarizer failed (see `message`).
    Failed,
    /// A manual compaction started.
    ManualCompaction,
}

/// `session/backgroundCompaction`: a background compaction changed state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackgroundCompaction {
    pub session_id: SessionId,
    /// The background run's own id (`background-…`); the automatic compaction that commits it
    /// has its own.
    pub operation_id: OperationId,
    pub state: BackgroundCompactionState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<BackgroundDiscardReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Why automatic compaction paused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum AutoCompactionPauseReason {
    /// The context refilled to the threshold within 3 replies of a compaction, 3 times in a
    /// row: compacting again would not help.
    Thrashing,
    /// 3 automatic compactions in a row failed.
    RepeatedFailures,
}

/// `session/autoCompactionPaused`: automatic compaction stopped for the session until the user
/// acts (a manual `session/compact` or a `settings/update` resumes it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoCompactionPaused {
    pub session_id: SessionId,
    pub reason: AutoCompactionPauseReason,
    /// How many times in a row it happened.
    pub count: u32,
}
