//! Appending entries to an open session: at the leaf, after the expected-leaf check, reported
//! as `EntriesAppended`, then the auto-compaction check on the batch's last assistant message,
//! run before answering or left to the caller ([`AppendOutcome::pending`]).

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::session::{Entry, EntryKind, Session};

use super::auto::{self, AppendAction, PendingAuto};
use super::env::EnvSource;
use super::state::{SessionState, check_leaf};
use super::{AutoResult, EngineError, EngineEvent, EventSink, OperationObserver};

/// One entry to append: its kind and any extra top-level fields to keep as given.
#[derive(Debug, Clone)]
pub struct NewEntry {
    pub kind: EntryKind,
    pub extra: crate::session::message::Extra,
}

impl From<EntryKind> for NewEntry {
    fn from(kind: EntryKind) -> Self {
        NewEntry {
            kind,
            extra: Default::default(),
        }
    }
}

/// How an append behaves.
#[derive(Debug, Clone)]
pub struct AppendOptions {
    /// Fail with `LeafMoved` unless the leaf is this.
    pub expected_leaf: Option<Option<String>>,
    /// Run the auto-compaction check when the batch contains an assistant message.
    pub check_compaction: bool,
    /// Run a due auto-compaction before returning; otherwise return it as
    /// [`AppendOutcome::pending`] for the caller to run.
    pub wait_for_compaction: bool,
}

impl Default for AppendOptions {
    fn default() -> Self {
        AppendOptions {
            expected_leaf: None,
            check_compaction: true,
            wait_for_compaction: true,
        }
    }
}

/// The result of an append.
#[derive(Debug)]
pub struct AppendOutcome {
    /// Ids of the appended entries, in order.
    pub appended: Vec<String>,
    /// The leaf after the append and any auto-compaction.
    pub leaf_id: Option<String>,
    pub action: AppendAction,
    /// Set when auto-compaction ran (with `wait_for_compaction`).
    pub auto: Option<AutoResult>,
    /// The auto-compaction left to run (without `wait_for_compaction`): the caller runs it
    /// with [`PendingAuto::run`]; until then later mutating calls on the session wait.
    pub pending: Option<PendingAuto>,
}

/// Appends `entries` to `state`'s session at the leaf and reports them to `events`. With
/// `check_compaction`, when the batch contains an assistant message the auto-compaction check
/// runs on the last one (tool results may follow it), with an environment from `source`; a due
/// compaction runs before returning (`wait_for_compaction`, cancelled by `cancel`) or is
/// returned as [`AppendOutcome::pending`], holding the session's write gate until it has run.
pub(crate) async fn append(
    state: &Arc<SessionState>,
    entries: Vec<NewEntry>,
    options: AppendOptions,
    cancel: CancellationToken,
    observer: &dyn OperationObserver,
    source: &EnvSource,
    events: &Arc<dyn EventSink>,
) -> Result<AppendOutcome, EngineError> {
    state.check_writable()?;
    let gate = Arc::clone(&state.write_gate).lock_owned().await;
    if cancel.is_cancelled() {
        return Err(EngineError::Cancelled("request cancelled".into()));
    }
    // The write lock is released at the end of either branch, before the events and the
    // auto-compaction check.
    let mut session = Arc::clone(&state.session).write_owned().await;
    let expected = options.expected_leaf.clone();
    let appended = if session.rewrites_on_next_write() {
        // The first write of a migrated file rewrites all of it: on a blocking thread.
        let state = Arc::clone(state);
        super::off_runtime(move || write_batch(&state, &mut session, entries, expected)).await?
    } else {
        let written = write_batch(state, &mut session, entries, expected)?;
        drop(session);
        written
    };
    let ids: Vec<String> = appended.iter().map(|e| e.id.clone()).collect();
    if !appended.is_empty() {
        events.emit(EngineEvent::EntriesAppended {
            session_id: state.id.clone(),
            entries: appended.clone(),
        });
    }
    let last_reply = appended
        .iter()
        .rev()
        .find(|e| e.message().and_then(|m| m.as_assistant()).is_some());
    // A background run outlives the request: only `session/abortCompaction` stops it.
    let run_token = if options.wait_for_compaction {
        cancel.clone()
    } else {
        CancellationToken::new()
    };
    let plan = match last_reply {
        Some(reply) if options.check_compaction => {
            auto::plan(state, reply, &run_token, source, Arc::clone(events)).await?
        }
        _ => None,
    };
    let (action, auto, pending) = match plan {
        None => (AppendAction::Continue, None, None),
        Some(plan) if options.wait_for_compaction || plan.commits_at_once() => {
            let (action, result) = plan.execute(observer).await?;
            (action, Some(result), None)
        }
        Some(plan) => (
            plan.running_action(),
            None,
            Some(PendingAuto { plan, gate }),
        ),
    };
    let leaf_id = state.session.read().await.leaf_id().map(str::to_owned);
    Ok(AppendOutcome {
        appended: ids,
        leaf_id,
        action,
        auto,
        pending,
    })
}

/// Appends `entries` at `session`'s leaf (held under its write lock), after reading what other
/// writers added and checking the expected leaf and the labels' targets; returns the entries
/// written.
pub(crate) fn write_batch(
    state: &SessionState,
    session: &mut Session,
    entries: Vec<NewEntry>,
    expected_leaf: Option<Option<String>>,
) -> Result<Vec<Entry>, EngineError> {
    state.refresh_locked(session)?;
    check_leaf(session, &expected_leaf)?;
    // A label must name an entry clients can see, as `session/setLabel` requires.
    for entry in &entries {
        if let EntryKind::Label { target_id, .. } = &entry.kind
            && session.find(target_id)?.is_none_or(|e| e.is_leaf_move())
        {
            return Err(EngineError::EntryNotFound(target_id.clone()));
        }
    }
    if entries.is_empty() {
        return Ok(Vec::new());
    }
    let items = entries.into_iter().map(|e| (e.kind, e.extra)).collect();
    // Checked again under the writers' lock: another daemon's append may land between the
    // check above and the write.
    Ok(session
        .append_expecting(items, expected_leaf)
        .map_err(EngineError::from_write)?
        .to_vec())
}
