//! What operations report while they run ([`OperationObserver`]) and the session-level events
//! the registry forwards to clients ([`EngineEvent`] through an [`EventSink`]).

use std::sync::Arc;

use crate::session::Entry;

use super::{CompactOutcome, EngineError, EngineErrorKind};
use crate::summarize::{SummaryObserver, SummaryReport};

/// A fresh operation id with `prefix` (`compact-…`, `auto-…`), as its events carry it.
pub(crate) fn new_operation_id(prefix: &str) -> String {
    format!("{prefix}-{}", crate::session::ids::new_session_id())
}

/// Why a compaction runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompactReason {
    /// Asked for by the user or client.
    Manual,
    /// The context crossed the threshold.
    Threshold,
    /// The model reported a context overflow.
    Overflow,
}

impl CompactReason {
    /// The protocol's name of the reason.
    pub fn name(self) -> &'static str {
        match self {
            CompactReason::Manual => "manual",
            CompactReason::Threshold => "threshold",
            CompactReason::Overflow => "overflow",
        }
    }
}

/// A step of a running operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    Pruning,
    Preparing,
    Summarizing,
    Persisting,
}

impl Phase {
    /// A stable lower-case name, for events and progress lines.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Pruning => "pruning",
            Phase::Preparing => "preparing",
            Phase::Summarizing => "summarizing",
            Phase::Persisting => "persisting",
        }
    }
}

/// What an operation reports while it runs: its phases, and its summaries as they are
/// written ([`SummaryObserver`]); the daemon turns it into `$/progress` and session events, the
/// CLI into a progress line on stderr.
pub trait OperationObserver: SummaryObserver {
    /// A new phase started; `percentage` when the operation can tell.
    fn phase(&self, phase: Phase, message: &str, percentage: Option<u32>);
}

/// Why an operation failed, as events carry it: the protocol error kind (`data.kind`, see
/// [`EngineError::kind`]) and the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperationError {
    pub kind: EngineErrorKind,
    pub message: String,
}

impl From<&EngineError> for OperationError {
    fn from(error: &EngineError) -> Self {
        OperationError {
            kind: error.kind(),
            message: error.to_string(),
        }
    }
}

/// What an auto-compaction run did: what `AutoCompactionFinished` carries and an append
/// answers.
#[derive(Debug, Clone)]
pub struct AutoResult {
    pub reason: CompactReason,
    /// Shared by the end event and the append's answer, so neither copies it: a huge
    /// session's outcome holds megabytes of ledger (issue 35 item 7).
    pub outcome: Option<Arc<CompactOutcome>>,
    pub aborted: bool,
    pub will_retry: bool,
    /// Nothing to compact (or another compaction was running): not a failure.
    pub skipped: bool,
    /// `Context overflow recovery failed: …` or `Auto-compaction failed: …`.
    pub error_message: Option<String>,
    /// The typed failure behind `error_message`; `None` when a recovery was given up without
    /// trying (the message says why).
    pub error_kind: Option<EngineErrorKind>,
    /// The synthetic `Continue if you have next steps.` entry, when one was appended.
    pub continue_entry_id: Option<String>,
}

impl AutoResult {
    pub(crate) fn new(reason: CompactReason) -> Self {
        AutoResult {
            reason,
            outcome: None,
            aborted: false,
            will_retry: false,
            skipped: false,
            error_message: None,
            error_kind: None,
            continue_entry_id: None,
        }
    }
}

