//! One compaction bracketed by its events, the same for a manual compaction and an automatic
//! one: `CompactionStarted`, the compaction, `EntriesAppended` for the entry it wrote, and
//! `CompactionFinished`, which clients treat as authoritative.

use super::state::{OpGuard, SessionState};
use super::{
    CompactEnv, CompactOptions, CompactOutcome, EngineError, EngineEvent, EventSink,
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
    events.emit(EngineEvent::CompactionStarted {
        session_id: state.id.clone(),
        operation_id: env.operation_id.clone(),
        reason: opts.reason,
    });
    let run = super::compact(&state.session, env, opts, guard.token().clone(), observer).await;
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
