//! The progress ledger on the wire: `session/ledger`, `session/pin`, `session/unpin`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{EntryId, SessionId};

/// Result of `session/ledger` (and `compactd ledger --json`): where the agent stands on the
/// session's branch, derived from the entries; the same session gives the same bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionLedgerResult {
    /// Every user request on the branch, oldest first.
    pub requests: Vec<LedgerRequest>,
    pub files: LedgerFiles,
    /// Failed commands and tool calls, oldest first; one per command, its latest failure.
    pub errors: Vec<LedgerError>,
    /// Pinned facts, in pinning order.
    pub pins: Vec<LedgerPin>,
    /// The latest plan the assistant stated since the last request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_step: Option<String>,
}

/// A user request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LedgerRequest {
    pub entry_id: EntryId,
    /// Verbatim for the current request; a one-line gist for the others.
    pub text: String,
    pub status: RequestStatus,
}

/// Where a request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum RequestStatus {
    /// The newest request, still being worked on.
    Current,
    /// The assistant ended its turn with an answer after it.
    Answered,
    /// A newer request came before the assistant answered it.
    Superseded,
}

/// Files read and modified on the whole branch, sorted by path; a file ever written or edited
/// is in `modified` only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LedgerFiles {
    pub read: Vec<LedgerFile>,
    pub modified: Vec<LedgerFile>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LedgerFile {
    pub path: String,
    /// The last operation on the file.
    pub last_op: FileOp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum FileOp {
    Read,
    Write,
    Edit,
}

/// A failed command or tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LedgerError {
    /// The failing tool result or command entry.
    pub entry_id: EntryId,
    /// What failed: `bash: cargo build`, `edit: src/a.rs`.
    pub command: String,
    /// The key error line.
    pub text: String,
    /// A later run of the same command succeeded.
    pub resolved: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LedgerPin {
    pub pin_id: EntryId,
    pub text: String,
}

/// Params of `session/pin`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionPinParams {
    pub session_id: SessionId,
    /// The fact to carry verbatim through every later compaction until unpinned.
    pub text: String,
}

/// Result of `session/pin` (a `custom` entry of type `compactd.pin` is appended at the leaf).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionPinResult {
    /// The pin's id: the id of its entry.
    pub pin_id: EntryId,
    pub leaf_id: EntryId,
}

/// Params of `session/unpin`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionUnpinParams {
    pub session_id: SessionId,
    /// A pin on the session's branch.
    pub pin_id: EntryId,
}

/// Result of `session/unpin` (a `custom` entry of type `compactd.unpin` is appended).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionUnpinResult {
    pub entry_id: EntryId,
    pub leaf_id: EntryId,
}
