//! The protocol's typed errors: one stable numeric code and one `data.kind` string each.
//!
//! Codes -32010 to -32026 are compactd's own; kinds that have a standard JSON-RPC or LSP code
//! use it (`invalidParams` -32602, `notInitialized` -32002, `cancelled` -32800). Messages are
//! the reference agent's strings where it has one (spec §9), since clients match on them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::rpc::{RpcError, TransportErrorKind, error_code};

/// Every typed error a compactd method can return, besides the transport's own
/// (parse errors, unknown methods, overload, shutdown).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ErrorKind {
    /// No open or stored session has that id or path. `data.sessionId` or `data.path`.
    SessionNotFound,
    /// An entry id (target, first kept entry, label target) is not in the session.
    /// `data.entryId`.
    EntryNotFound,
    /// The leaf already is a compaction entry: there is nothing new to summarise.
    AlreadyCompacted,
    /// The branch is empty.
    NothingToCompact,
    /// Another compaction of this session is running (e.g. an auto-compaction started by an
    /// append); wait for its `session/compactionFinished`, or abort it.
    CompactionInProgress,
    /// The operation was cancelled: `$/cancelRequest`, an abort method, a progress cancel,
    /// or a hook answering `{cancel: true}`.
    Cancelled,
    /// Every summarizer failed. The message carries the last failure's text.
    SummarizationFailed,
    /// `expectedLeafId` does not match the session's leaf. `data.expectedLeafId`,
    /// `data.leafId`.
    LeafMoved,
    /// The params are malformed or contradictory. `data.path` names the field when known.
    InvalidParams,
    /// A request other than `initialize` arrived before initialization finished.
    NotInitialized,
    /// The session file is not a session (bad header, unsupported version, not a regular
    /// file). `data.path`. An operating-system failure to read or write it is [`ErrorKind::IoError`].
    SessionFileInvalid,
    /// A compaction finished but the context is still above the threshold (e.g. the kept
    /// recent messages alone exceed it); auto-compaction will not loop on it. `data.tokensAfter`,
    /// `data.thresholdTokens`.
    CannotGetUnderThreshold,
    /// A settings file, `initializationOptions.settings` or a `settings/update` patch is
    /// invalid. `data.key` names the offending key.
    SettingsInvalid,
    /// A path (session file, cwd) lies outside the directories compactd may write to.
    /// `data.path`.
    PathOutsideAllowed,
    /// The session was opened with `readOnly: true` (its file belongs to another program), and
    /// the request would write it.
    SessionReadOnly,
    /// The session database (`storage.backend = "postgres"`) could not be reached or failed
    /// (down, restarting, timed out). Nothing was written; retry once it is back.
    StorageUnavailable,
    /// Reading or writing a file failed in the operating system: no space (`ENOSPC`, `EDQUOT`),
    /// past the file-size limit (`EFBIG`), permission (`EACCES`, `EPERM`, `EROFS`), a disk
    /// error (`EIO`). `data.path`, `data.osError` (the errno's name, e.g. `"EFBIG"`, when
    /// known), `data.errno` (its number). Nothing of the failed write is left in the file
    /// (an append is cut back, a rewrite's temp file is removed); retry once it is fixed.
    IoError,
    /// `session/readEntry`: a full text the entry refers to (`blob:sha256:<hex>` in its
    /// `compactdFullText`) is not in the blob store, so the entry cannot be read back whole.
    /// `data.entryId`, `data.blob` (the hex name), and the message names the store.
    BlobMissing,
    /// `session/commitCompaction`: no preview has that `previewId`: it was never made, it
    /// expired (a session keeps its 8 latest previews, each for 30 minutes), it was committed
    /// already, or its session was closed. Preview again. `data.previewId`.
    PreviewNotFound,
    /// `session/undoCompaction`: the branch has no compaction to undo, or `entryId` names an
    /// entry that is not on the session's branch or is neither a compaction nor an undo (a
    /// `compactd.undo` entry). The message says which. Nothing was written.
    NothingToUndo,
}

impl ErrorKind {
    /// Every kind, in code order.
    pub const ALL: [ErrorKind; 20] = [
        ErrorKind::SessionNotFound,
        ErrorKind::EntryNotFound,
        ErrorKind::AlreadyCompacted,
        ErrorKind::NothingToCompact,
        ErrorKind::CompactionInProgress,
        ErrorKind::SummarizationFailed,
        ErrorKind::LeafMoved,
        ErrorKind::SessionFileInvalid,
        ErrorKind::CannotGetUnderThreshold,
        ErrorKind::SettingsInvalid,
        ErrorKind::PathOutsideAllowed,
        ErrorKind::SessionReadOnly,
        ErrorKind::StorageUnavailable,
        ErrorKind::IoError,
        ErrorKind::BlobMissing,
        ErrorKind::PreviewNotFound,
        ErrorKind::NothingToUndo,
        ErrorKind::InvalidParams,
        ErrorKind::NotInitialized,
        ErrorKind::Cancelled,
    ];

