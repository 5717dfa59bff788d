//! Session requests: create, open, fork, list, close, append, context, tree, usage, setLabel.

use std::borrow::Cow;
use std::collections::BTreeMap;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::common::{EntryId, ProgressToken, SessionId, WireEntry, WireMessage};
use super::events::AutoCompactionOutcome;

/// Params of `session/create`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionCreateParams {
    /// The working directory the session belongs to (the header's `cwd`; also selects the
    /// project settings file). Default: the daemon's cwd.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Where to write the session file. Default: the data directory, by cwd.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// A title for the header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

/// Params of `session/open`: exactly one of `path` and `sessionId`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionOpenParams {
    /// A session file, e.g. one written by the reference agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// A session id, looked up among the sessions of `cwd` (or of every cwd when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<SessionId>,
    /// Narrows the `sessionId` lookup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Never write the file (another program owns it, e.g. an agent that appends to it):
    /// reads and previews see the owner's appends, every write fails with `sessionReadOnly`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// LSP client-initiated progress: `$/progress` `begin` goes out before the file is read,
    /// a `report` as each step of loading it starts, `end` before the result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_done_token: Option<ProgressToken>,
}

/// Which session `session/open` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionLocator<'a> {
    Path(&'a str),
    Id(&'a str),
}

impl SessionOpenParams {
    /// The session to open, or the `invalidParams` detail when the params name none or both.
    pub fn locator(&self) -> Result<SessionLocator<'_>, &'static str> {
        match (&self.path, &self.session_id) {
            (Some(path), None) => Ok(SessionLocator::Path(path)),
            (None, Some(id)) => Ok(SessionLocator::Id(id)),
            (None, None) => Err("give `path` or `sessionId`"),
            (Some(_), Some(_)) => Err("give `path` or `sessionId`, not both"),
        }
    }
}

/// An open session: the result of `session/create` and `session/open`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    /// The id every other session method takes.
    pub session_id: SessionId,
    /// The session file (it may not exist yet: nothing is written before the first entry).
    pub path: String,
    /// The header's `cwd`.
    pub cwd: String,
    /// The header's `title`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The current leaf; `null` for an empty session.
    pub leaf_id: Option<EntryId>,
    /// Entries in the file (all branches, header excluded).
    pub entry_count: u64,
    /// The file's version before any in-memory migration (1, 2 or 3).
    pub version: u32,
    /// Opened with `readOnly: true`: compactd never writes this file.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
    /// What loading found and worked around, one sentence each, e.g. `line 7: skipped: not
    /// JSON: …` (a malformed line, kept verbatim), `line 9: duplicate entry id 1a2b3c4d`, `line
    /// 12: torn last line ignored: …` (cut away by the next write), an in-memory migration, a
    /// project settings file that was skipped. Absent when there is nothing to report.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Params of `session/list`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionListParams {
    /// Only the sessions of this working directory. Default: every stored session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// At most this many sessions in the result (at least 1); a `nextCursor` says when more
    /// follow. Default: every session, in one result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub limit: Option<u32>,
    /// The `nextCursor` of the previous page (an opaque string): the sessions after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

/// Result of `session/list`, newest first (most recently modified; then by path, or by id in
/// the database).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionListResult {
    pub sessions: Vec<SessionListItem>,
    /// Present when more sessions follow this page: pass it as `cursor` to get them. A page
    /// is not a snapshot: a session written while a client pages moves to the front, and is
    /// not in the later pages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// One stored session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionListItem {
    pub session_id: SessionId,
    pub path: String,
    pub cwd: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The header's creation time (ISO 8601).
    pub created: String,
    /// The file's modification time (ISO 8601).
    pub modified: String,
    /// Whether this daemon has it open.
    pub open: bool,
}

/// Params of requests that name only a session: `session/close`, `session/tree`,
/// `session/usage`, `session/abortCompaction`, `session/abortBranchSummary`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionRef {
    pub session_id: SessionId,
}

