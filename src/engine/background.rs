//! Background (speculative) compaction: when a reply's context enters the band
//! `[threshold - lead, threshold)`, a compaction of the branch as it stands is drafted in the
//! background while appends go on; when a later reply crosses the threshold, the drafted
//! result is written at once at the leaf (the entries appended since stay in the kept part).
//!
//! At most one runs per session ([`SessionState::background`]). Nothing reaches the file until
//! the commit, which is one append: a kill while one is armed leaves the file as it was. The
//! result is discarded, with a [`DiscardReason`] in an event, when the leaf left the snapshot's
//! branch, a compaction came in between, what was appended since no longer fits, it was
//! aborted, or the summarizer failed.

pub(super) mod run;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio_util::sync::CancellationToken;

use super::compact::{ArmedCompaction, draft_armed, snapshot_fits};
use super::events::{BackgroundState, DiscardReason, new_operation_id};
use super::state::SessionState;
use super::{CompactEnv, CompactReason, EngineEvent, EventSink, Phase};
use run::{BackgroundRun, Progress, lock};

/// Where a background compaction stands, for `session/usage`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackgroundStatus {
    pub operation_id: String,
    /// The result is drafted and waits for the threshold.
    pub ready: bool,
    /// The current phase while it runs.
    pub phase: Option<Phase>,
    /// Which summarizer request of how many (a long history is summarised in chunks).
    pub chunk: Option<(usize, usize)>,
    pub started_ms: i64,
}

fn emit(
    events: &dyn EventSink,
    state: &SessionState,
    operation_id: &str,
    what: BackgroundState,
    reason: Option<DiscardReason>,
    message: Option<String>,
) {
    events.emit(EngineEvent::BackgroundCompaction {
        session_id: state.id.clone(),
        operation_id: operation_id.to_owned(),
        state: what,
        reason,
        message,
    });
}

/// Starts a background compaction of `state`'s branch as it stands (leaf `leaf`) with `env`,
/// unless one runs already; with `at_leaf`, of the branch that ends at `leaf` exactly (another
/// writer's leaf, `session/observeTurn`). Needs a tokio runtime; returns whether one was
/// started.
pub(crate) fn start(
    state: &Arc<SessionState>,
    leaf: Option<String>,
    at_leaf: bool,
    mut env: CompactEnv,
    events: Arc<dyn EventSink>,
) -> bool {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return false;
    };
    let mut slot = state.background();
    if slot.is_some() {
        return false;
    }
    let operation_id = new_operation_id("background");
    env.operation_id = operation_id.clone();
    // Closing the session cancels it.
    let token = state.stop.child_token();
    let progress = Arc::new(Progress {
        started_ms: crate::session::ids::now_ms(),
        ..Progress::default()
    });
    emit(
        events.as_ref(),
        state,
        &operation_id,
        BackgroundState::Started,
        None,
        None,
    );
    let handle = {
        let (session, token, progress) = (
            Arc::clone(&state.session),
            token.clone(),
            Arc::clone(&progress),
        );
        let (state, operation_id) = (Arc::downgrade(state), operation_id.clone());
        let draft_leaf = leaf.clone().filter(|_| at_leaf);
        runtime.spawn(async move {
            let drafted = draft_armed(
                &session,
                &env,
                CompactReason::Threshold,
                draft_leaf,
                token.clone(),
                progress.as_ref(),
            )
            .await;
            progress.done.store(true, Ordering::Release);
            if let Some(state) = state.upgrade() {
                match &drafted {
                    Ok(_) => emit(
                        events.as_ref(),
                        &state,
                        &operation_id,
                        BackgroundState::Armed,
                        None,
                        None,
                    ),
                    // Whoever cancelled it reported the discard.
                    Err(_) if token.is_cancelled() => {}
                    Err(e) => {
                        emit(
                            events.as_ref(),
                            &state,
                            &operation_id,
                            BackgroundState::Discarded,
                            Some(DiscardReason::Failed),
                            Some(e.to_string()),
                        );
                        // A failed draft frees the slot so a later reply may try again.
                        let mut slot = state.background();
                        if slot
                            .as_ref()
                            .is_some_and(|r| r.operation_id == operation_id)
                        {
                            *slot = None;
                        }
                    }
                }
            }
            drafted
        })
    };
    *slot = Some(BackgroundRun {
        operation_id,
        snapshot_leaf: leaf,
        token,
        progress,
        handle,
    });
    true
}

