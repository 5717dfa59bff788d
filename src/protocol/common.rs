//! Values shared by many messages: ids, progress tokens, entries and messages as JSON.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A session id: 16 lowercase hex characters for sessions compactd created, any string for
/// files written by other tools.
pub type SessionId = String;

/// An entry id (8 hex characters in files written by compactd and the reference agent).
pub type EntryId = String;

/// Identifies one compaction run in `session/compaction*` events, so deltas and the final
/// event can be matched with their start.
pub type OperationId = String;

/// An LSP progress token: chosen by the client (`workDoneToken` in params) or by the server
/// (`window/workDoneProgress/create`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ProgressToken {
    Number(i64),
    String(String),
}

/// A session entry exactly as it is stored in the session file (one JSONL line): `type`,
/// `id`, `parentId`, `timestamp` and the fields of its type (spec §1.2), unknown fields
/// included.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct WireEntry(pub Map<String, Value>);

impl JsonSchema for WireEntry {
    fn schema_name() -> Cow<'static, str> {
        "WireEntry".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A session entry as stored in the session file (spec §1.2): `type`, \
                `id`, `parentId`, `timestamp` and the fields of its type. Unknown types and \
                fields are passed through unchanged.",
            "type": "object",
            "required": ["type", "id"],
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

/// An agent message as JSON (spec §2): `role` plus the fields of that role, e.g.
/// `{"role":"user","content":"hi","timestamp":1767225600000}` or an assistant message with
/// `content`, `usage`, `stopReason`, `provider` and `model`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct WireMessage(pub Map<String, Value>);

impl WireMessage {
    /// The message's `role`, when it has a string one.
    pub fn role(&self) -> Option<&str> {
        self.0.get("role")?.as_str()
    }
}

impl JsonSchema for WireMessage {
    fn schema_name() -> Cow<'static, str> {
        "WireMessage".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "An agent message (spec §2): `role` (`user`, `assistant`, \
                `toolResult`, `bashExecution`, `custom`, `branchSummary`, \
                `compactionSummary`, ...) and the fields of that role. Assistant messages \
                carry `usage`, `stopReason`, `errorMessage`, `provider` and `model`, which \
                drive auto-compaction. Unknown roles and fields are passed through unchanged.",
            "type": "object",
            "required": ["role"],
            "properties": {
                "role": { "type": "string" },
                "timestamp": { "type": "integer" }
            },
            "additionalProperties": true
        })
    }
}

/// An empty object, the result of requests that only acknowledge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub struct Empty {}

/// Files the summarised history touched and what the retention check added, as recorded in a
/// compaction or branch summary entry (`details`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SummaryDetails {
    /// Files read but not modified.
    #[serde(default)]
    pub read_files: Vec<String>,
    /// Files written or edited.
    #[serde(default)]
    pub modified_files: Vec<String>,
    /// Facts that the retention check found missing from the model's summary and appended to
    /// it (file paths, error strings, the user's constraints, the last request). Absent when
    /// nothing had to be added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retained_facts: Option<Vec<RetainedFact>>,
    /// Which summarizer wrote each summary part and why the ones tried before it did not
    /// (a fallback is never silent). Absent when no summarizer ran (a hook supplied it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summarizers: Option<Vec<SummarizerReport>>,
    /// `true` when the summary or short summary is the user's text
    /// (`session/commitCompaction` with `summary` or `shortSummary`, `compactd compact
    /// --summary-file`). Absent for a generated one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edited: Option<bool>,
    /// Whatever else the entry's `details` hold: `reason` (why the compaction ran), a hook's
    /// own fields.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// One fact the retention check put back into a summary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetainedFact {
    /// `lastUserRequest`, `pendingQuestion`, `modifiedFile`, `error` or `userConstraint`.
    pub kind: String,
    /// The fact as it was added to the summary.
    pub text: String,
}

/// Which summarizer wrote one summary part, and why each summarizer tried before it gave up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SummarizerReport {
    /// The summary part: `history`, `turnPrefix`, `short` or `branch`.
    pub part: String,
    /// The summarizer that wrote it: `provider/model`, `client`, `remote` or `extractive`
    /// (the offline last rung).
    pub summarizer: String,
    /// What the answer checks found (`checks passed`, or what was cut); absent for the
    /// extractive rung, whose output is not checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<String>,
    /// Requests the part took on that summarizer (more than one when its input was split).
    pub chunks: u64,
    /// The summarizers tried before, in order, each with why it gave up; empty when the first
    /// one wrote the part.
    #[serde(default)]
    pub failures: Vec<SummarizerFailure>,
}

/// A summarizer that did not write a summary part.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SummarizerFailure {
    pub summarizer: String,
    /// Why, for a person: the server's error (`HTTP 500 …`), a timeout, an answer the checks
    /// rejected (`answer rejected: …`), a summarizer skipped after failing the same way
    /// before.
    pub reason: String,
}
