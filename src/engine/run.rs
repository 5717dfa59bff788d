//! One compaction bracketed by its events, the same for a manual compaction and an automatic
//! one: `CompactionStarted`, the compaction, `EntriesAppended` for the entry it wrote, and
//! `CompactionFinished`, which clients treat as authoritative.

use super::compact::ArmedCompaction;
use super::state::{OpGuard, SessionState};
use super::{
    CompactEnv, CompactOptions, CompactOutcome, CompactReason, EngineError, EngineEvent, EventSink,
    OperationError, OperationObserver,
};

/// Runs one compaction of `state`'s session in the slot `guard` holds, reporting it to
/// `events` under `env.operation_id`. The slot is freed before `CompactionFinished` goes out,
/// so a client that reacts to it by compacting again is not refused.
pub(crate) async fn run_compaction(
    events: &dyn EventSink,
    state: &SessionState,
    env: &CompactEnv,
    opts: CompactOptions,
    guard: OpGuard,
    observer: &dyn OperationObserver,
) -> Result<CompactOutcome, EngineError> {
    let (reason, token) = (opts.reason, guard.token().clone());
    let work = super::compact(&state.session, env, opts, token, observer);
    bracket(events, state, env, reason, guard, work).await
}

/// Writes a compaction drafted in the background ([`ArmedCompaction`]) at the session's leaf
/// in the slot `guard` holds, bracketed by the same events as [`run_compaction`].
pub(crate) async fn run_commit(
    events: &dyn EventSink,
    state: &SessionState,
    env: &CompactEnv,
    armed: ArmedCompaction,
    guard: OpGuard,
) -> Result<CompactOutcome, EngineError> {
    let token = guard.token().clone();
    let reason = armed.reason();
    let work = async {
        super::compact::commit_armed(&state.session, env.counter.as_ref(), armed, &token).await
    };
    bracket(events, state, env, reason, guard, work).await
}

async fn bracket(
    events: &dyn EventSink,
    state: &SessionState,
    env: &CompactEnv,
    reason: CompactReason,
    guard: OpGuard,
    work: impl Future<Output = Result<CompactOutcome, EngineError>>,
) -> Result<CompactOutcome, EngineError> {
    events.emit(EngineEvent::CompactionStarted {
        session_id: state.id.clone(),
        operation_id: env.operation_id.clone(),
        reason,
    });
    let run = work.await;
    drop(guard);
    if let Some(event) = appended_compaction(state, &run).await {
        events.emit(event);
    }
    let (outcome, aborted, error) = match &run {
        Ok(o) => (Some(Box::new(o.clone())), false, None),
        Err(EngineError::Cancelled(_)) => (None, true, None),
        Err(e) => (None, false, Some(OperationError::from(e))),
    };
    events.emit(EngineEvent::CompactionFinished {
        session_id: state.id.clone(),
        operation_id: env.operation_id.clone(),
        outcome,
        aborted,
        error,
    });
    run
}

/// `EntriesAppended` for the entry a compaction wrote (none for a preview or a failure), so
/// clients learn of it like of any other entry, just before `CompactionFinished`.
async fn appended_compaction(
    state: &SessionState,
    run: &Result<CompactOutcome, EngineError>,
) -> Option<EngineEvent> {
    let id = run.as_ref().ok()?.entry_id.as_deref()?;
    let entry = state.session.read().await.get(id).cloned()?;
    Some(EngineEvent::EntriesAppended {
        session_id: state.id.clone(),
        entries: vec![entry],
    })
}