/// Where the session's background compaction stands, if one runs or is armed.
pub fn status(state: &SessionState) -> Option<BackgroundStatus> {
    let slot = state.background();
    let run = slot.as_ref()?;
    let ready = run.progress.done.load(Ordering::Acquire);
    Some(BackgroundStatus {
        operation_id: run.operation_id.clone(),
        ready,
        phase: if ready {
            None
        } else {
            *lock(&run.progress.phase)
        },
        chunk: *lock(&run.progress.chunk),
        started_ms: run.progress.started_ms,
    })
}

/// Whether an armed result is ready to be written at once.
pub fn is_ready(state: &SessionState) -> bool {
    state
        .background()
        .as_ref()
        .is_some_and(|run| run.handle.is_finished())
}

/// Drops the session's background compaction, if any, reporting `reason`; whether there was one.
pub(crate) fn discard(state: &SessionState, events: &dyn EventSink, reason: DiscardReason) -> bool {
    let Some(run) = state.background().take() else {
        return false;
    };
    run.token.cancel();
    emit(
        events,
        state,
        &run.operation_id,
        BackgroundState::Discarded,
        Some(reason),
        None,
    );
    true
}

/// Takes the session's background compaction for writing at the current leaf (or at `leaf`,
/// another writer's): discards it (with the reason) when the leaf left its branch; otherwise
/// waits for it to finish (never starting over), or until `cancel`. `None` when there is
/// nothing to write; the caller then compacts the usual way.
pub(crate) async fn take_for_commit(
    state: &SessionState,
    events: &dyn EventSink,
    leaf: Option<&str>,
    cancel: &CancellationToken,
) -> Option<(String, ArmedCompaction)> {
    let mut run = state.background().take()?;
    let fits = {
        let session = state.session.read().await;
        let path = match leaf {
            Some(id) => session.path_to(id),
            None => session.path_to_leaf(),
        };
        snapshot_fits(run.snapshot_leaf.as_deref(), &path)
    };
    let discard = |run: &BackgroundRun, reason: DiscardReason, message: Option<String>| {
        run.token.cancel();
        emit(
            events,
            state,
            &run.operation_id,
            BackgroundState::Discarded,
            Some(reason),
            message,
        );
    };
    if let Err(reason) = fits {
        discard(&run, reason, None);
        return None;
    }
    let joined = tokio::select! {
        joined = &mut run.handle => joined,
        _ = cancel.cancelled() => {
            discard(&run, DiscardReason::Aborted, None);
            return None;
        }
    };
    match joined {
        Ok(Ok(armed)) => Some((run.operation_id, armed)),
        // The task reported its failure, or whoever cancelled it did.
        Ok(Err(_)) => None,
        Err(join) => {
            discard(&run, DiscardReason::Failed, Some(join.to_string()));
            None
        }
    }
}

/// Reports that the armed result `operation_id` was written or handed out as a preview
/// (`Ok` with [`BackgroundState::Committed`] or [`BackgroundState::Previewed`]), or dropped
/// for `reason`.
pub(crate) fn report(
    state: &SessionState,
    events: &dyn EventSink,
    operation_id: &str,
    outcome: Result<BackgroundState, (DiscardReason, Option<String>)>,
) {
    match outcome {
        Ok(used) => emit(events, state, operation_id, used, None, None),
        Err((reason, message)) => emit(
            events,
            state,
            operation_id,
            BackgroundState::Discarded,
            Some(reason),
            message,
        ),
    }
}