/// Params of `session/append`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionAppendParams {
    pub session_id: SessionId,
    /// Appended in order, each the child of the previous; the first is the child of the leaf.
    pub entries: Vec<AppendEntry>,
    /// Fail with `leafMoved` unless this is the current leaf.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_leaf_id: Option<EntryId>,
    /// Run the auto-compaction check after appending (default `true`). It runs only when an
    /// appended message is an assistant message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_compaction: Option<bool>,
    /// Answer only once an auto-compaction this append started has finished (default
    /// `false`: answer at once with `action: "compacting"` or `"recovering"` and report the end by
    /// events). With `true` the result's `action` is final and `autoCompaction` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_for_compaction: Option<bool>,
}

/// One entry to append. The server assigns `id`, `parentId` and `timestamp`. Compaction,
/// branch summary and leaf entries are the server's own and cannot be appended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum AppendEntry {
    /// A `message` entry: any agent message (user, assistant, toolResult, bashExecution,
    /// custom roles ...). An assistant message's `usage`, `stopReason` and `errorMessage`
    /// drive auto-compaction.
    Message { message: WireMessage },
    /// A `thinking_level_change` entry.
    ThinkingLevelChange { thinking_level: String },
    /// A `model_change` entry: `model` is `provider/modelId`; `role` defaults to `default`.
    /// The model's context window sets the compaction threshold.
    ModelChange {
        model: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        role: Option<String>,
    },
    /// A `custom_message` entry: extension content that the LLM sees as a user message.
    CustomMessage {
        custom_type: String,
        /// A string or an array of text and image blocks.
        content: Value,
        /// Whether a UI shows it (default `true`).
        #[serde(default = "default_true")]
        display: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        details: Option<Value>,
    },
    /// A `custom` entry: extension state the LLM never sees.
    Custom {
        custom_type: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data: Option<Value>,
    },
    /// A `label` entry: sets (or, without `label`, clears) the label of `targetId`.
    Label {
        target_id: EntryId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label: Option<String>,
    },
    /// A `mode_change` entry.
    ModeChange {
        mode: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data: Option<Value>,
    },
    /// Any other entry, given as it is stored (with its file `type`, e.g.
    /// `ttsr_injection`), minus `id` and `parentId`. Kept byte for byte.
    Raw { entry: RawEntry },
}

/// An entry as it will be stored, without what the server assigns: `type` and the fields of
/// that type. `id`, `parentId` and `timestamp` may be given and are replaced.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RawEntry(pub Map<String, Value>);

impl JsonSchema for RawEntry {
    fn schema_name() -> Cow<'static, str> {
        "RawEntry".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "An entry to append as it will be stored (spec §1.2): `type` and \
                the fields of that type, unknown ones included. `id`, `parentId` and \
                `timestamp` are assigned by the server (given ones are replaced).",
            "type": "object",
            "required": ["type"],
            "properties": {
                "type": { "type": "string" },
                "id": { "type": "string" },
                "parentId": { "type": ["string", "null"] },
                "timestamp": { "type": "string" }
            },
            "additionalProperties": true
        })
    }
}

fn default_true() -> bool {
    true
}

/// Result of `session/append`: what was written and what the agent should do next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionAppendResult {
    /// The ids of the appended entries, in order.
    pub appended: Vec<EntryId>,
    /// The leaf after the append (the last appended entry, or a later one when
    /// `waitForCompaction` let a compaction and an auto-continue prompt follow).
    pub leaf_id: EntryId,
    /// The context size after the append: the latest valid usage plus estimates for later
    /// messages; `null` when unknown (no usage since the latest compaction).
    pub context_tokens: Option<u64>,
    /// The current model's context window.
    pub context_window: u64,
    /// Auto-compaction starts above this; `null` when auto-compaction is off.
    pub threshold_tokens: Option<u64>,
    /// What to do next.
    pub action: NextAction,
    /// The synthetic `Continue if you have next steps.` user entry, when `action` is
    /// `autoContinue`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_continue_entry_id: Option<EntryId>,
    /// Tool-output pruning done by the check, when it pruned anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pruned: Option<PruneSummary>,
    /// How the auto-compaction ended, when it ended before this answer (always with
    /// `waitForCompaction`; also for skips).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_compaction: Option<AutoCompactionOutcome>,
}

