//! Orchestration per session: compaction, tree navigation with branch summaries, the hooks
//! around them, and the events they report. Which summarizer writes a summary is
//! `summarize`'s to decide ([`crate::summarize::write_summary`]).
//!
//! The engine works on domain types (entries, messages, settings); only `rpc` knows the wire.
//! A session is shared as [`SharedSession`]: operations prepare under a read lock, call the
//! summarizer with no lock held, then take the write lock, check the leaf has not moved, and
//! append.

pub(crate) mod append;
pub(crate) mod auto;
pub(crate) mod background;
pub(crate) mod compact;
pub(crate) mod env;
pub(crate) mod error;
pub(crate) mod events;
mod follow;
pub(crate) mod hooks;
pub(crate) mod navigate;
pub(crate) mod overflow;
pub(crate) mod preview;
pub(crate) mod prune;
pub(crate) mod registry;
pub(crate) mod run;
pub(crate) mod sessions;
pub(crate) mod state;
pub(crate) mod undo;
pub(crate) mod usage;

use std::sync::Arc;

pub use append::{AppendOptions, NewEntry};
pub use background::BackgroundStatus;
pub use compact::{CompactOptions, CompactOutcome, SummaryEdit, compact};
pub use env::{CompactEnv, EnvSource, token_counter};
pub use error::{EngineError, EngineErrorKind};
pub use events::{
    AutoResult, BackgroundState, CompactReason, DiscardReason, EngineEvent, EventSink,
    OperationError, OperationObserver, PauseReason, Phase,
};
pub use hooks::{
    BeforeCompactReply, BeforeCompactRequest, BeforeTreeReply, BeforeTreeRequest, CompactingReply,
    CompactingRequest, EngineHooks, HookCompaction,
};
// The lower layers' types the engine's API is made of, re-exported for the engine's callers.
pub use crate::compaction::{
    FileOp, Ledger, LedgerError, LedgerFile, LedgerFiles, LedgerPin, LedgerRequest, RequestStatus,
};
pub use crate::session::{Session, SessionError};
pub use crate::summarize::{
    Prompts, Purpose, RetryPolicy, Summarizer, SummarizerChoice, SummarizerSet, SummaryObserver,
    SummaryReport, SummaryStatus,
};
pub use crate::tokens::TokenCounter;
pub use auto::AppendAction;
pub use navigate::{BranchSummaryPreview, NavigateOptions, NavigateOutcome, navigate_tree};
pub use registry::{
    CompactionClaim, Engine, NavigationClaim, ObservedTurn, SessionActivity, TurnObservation,
};
pub use sessions::{ListPage, LoadProgress, SessionInfo};
pub use state::blob_store;
pub use state::sync_policy;
pub use undo::{UndoOutcome, undo_compaction};
pub use usage::session_window;

/// A session shared between the registry and running operations. Reads take the read lock;
/// appends take the write lock only for the append itself.
pub type SharedSession = Arc<tokio::sync::RwLock<Session>>;

/// Runs `work`, synchronous and long (loading a file, building a large context), on one of
/// tokio's blocking threads, so the runtime's workers (the reader, the writer, other
/// requests) keep running meanwhile. A panic in `work` is resumed here, where the handler's
/// own panic guard answers it.
pub(crate) async fn off_runtime<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(work).await {
        Ok(value) => value,
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        // Only when the runtime shuts down, which drops this future first.
        Err(error) => panic!("blocking work did not finish: {error}"),
    }
}
