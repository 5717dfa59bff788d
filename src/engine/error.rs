//! The engine's typed errors. Each variant has an [`EngineErrorKind`], which is what events
//! carry; the daemon maps both to the protocol's error kinds in one place
//! (`server/to_proto.rs`), so a kind never travels as a string.

use super::SessionError;
use crate::session::{RecallError, UndoError};
use crate::summarize::CandidateError;

/// Why an engine operation failed. Messages are the reference's strings where the spec gives
/// them (clients match on them).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("Session {0} not found")]
    SessionNotFound(String),
    #[error("Entry {0} not found")]
    EntryNotFound(String),
    #[error("Already compacted")]
    AlreadyCompacted,
    #[error("Nothing to compact (session too small)")]
    NothingToCompact,
    #[error("A compaction is already running for this session")]
    CompactionInProgress,
    /// The message is the operation's own (`Compaction cancelled`, `Branch summarization
    /// cancelled`).
    #[error("{0}")]
    Cancelled(String),
    /// The full message, e.g. `Summarization failed: …`.
    #[error("{0}")]
    SummarizationFailed(String),
    #[error("The session's leaf moved (expected {}, found {})", show(.expected), show(.actual))]
    LeafMoved {
        expected: Option<String>,
        actual: Option<String>,
    },
    #[error("{0}")]
    InvalidParams(String),
    #[error(transparent)]
    SessionFile(#[from] SessionError),
    #[error(
        "Context is still {tokens} tokens after compaction, above the threshold of {threshold}"
    )]
    CannotGetUnderThreshold { tokens: u64, threshold: u64 },
    #[error("Invalid settings: {0}")]
    Settings(String),
    #[error("Path outside the allowed directories: {0}")]
    PathOutsideAllowed(String),
    /// A write was asked of a session opened read-only (the session id).
    #[error("Session {0} is open read-only")]
    ReadOnly(String),
    /// `session/commitCompaction`: no preview has that id (never made, expired, committed
    /// already, or its session was closed).
    #[error(
        "Preview {0} not found: it expired, was committed already, or its session was closed; preview again"
    )]
    PreviewNotFound(String),
    /// A full text an entry refers to is not in the blob store.
    /// `session/undoCompaction`: no compaction on the branch, or `entryId` names an entry
    /// that is off the branch or neither a compaction nor an undo.
    #[error("{0}")]
    NothingToUndo(String),
    #[error("{message}")]
    BlobMissing {
        message: String,
        entry_id: String,
        blob: String,
    },
}

impl From<RecallError> for EngineError {
    fn from(e: RecallError) -> Self {
        match e {
            RecallError::EntryNotFound(id) => EngineError::EntryNotFound(id),
            RecallError::BlobMissing {
                ref entry_id,
                ref blob,
                ..
            } => EngineError::BlobMissing {
                entry_id: entry_id.clone(),
                blob: blob.clone(),
                message: e.to_string(),
            },
            other => EngineError::InvalidParams(other.to_string()),
        }
    }
}

impl From<UndoError> for EngineError {
    fn from(e: UndoError) -> Self {
        match e {
            UndoError::EntryNotFound(id) => EngineError::EntryNotFound(id),
            other => EngineError::NothingToUndo(other.to_string()),
        }
    }
}

impl From<CandidateError> for EngineError {
    fn from(e: CandidateError) -> Self {
        match e {
            CandidateError::Settings(message) => EngineError::Settings(message),
            CandidateError::Unavailable(message) => EngineError::InvalidParams(message),
        }
    }
}

fn show(id: &Option<String>) -> &str {
    id.as_deref().unwrap_or("none")
}

impl EngineError {
    /// A store error of a lookup by entry id: `Entry <id> not found` becomes the typed
    /// [`EngineError::EntryNotFound`].
    pub fn from_lookup(e: SessionError) -> Self {
        match e {
            SessionError::EntryNotFound(id) => EngineError::EntryNotFound(id),
            other => EngineError::SessionFile(other),
        }
    }

    /// A store error of a write that expected a leaf: [`SessionError::LeafMoved`] becomes
    /// the typed [`EngineError::LeafMoved`].
    pub fn from_write(e: SessionError) -> Self {
        match e {
            SessionError::LeafMoved { expected, actual } => {
                EngineError::LeafMoved { expected, actual }
            }
            other => EngineError::SessionFile(other),
        }
    }

    /// The compaction-cancelled error with the reference's text.
    pub fn compaction_cancelled() -> Self {
        EngineError::Cancelled("Compaction cancelled".into())
    }

    /// What kind of failure this is, without its details.
    pub fn kind(&self) -> EngineErrorKind {
        match self {
            EngineError::SessionNotFound(_) => EngineErrorKind::SessionNotFound,
            EngineError::EntryNotFound(_) => EngineErrorKind::EntryNotFound,
            EngineError::AlreadyCompacted => EngineErrorKind::AlreadyCompacted,
            EngineError::NothingToCompact => EngineErrorKind::NothingToCompact,
            EngineError::CompactionInProgress => EngineErrorKind::CompactionInProgress,
            EngineError::Cancelled(_) => EngineErrorKind::Cancelled,
            EngineError::SummarizationFailed(_) => EngineErrorKind::SummarizationFailed,
            EngineError::LeafMoved { .. } => EngineErrorKind::LeafMoved,
            EngineError::InvalidParams(_) => EngineErrorKind::InvalidParams,
            EngineError::SessionFile(SessionError::Storage(_)) => EngineErrorKind::Storage,
            EngineError::SessionFile(SessionError::NotFound { .. }) => {
                EngineErrorKind::SessionNotFound
            }
            EngineError::SessionFile(SessionError::Io { source, .. })
                if source.kind() != std::io::ErrorKind::InvalidData =>
            {
                EngineErrorKind::Io
            }
            EngineError::SessionFile(_) => EngineErrorKind::SessionFile,
            EngineError::CannotGetUnderThreshold { .. } => EngineErrorKind::CannotGetUnderThreshold,
            EngineError::Settings(_) => EngineErrorKind::Settings,
            EngineError::PathOutsideAllowed(_) => EngineErrorKind::PathOutsideAllowed,
            EngineError::ReadOnly(_) => EngineErrorKind::ReadOnly,
            EngineError::BlobMissing { .. } => EngineErrorKind::BlobMissing,
            EngineError::PreviewNotFound(_) => EngineErrorKind::PreviewNotFound,
            EngineError::NothingToUndo(_) => EngineErrorKind::NothingToUndo,
        }
    }
}

/// The kind of an [`EngineError`], one per variant, without its details.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EngineErrorKind {
    SessionNotFound,
    EntryNotFound,
    AlreadyCompacted,
    NothingToCompact,
    CompactionInProgress,
    Cancelled,
    SummarizationFailed,
    LeafMoved,
    InvalidParams,
    SessionFile,
    /// The session database failed (unreachable, restarting, timed out).
    Storage,
    /// Reading or writing the session file failed in the operating system (ENOSPC, EFBIG,
    /// EACCES, EIO, ...).
    Io,
    CannotGetUnderThreshold,
    Settings,
    PathOutsideAllowed,
    ReadOnly,
    /// A full text is missing from the blob store.
    BlobMissing,
    /// No kept preview has that id.
    PreviewNotFound,
    /// Nothing to undo at the entry asked for (or no compaction on the branch).
    NothingToUndo,
}