/// What an agent does after `session/append` (see docs/protocol.md, "The agent flow").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum NextAction {
    /// Nothing happened that changes the agent's plan: go on (run the next tool, wait for
    /// the user, ...).
    Continue,
    /// A threshold compaction is running. Do not call the model; wait for
    /// `session/autoCompactionFinished`, then for `session/autoContinue` if it comes.
    Compacting,
    /// The reply overflowed the context window and recovery compaction is running. Wait for
    /// `session/autoCompactionFinished`: if `willRetry`, call `session/context` and send the
    /// request again; otherwise surface `errorMessage`.
    Recovering,
    /// (`waitForCompaction`) The overflow was recovered: call `session/context` and send the
    /// request again (the failed reply is no longer in the context).
    Retry,
    /// (`waitForCompaction`) A threshold compaction finished and the synthetic continue
    /// prompt was appended: call `session/context` and run the model.
    AutoContinue,
    /// (`waitForCompaction`) The auto-compaction failed, was aborted or was skipped; see
    /// `autoCompaction`. After an overflow, surface the error to the user instead of
    /// retrying.
    Failed,
}

/// What a pruning pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PruneSummary {
    /// Tool results whose output was replaced by a notice.
    pub pruned_count: u64,
    /// Estimated tokens saved in the live context.
    pub tokens_saved: u64,
}

/// Params of `session/context`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionContextParams {
    pub session_id: SessionId,
    /// Count tokens with this tokenizer (`o200k`, `cl100k` or `chars4`). Default: the
    /// `tokenizer` setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<String>,
    /// Also return one count per message in `messageTokens` (default `false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_message: Option<bool>,
}

/// Result of `session/context`: what to send to the LLM next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionContextResult {
    /// The LLM-ready messages (roles `user`, `assistant`, `toolResult`), summaries included,
    /// after `convertToLlm` (spec §2.3). A reply that overflowed and was recovered from is
    /// left out.
    pub messages: Vec<WireMessage>,
    /// The tokenizer's count of `messages`.
    pub tokens: u64,
    /// Per-message counts, parallel to `messages`, when `perMessage` was asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_tokens: Option<Vec<u64>>,
    /// The current model's context window.
    pub context_window: u64,
    /// Auto-compaction starts above this; `null` when auto-compaction is off.
    pub threshold_tokens: Option<u64>,
    /// The leaf this context was built from.
    pub leaf_id: Option<EntryId>,
    /// The thinking level on the branch (`off` when never set).
    pub thinking_level: String,
    /// The model per role on the branch (`provider/modelId`).
    pub models: BTreeMap<String, String>,
    /// Full texts of truncated strings and images that the blob store could not give back
    /// (deleted, unreadable, a symlink): each such message holds the truncated text or the
    /// `blob:sha256:` reference instead. Absent when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing_blobs: Vec<MissingBlobInfo>,
}

/// A blob the context could not read back (`session/context` `missingBlobs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MissingBlobInfo {
    /// The entry that refers to it.
    pub entry_id: EntryId,
    /// The blob's SHA-256 (hex), when the reference names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob: Option<String>,
    /// A JSON pointer into the entry for a truncated string's full text; `image` for an image.
    pub pointer: String,
    /// Why it could not be read, naming the store file (e.g. `…/<hex>: not in the blob store`,
    /// `…/<hex>: is a symbolic link, not a regular file`).
    pub reason: String,
}

/// Params of `session/tree`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionTreeParams {
    pub session_id: SessionId,
    /// Include each node's whole entry (default `false`: a short preview only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_entries: Option<bool>,
}

/// Result of `session/tree`: every entry as a flat list of nodes (in file order), so deep
/// trees do not nest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionTreeResult {
    pub leaf_id: Option<EntryId>,
    /// Entries whose parent is `null` or missing.
    pub roots: Vec<EntryId>,
    pub nodes: Vec<TreeNode>,
}

/// One entry of the tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TreeNode {
    pub id: EntryId,
    pub parent_id: Option<EntryId>,
    /// The entry's file `type` (`message`, `compaction`, `branch_summary`, ...).
    #[serde(rename = "type")]
    pub entry_type: String,
    /// The message role, for `message` entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    pub timestamp: String,
    /// The first line of the entry's text, clipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<String>,
    /// The entry's label (the latest `label` entry targeting it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Child ids, oldest first.
    pub children: Vec<EntryId>,
    /// Whether it lies on the path from the root to the leaf.
    pub on_active_path: bool,
    /// The whole entry, with `includeEntries`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<WireEntry>,
}

