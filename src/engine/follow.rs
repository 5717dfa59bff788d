//! Following a stored session: when another daemon writes to a session this daemon has open,
//! the database's notification wakes a task here, which reads the new entries at once and
//! reports them as [`EngineEvent::ExternalEntries`], so the client hears of them without
//! sending a request. A file session has no such signal: other processes' appends are read
//! at its next request.

use std::sync::{Arc, Weak};

use crate::session::ChangeSignal;

use super::EngineEvent;
use super::events::EventSink;
use super::state::SessionState;

/// Starts following `state` on the current tokio runtime (none: nothing is followed).
pub(crate) fn spawn(state: &Arc<SessionState>, signal: ChangeSignal, events: Arc<dyn EventSink>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let stop = state.stop.clone();
    let state = Arc::downgrade(state);
    runtime.spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = signal.changed() => {}
            }
            if !report_arrivals(&state, events.as_ref()).await {
                return;
            }
        }
    });
}

/// Reads what other writers added and reports it; `false` once the session is closed.
async fn report_arrivals(state: &Weak<SessionState>, events: &dyn EventSink) -> bool {
    let Some(state) = state.upgrade() else {
        return false;
    };
    let (entries, leaf_id) = {
        let mut session = state.session.write().await;
        if let Err(e) = state.refresh_locked(&mut session) {
            // The database is away: the reconnect wakes this task again.
            tracing::debug!(session = %state.id, error = %e, "cannot read other daemons' writes yet");
        }
        let entries = session.take_arrivals();
        let leaf = session.leaf_id().map(str::to_owned);
        (entries, leaf)
    };
    if let Some(leaf_id) = leaf_id.or_else(|| entries.last().map(|e| e.id.clone()))
        && !entries.is_empty()
    {
        events.emit(EngineEvent::ExternalEntries {
            session_id: state.id.clone(),
            entries,
            leaf_id,
        });
    }
    true
}
