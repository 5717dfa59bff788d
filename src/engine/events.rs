//! What operations report while they run ([`OperationObserver`]) and the session-level events
//! the registry forwards to clients ([`EngineEvent`] through an [`EventSink`]).

use crate::session::Entry;

use super::{CompactOutcome, EngineError, EngineErrorKind};
use crate::summarize::Purpose;

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

/// Where one summary stands, reported when it changes (not for every streamed token).
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryStatus {
    /// The summarizer working on it.
    pub summarizer: String,
    /// Which request of the summary (1-based) and how many there are: more than one when the
    /// input was split into chunks for a small window.
    pub chunk: usize,
    pub chunks: usize,
    pub state: SummaryState,
}

/// What a summary waits for.
#[derive(Debug, Clone, PartialEq)]
pub enum SummaryState {
    /// The server's slots are busy with other requests of compactd's; `ahead` wait before it.
    Queued { ahead: usize },
    /// The request is sent and the model has not answered yet (a local model may read the
    /// prompt for minutes); streamed text ends this state.
    WaitingForModel,
    /// The attempt failed; the next one starts after `after`.
    Retrying {
        after: std::time::Duration,
        error: String,
    },
}

impl SummaryStatus {
    /// A line for people: `waiting for the model local/gemma (chunk 2 of 5)`.
    pub fn describe(&self) -> String {
        let what = match &self.state {
            SummaryState::Queued { ahead: 0 } => {
                format!("queued for {} while its server is busy", self.summarizer)
            }
            SummaryState::Queued { ahead } => format!(
                "queued for {} behind {ahead} other request{}",
                self.summarizer,
                if *ahead == 1 { "" } else { "s" }
            ),
            SummaryState::WaitingForModel => format!("waiting for the model {}", self.summarizer),
            SummaryState::Retrying { after, .. } => format!(
                "{} failed; retrying in {:.1} s",
                self.summarizer,
                after.as_secs_f64()
            ),
        };
        if self.chunks > 1 {
            format!("{what} (chunk {} of {})", self.chunk, self.chunks)
        } else {
            what
        }
    }
}

/// What an operation reports while it runs; the daemon turns it into `$/progress` and session
/// events, the CLI into a progress line on stderr.
pub trait OperationObserver: Send + Sync {
    /// A new phase started; `percentage` when the operation can tell.
    fn phase(&self, phase: Phase, message: &str, percentage: Option<u32>);
    /// Streamed summary text. A retried attempt starts its part over (the observer receives
    /// the new attempt's text from the beginning, after [`OperationObserver::restart`]).
    fn delta(&self, part: Purpose, text: &str);
    /// The text streamed so far for `part` is void: an attempt failed and another (a retry,
    /// the next summarizer, the next chunk of a long input) starts from the beginning.
    fn restart(&self, _part: Purpose) {}
    /// Where a summary stands: queued, waiting for the model, retrying; which chunk of how
    /// many.
    fn status(&self, _part: Purpose, _status: &SummaryStatus) {}
}

/// An observer that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopObserver;

impl OperationObserver for NoopObserver {
    fn phase(&self, _phase: Phase, _message: &str, _percentage: Option<u32>) {}
    fn delta(&self, _part: Purpose, _text: &str) {}
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
    pub outcome: Option<CompactOutcome>,
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
        outcome: Option<Box<CompactOutcome>>,
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

/// Which summarizer wrote a summary, and why the rungs before it did not.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SummaryReport {
    /// The summarizer's id (`local/qwen3-8b`, `extractive`, ...).
    pub summarizer: String,
    /// What the answer checks found (`checks passed`, `cut at the output limit; 2 complete
    /// sections kept, checks passed`); `None` for the extractive rung, which is not checked.
    pub checks: Option<String>,
    /// Requests the summary took on that rung (more than one when the input was folded).
    pub chunks: usize,
    /// The earlier rungs, in order, with the reason each gave up.
    pub failures: Vec<RungFailure>,
}

/// A rung that did not write the summary.
#[derive(Debug, Clone, PartialEq)]
pub struct RungFailure {
    pub summarizer: String,
    pub reason: String,
}