    /// The JSON-RPC error code; stable across versions.
    pub const fn code(self) -> i64 {
        match self {
            ErrorKind::SessionNotFound => -32010,
            ErrorKind::EntryNotFound => -32011,
            ErrorKind::AlreadyCompacted => -32012,
            ErrorKind::NothingToCompact => -32013,
            ErrorKind::CompactionInProgress => -32014,
            ErrorKind::SummarizationFailed => -32015,
            ErrorKind::LeafMoved => -32016,
            ErrorKind::SessionFileInvalid => -32017,
            ErrorKind::CannotGetUnderThreshold => -32018,
            ErrorKind::SettingsInvalid => -32019,
            ErrorKind::PathOutsideAllowed => -32020,
            ErrorKind::SessionReadOnly => -32021,
            ErrorKind::StorageUnavailable => -32022,
            ErrorKind::IoError => -32023,
            ErrorKind::BlobMissing => -32024,
            ErrorKind::PreviewNotFound => -32025,
            ErrorKind::NothingToUndo => -32026,
            ErrorKind::InvalidParams => error_code::INVALID_PARAMS,
            ErrorKind::NotInitialized => error_code::NOT_INITIALIZED,
            ErrorKind::Cancelled => error_code::REQUEST_CANCELLED,
        }
    }

    /// The `data.kind` string.
    pub const fn name(self) -> &'static str {
        match self {
            ErrorKind::SessionNotFound => "sessionNotFound",
            ErrorKind::EntryNotFound => "entryNotFound",
            ErrorKind::AlreadyCompacted => "alreadyCompacted",
            ErrorKind::NothingToCompact => "nothingToCompact",
            ErrorKind::CompactionInProgress => "compactionInProgress",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::SummarizationFailed => "summarizationFailed",
            ErrorKind::LeafMoved => "leafMoved",
            ErrorKind::InvalidParams => "invalidParams",
            ErrorKind::NotInitialized => "notInitialized",
            ErrorKind::SessionFileInvalid => "sessionFileInvalid",
            ErrorKind::CannotGetUnderThreshold => "cannotGetUnderThreshold",
            ErrorKind::SettingsInvalid => "settingsInvalid",
            ErrorKind::PathOutsideAllowed => "pathOutsideAllowed",
            ErrorKind::SessionReadOnly => "sessionReadOnly",
            ErrorKind::StorageUnavailable => "storageUnavailable",
            ErrorKind::IoError => "ioError",
            ErrorKind::BlobMissing => "blobMissing",
            ErrorKind::PreviewNotFound => "previewNotFound",
            ErrorKind::NothingToUndo => "nothingToUndo",
        }
    }

    /// The kind named by a `data.kind` string.
    pub fn from_name(name: &str) -> Option<ErrorKind> {
        ErrorKind::ALL.into_iter().find(|kind| kind.name() == name)
    }

    /// The message used when the caller has nothing more specific; the reference agent's
    /// string where it has one.
    pub const fn default_message(self) -> &'static str {
        match self {
            ErrorKind::SessionNotFound => "Session not found",
            ErrorKind::EntryNotFound => "Entry not found",
            ErrorKind::AlreadyCompacted => "Already compacted",
            ErrorKind::NothingToCompact => "Nothing to compact (session too small)",
            ErrorKind::CompactionInProgress => "Compaction already in progress",
            ErrorKind::Cancelled => "Compaction cancelled",
            ErrorKind::SummarizationFailed => "Summarization failed",
            ErrorKind::LeafMoved => "The session's leaf has moved",
            ErrorKind::InvalidParams => "Invalid params",
            ErrorKind::NotInitialized => "Not initialized",
            ErrorKind::SessionFileInvalid => "Invalid session file",
            ErrorKind::CannotGetUnderThreshold => {
                "Compaction cannot bring the context under the threshold"
            }
            ErrorKind::SettingsInvalid => "Invalid settings",
            ErrorKind::PathOutsideAllowed => "Path outside the allowed directories",
            ErrorKind::SessionReadOnly => "The session is open read-only",
            ErrorKind::StorageUnavailable => "The session database is unavailable",
            ErrorKind::IoError => "A file could not be read or written",
            ErrorKind::BlobMissing => "A full text is missing from the blob store",
            ErrorKind::PreviewNotFound => "No preview has that id",
            ErrorKind::NothingToUndo => "Nothing to undo",
        }
    }

    /// The error with its default message.
    pub fn error(self) -> RpcError {
        self.with_message(self.default_message())
    }

    /// The error with a specific message (e.g. `Summarization failed: <provider error>`).
    pub fn with_message(self, message: impl Into<String>) -> RpcError {
        RpcError::new(self.code(), message).with_kind(self.name())
    }

    /// `Entry <id> not found`, the reference's string, with `data.entryId`.
    pub fn entry_not_found(entry_id: &str) -> RpcError {
        ErrorKind::EntryNotFound
            .with_message(format!("Entry {entry_id} not found"))
            .with_data_field("entryId", entry_id)
    }

    /// `Session <id> not found`, with `data.sessionId`.
    pub fn session_not_found(session_id: &str) -> RpcError {
        ErrorKind::SessionNotFound
            .with_message(format!("Session {session_id} not found"))
            .with_data_field("sessionId", session_id)
    }

    /// The leaf moved: names both leaves so the client can refresh and decide.
    pub fn leaf_moved(expected_leaf_id: &str, leaf_id: Option<&str>) -> RpcError {
        let current = leaf_id.unwrap_or("none (empty branch)");
        ErrorKind::LeafMoved
            .with_message(format!(
                "The session's leaf has moved: expected {expected_leaf_id}, found {current}"
            ))
            .with_data_field("expectedLeafId", expected_leaf_id)
            .with_data_field("leafId", leaf_id)
    }

    /// The kind of an error received over the wire, from its `data.kind`.
    pub fn of(error: &RpcError) -> Option<ErrorKind> {
        error.kind().and_then(ErrorKind::from_name)
    }
}