/// Session-level events. The registry holds one [`EventSink`]; the daemon forwards to clients.
///
/// Every compaction, manual or automatic, is bracketed by `CompactionStarted` and
/// `CompactionFinished` with the same operation id; an automatic one is also bracketed by
/// `AutoCompactionStarted` / `AutoCompactionFinished` (outside the former pair), again with the
/// same id.
#[derive(Debug, Clone)]
pub enum EngineEvent {
    EntriesAppended {
        session_id: String,
        entries: Vec<Entry>,
    },
    /// Entries another process (another daemon on the session database) added to an open
    /// session, read as soon as the database said so; `leaf_id` is the leaf after them.
    ExternalEntries {
        session_id: String,
        entries: Vec<Entry>,
        leaf_id: String,
    },
    CompactionStarted {
        session_id: String,
        operation_id: String,
        reason: CompactReason,
    },
    CompactionFinished {
        session_id: String,
        operation_id: String,
        /// Shared with the compaction's caller, which gets it back once the event is handled:
        /// a huge session's outcome holds megabytes of ledger (issue 35 item 7).
        outcome: Option<Arc<CompactOutcome>>,
        aborted: bool,
        /// Set when the compaction failed (not when it was cancelled: see `aborted`).
        error: Option<OperationError>,
    },
    AutoCompactionStarted {
        session_id: String,
        operation_id: String,
        reason: CompactReason,
    },
    AutoCompactionFinished {
        session_id: String,
        operation_id: String,
        /// What the run did (`continue_entry_id` is not set yet: the prompt follows).
        result: Box<AutoResult>,
    },
    TreeNavigated {
        session_id: String,
        new_leaf_id: Option<String>,
        old_leaf_id: Option<String>,
        summary_entry: Option<Box<Entry>>,
        from_extension: Option<bool>,
        /// Which summarizer wrote the summary and why earlier rungs gave up (`None` without
        /// a summary written by compactd).
        report: Option<Box<SummaryReport>>,
    },
    AutoContinue {
        session_id: String,
        prompt: String,
        entry_id: String,
    },
    /// A background (speculative) compaction changed state.
    BackgroundCompaction {
        session_id: String,
        operation_id: String,
        state: BackgroundState,
        /// Why it was discarded (with [`BackgroundState::Discarded`]).
        reason: Option<DiscardReason>,
        /// What went wrong, when it was discarded because it failed.
        message: Option<String>,
    },
    /// Automatic compaction stopped for the session until the user acts (a manual compaction
    /// or a settings change resumes it).
    AutoCompactionPaused {
        session_id: String,
        reason: PauseReason,
        /// How many times in a row it happened.
        count: u32,
    },
}

/// Where a background compaction stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackgroundState {
    /// It started on a snapshot of the branch (a reply entered the lead band).
    Started,
    /// Its result is ready, waiting for a reply to cross the threshold.
    Armed,
    /// Its result was written (at the crossing, or by a compaction that used it).
    Committed,
    /// Its result was handed out as a preview; the client or the agent writes it, or not.
    Previewed,
    /// It was dropped without writing anything.
    Discarded,
}

impl BackgroundState {
    pub fn name(self) -> &'static str {
        match self {
            BackgroundState::Started => "started",
            BackgroundState::Armed => "armed",
            BackgroundState::Committed => "committed",
            BackgroundState::Previewed => "previewed",
            BackgroundState::Discarded => "discarded",
        }
    }
}

/// Why a background compaction was discarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DiscardReason {
    /// The leaf left the snapshot's branch (navigation, a fork, another writer's rewrite).
    LeafLeftBranch,
    /// A compaction was written after the snapshot (a manual one, another writer's).
    CompactedSince,
    /// What was appended since the snapshot does not fit in the kept part any more.
    DoesNotFit,
    /// `session/abortCompaction`, or the session closed.
    Aborted,
    /// The summarizer failed.
    Failed,
    /// A manual compaction started.
    ManualCompaction,
}

impl DiscardReason {
    pub fn name(self) -> &'static str {
        match self {
            DiscardReason::LeafLeftBranch => "leafLeftBranch",
            DiscardReason::CompactedSince => "compactedSince",
            DiscardReason::DoesNotFit => "doesNotFit",
            DiscardReason::Aborted => "aborted",
            DiscardReason::Failed => "failed",
            DiscardReason::ManualCompaction => "manualCompaction",
        }
    }
}

/// Why automatic compaction paused for a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PauseReason {
    /// The context refilled to the threshold within 3 turns of a compaction, 3 times in a row.
    Thrashing,
    /// 3 automatic compactions in a row failed.
    RepeatedFailures,
}

impl PauseReason {
    pub fn name(self) -> &'static str {
        match self {
            PauseReason::Thrashing => "thrashing",
            PauseReason::RepeatedFailures => "repeatedFailures",
        }
    }
}

/// Receives session-level events.
pub trait EventSink: Send + Sync {
    fn emit(&self, event: EngineEvent);
}

/// A sink that drops every event (tests).
#[cfg(test)]
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopSink;

#[cfg(test)]
impl EventSink for NoopSink {
    fn emit(&self, _event: EngineEvent) {}
}
