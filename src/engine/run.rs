//! One compaction bracketed by its events, the same for a manual compaction and an automatic
//! one: `CompactionStarted`, the compaction, `EntriesAppended` for the entry it wrote, and
//! `CompactionFinished`, which clients treat as authoritative.

use std::sync::Arc;

use super::compact::{ArmedCompaction, SummaryEdit};
use super::preview::TakenPreview;
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
    // A preview at the leaf of a session compactd may write is kept for a later commit.
    let keep = opts.preview && opts.leaf_id.is_none() && !state.read_only;
    let work = async {
        let (mut outcome, previewed) =
            super::compact::compact_keeping(&state.session, env, opts, token, observer).await?;
        if let Some(previewed) = previewed.filter(|_| keep) {
            outcome.preview_id = Some(state.previews().insert(previewed));
        }
        Ok(outcome)
    };
    bracket(events, state, env, reason, guard, work).await
}

/// Writes the previewed compaction `taken` (with the user's `edit`) at the session's leaf in
/// the slot `guard` holds, bracketed by the same events as a manual compaction.
pub(crate) async fn run_commit_preview(
    events: &dyn EventSink,
    state: &SessionState,
    env: &CompactEnv,
    taken: TakenPreview,
    edit: SummaryEdit,
    guard: OpGuard,
) -> Result<CompactOutcome, EngineError> {
    let token = guard.token().clone();
    let work = async {
        super::compact::commit_preview(
            &state.session,
            env.counter.as_ref(),
            taken.preview,
            taken.stale,
            edit,
            &token,
        )
        .await
    };
    bracket(events, state, env, CompactReason::Manual, guard, work).await
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

/// Hands out `armed` as a preview at `leaf` (the session's leaf when `None`) in the slot
/// `guard` holds, bracketed like a manual compaction; kept for a later commit when `keep`.
pub(crate) async fn run_armed_preview(
    events: &dyn EventSink,
    state: &SessionState,
    env: &CompactEnv,
    armed: ArmedCompaction,
    leaf: Option<String>,
    keep: bool,
    guard: OpGuard,
) -> Result<CompactOutcome, EngineError> {
    let work = async {
        let (mut outcome, previewed) = {
            let session = state.session.read().await;
            let leaf = leaf.or_else(|| session.leaf_id().map(str::to_owned));
            let path = match &leaf {
                Some(id) => session.path_to(id),
                None => Vec::new(),
            };
            armed.into_preview(leaf, &path, env.counter.as_ref())
        };
        if keep {
            outcome.preview_id = Some(state.previews().insert(previewed));
        }
        Ok(outcome)
    };
    bracket(events, state, env, CompactReason::Manual, guard, work).await
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
    let run = run.map(Arc::new);
    let (aborted, error) = match &run {
        Ok(_) => (false, None),
        Err(EngineError::Cancelled(_)) => (true, None),
        Err(e) => (false, Some(OperationError::from(e))),
    };
    events.emit(EngineEvent::CompactionFinished {
        session_id: state.id.clone(),
        operation_id: env.operation_id.clone(),
        outcome: run.as_ref().ok().cloned(),
        aborted,
        error,
    });
    // The sink has let go of its share by now unless it keeps events (a test's does).
    run.map(Arc::unwrap_or_clone)
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