/// Every `data.kind` string an error can carry: the protocol's [`ErrorKind`]s, then the
/// transport's [`TransportErrorKind`]s.
pub fn all_kind_names() -> Vec<&'static str> {
    ErrorKind::ALL
        .iter()
        .map(|kind| kind.name())
        .chain(TransportErrorKind::ALL.iter().map(|kind| kind.name()))
        .collect()
}

/// A JSON-RPC error object as compactd sends it (`error` in a response).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResponseError {
    /// The JSON-RPC code: one per kind (see `errors`), standard codes for the standard
    /// failures.
    pub code: i64,
    /// A message a person can act on.
    pub message: String,
    /// What a program matches on; present on every error compactd sends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<ErrorData>,
}

/// The `data` object of an error: its `kind`, and the fields that kind names.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErrorData {
    /// The error's kind (see `errors` in `protocol.schema.json`): match on it, not on the
    /// message.
    #[schemars(schema_with = "kind_name_schema")]
    pub kind: String,
    /// `sessionNotFound`: the session id asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// `entryNotFound`: the entry id asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry_id: Option<String>,
    /// `leafMoved`: the leaf the request expected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_leaf_id: Option<String>,
    /// `leafMoved`: the session's leaf (`null` for an empty branch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaf_id: Option<Option<String>>,
    /// The file (`sessionNotFound`, `sessionFileInvalid`, `pathOutsideAllowed`, `ioError`), or,
    /// for `invalidParams`, the params field at fault (e.g. `entries[0].message`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// `ioError`: the operating system's error number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno: Option<i64>,
    /// `ioError`: the error number's name (`ENOSPC`, `EACCES`, `EFBIG`, …); `null` when it has
    /// none compactd knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os_error: Option<Option<String>>,
    /// `cannotGetUnderThreshold`: the context size the compaction reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_after: Option<u64>,
    /// `cannotGetUnderThreshold`: the threshold it had to get under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold_tokens: Option<u64>,
    /// `settingsInvalid`: the offending key, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// `blobMissing`: the missing blob's name (hex SHA-256, or the reference as written when
    /// it is not a blob name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob: Option<String>,
}

fn kind_name_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "enum": all_kind_names(),
    })
}

/// An error as carried inside an event (`session/compactionFinished.error`): the same
/// fields as a JSON-RPC error, with the kind lifted out of `data`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErrorInfo {
    /// The JSON-RPC code the same failure has as a response.
    pub code: i64,
    /// The `data.kind` string, when the failure is typed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// A message a person can act on.
    pub message: String,
}

impl From<&RpcError> for ErrorInfo {
    fn from(error: &RpcError) -> Self {
        ErrorInfo {
            code: error.code,
            kind: error.kind().map(str::to_owned),
            message: error.message.clone(),
        }
    }
}
