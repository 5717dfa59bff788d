//! The record of one background compaction: the drafting task, its token, and the progress it
//! reports. It is the value of [`SessionState`](crate::engine::state::SessionState)'s slot, so it
//! needs nothing of the session; what starts, reads and takes it is in the parent module.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::engine::compact::ArmedCompaction;
use crate::engine::error::EngineError;
use crate::engine::events::{OperationObserver, Phase};
use crate::summarize::{Purpose, SummaryObserver, SummaryStatus};

/// The background compaction of one session.
pub struct BackgroundRun {
    pub operation_id: String,
    /// The leaf when it was started (the draft's own snapshot may be a little later).
    pub(super) snapshot_leaf: Option<String>,
    pub(super) token: CancellationToken,
    pub(super) progress: Arc<Progress>,
    pub(super) handle: JoinHandle<Result<ArmedCompaction, EngineError>>,
}

impl std::fmt::Debug for BackgroundRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackgroundRun")
            .field("operation_id", &self.operation_id)
            .field("snapshot_leaf", &self.snapshot_leaf)
            .finish_non_exhaustive()
    }
}

/// What the draft reports while it runs.
#[derive(Debug, Default)]
pub(super) struct Progress {
    pub(super) phase: Mutex<Option<Phase>>,
    pub(super) chunk: Mutex<Option<(usize, usize)>>,
    pub(super) done: AtomicBool,
    pub(super) started_ms: i64,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Plain values replaced whole.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl OperationObserver for Progress {
    fn phase(&self, phase: Phase, _message: &str, _percentage: Option<u32>) {
        *lock(&self.phase) = Some(phase);
    }
}

impl SummaryObserver for Progress {
    fn delta(&self, _part: Purpose, _text: &str) {}

    fn status(&self, part: Purpose, status: &SummaryStatus) {
        if part == Purpose::History {
            *lock(&self.chunk) = Some((status.chunk, status.chunks));
        }
    }
}