/// Result of `session/usage`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionUsageResult {
    /// The latest valid usage plus estimates for later messages; `null` when unknown (a
    /// compaction and no usage since).
    pub context_tokens: Option<u64>,
    /// The current model's context window.
    pub context_window: u64,
    /// Auto-compaction starts above this; `null` when auto-compaction is off.
    pub threshold_tokens: Option<u64>,
    /// `contextTokens / contextWindow * 100`, when known.
    pub percent: Option<f64>,
    /// Whether a compaction (manual or auto) is running.
    pub is_compacting: bool,
    /// Whether a branch summary is being generated.
    pub is_summarizing_branch: bool,
    /// `compaction.enabled`.
    pub auto_compaction_enabled: bool,
    /// The background (speculative) compaction, while one runs or waits armed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub background_compaction: Option<BackgroundCompactionStatus>,
    /// Set while automatic compaction is paused for the session (thrash guard or circuit
    /// breaker); a manual `session/compact` or a `settings/update` resumes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_compaction_paused: Option<crate::protocol::AutoCompactionPauseReason>,
}

/// Params of `session/observeTurn`: an agent that writes its own session file (opened here,
/// often read-only) tells compactd about each turn, so that a background compaction can start
/// before the agent's threshold. Absent fields are taken from the session.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObserveTurnParams {
    pub session_id: SessionId,
    /// The agent's leaf after the turn. Default: the session's leaf, once the entries the
    /// agent wrote to the file since are read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaf_id: Option<EntryId>,
    /// The context size the turn's reply reported (its usage's total). Default: the usage of
    /// the last reply on the branch after the latest compaction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_tokens: Option<u64>,
    /// The agent's model's context window. Default: compactd's for the session's model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// The agent's compaction threshold. Default: compactd's for the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold_tokens: Option<u64>,
}

/// Result of `session/observeTurn`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObserveTurnResult {
    /// The leaf the turn was measured at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaf_id: Option<EntryId>,
    /// The context size used; `null` when unknown (no usage since the latest compaction).
    pub context_tokens: Option<u64>,
    pub context_window: u64,
    /// The threshold used; `null` when there is none (compaction off, unknown window).
    pub threshold_tokens: Option<u64>,
    /// This turn started a background compaction (`session/backgroundCompaction` `started`
    /// follows).
    pub started: bool,
    /// The session's background compaction, while one runs or waits armed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub background_compaction: Option<BackgroundCompactionStatus>,
}

/// Where a background compaction stands (`session/usage`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackgroundCompactionStatus {
    /// The id its `session/backgroundCompaction` events carry.
    pub operation_id: crate::protocol::common::OperationId,
    /// The result is ready: the append that crosses the threshold writes it at once.
    pub armed: bool,
    /// The step it is at while it runs: `preparing`, `summarizing`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Which summarizer request of the history summary it is at, and how many there are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunks: Option<u64>,
    /// When it started, in milliseconds since the epoch.
    pub started_at_ms: i64,
}

/// Params of `session/fork`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionForkParams {
    /// The session to copy; it is only read.
    pub session_id: SessionId,
    /// Keep only the root→entry branch, with the labels on it (the reference's
    /// `createBranchedSession`). Absent: copy every entry (`fork`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry_id: Option<EntryId>,
    /// Where to write the new session file: a `.jsonl` path that does not exist yet. Default:
    /// the data directory, by the source's cwd.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The new header's title. Default: the source's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

/// Params of `session/setLabel`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SetLabelParams {
    pub session_id: SessionId,
    /// The entry to label.
    pub target_id: EntryId,
    /// The label; absent or empty clears it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_leaf_id: Option<EntryId>,
}

/// Result of `session/setLabel` (a `label` entry is appended at the leaf).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SetLabelResult {
    pub entry_id: EntryId,
    pub leaf_id: EntryId,
}
