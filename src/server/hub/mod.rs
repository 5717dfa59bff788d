//! Notifications from the engine to the client: session events, LSP `$/progress` and summary
//! deltas.
//!
//! The engine reports synchronously ([`EventSink::emit`], [`OperationObserver`]); the [`Hub`]
//! turns each report into notifications at once, in order. Four parts, one concern each:
//!
//! * [`outbox`]: the queue to the client and its one forwarder task; the router flushes it
//!   before a request's answer, so every notification about a request goes out first.
//! * [`tokens`]: progress tokens (a request's, one the client creates, an auto-compaction's)
//!   and what cancelling each does.
//! * [`operation`]: one running operation as the client sees it, with the throttles of its
//!   deltas and progress reports.
//! * [`events`]: the engine's session events as notifications.
//!
//! Operations are tracked per session and kind: a compaction (manual or automatic) and a
//! branch summary may run at once on one session, each with its own progress.

mod events;
mod operation;
mod outbox;
mod tokens;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use crate::engine::{
    EngineEvent, EventSink, OperationObserver, Phase, Purpose, SummaryObserver, SummaryStatus,
};
use crate::protocol::{ClientCapabilities, CompactionReason, ProgressToken, WorkDoneProgress};
use crate::rpc::Client;

pub use operation::OperationKind;
pub use tokens::CancelTarget;

use operation::{Op, begin};
use outbox::Outbox;
use tokens::ProgressTokens;

/// Where the hub reads the time.
type Clock = Box<dyn Fn() -> Instant + Send + Sync>;

/// Turns engine reports into ordered notifications; see the module doc.
pub struct Hub {
    outbox: Outbox,
    tokens: ProgressTokens,
    ops: Mutex<HashMap<(String, OperationKind), Op>>,
    /// The clock of the throttles (a test's own clock in unit tests).
    now: Clock,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain maps updated in one step: a panic elsewhere cannot leave them half-written.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Default for Hub {
    fn default() -> Self {
        Self::new()
    }
}

impl Hub {
    pub fn new() -> Self {
        Self::with_clock(Box::new(Instant::now))
    }

    fn with_clock(now: Clock) -> Self {
        Hub {
            outbox: Outbox::new(),
            tokens: ProgressTokens::default(),
            ops: Mutex::new(HashMap::new()),
            now,
        }
    }

    pub(crate) fn set_capabilities(&self, capabilities: ClientCapabilities) {
        self.outbox.set_capabilities(capabilities);
    }

    /// Starts the forwarder on `client` (once, at `initialize`). Until then notifications wait.
    pub(crate) fn start(&self, client: Client) {
        self.outbox.start(client);
    }

    /// Resolves once everything queued so far was handed to the writer.
    pub async fn flush(&self) {
        self.outbox.flush().await;
    }

    /// What cancelling `token` should do, while its operation runs.
    pub fn cancel_target(&self, token: &ProgressToken) -> Option<CancelTarget> {
        self.tokens.cancel_target(token)
    }

    /// The progress token of a request's operation: `requested` (its `workDoneToken`), else
    /// one `client` created on request, else none.
    pub async fn progress_token(
        &self,
        client: &Client,
        requested: Option<ProgressToken>,
    ) -> Option<ProgressToken> {
        self.tokens
            .for_request(client, &self.outbox, requested)
            .await
    }

    /// A request starts an operation of `kind` on `session_id`: `$/progress` begin on
    /// `progress` (if any), and `cancel` is what `window/workDoneProgress/cancel` on it does.
    pub fn begin(
        &self,
        session_id: &str,
        kind: OperationKind,
        progress: Option<ProgressToken>,
        cancel: CancellationToken,
    ) {
        let title = match kind {
            OperationKind::Compaction => format!("Compacting session {session_id}"),
            OperationKind::BranchSummary => format!("Summarizing the branch of {session_id}"),
        };
        let mut op = Op::new(CompactionReason::Manual);
        op.progress = progress;
        if let Some(token) = &op.progress {
            self.tokens.watch(token, CancelTarget::Token(cancel));
        }
        op.progress(&self.outbox, begin(title));
        lock(&self.ops).insert((session_id.to_owned(), kind), op);
    }

    /// The request's operation ended: what streamed goes out, then `$/progress` end with
    /// `message` (`done`, `cancelled` or the error).
    pub fn end(&self, session_id: &str, kind: OperationKind, message: String) {
        let key = (session_id.to_owned(), kind);
        let op = {
            let mut ops = lock(&self.ops);
            match ops.get(&key) {
                Some(op) if op.auto.is_none() => ops.remove(&key),
                _ => None,
            }
        };
        let Some(mut op) = op else {
            return;
        };
        op.settle(&self.outbox, session_id, (self.now)());
        if let Some(token) = &op.progress {
            self.tokens.forget(token);
        }
        op.progress(
            &self.outbox,
            WorkDoneProgress::End {
                message: Some(message),
            },
        );
    }

    /// The observer of an operation of `kind` on `session_id`.
    pub fn observer(self: &Arc<Self>, session_id: &str, kind: OperationKind) -> OpObserver {
        OpObserver {
            hub: Arc::clone(self),
            session_id: session_id.to_owned(),
            kind,
        }
    }

    /// `$/progress` begin on `token` for work that is not an operation on an open session
    /// (opening one); it cannot be cancelled.
    pub fn work_begin(&self, token: &ProgressToken, title: String, message: String) {
        let value = WorkDoneProgress::Begin {
            title,
            cancellable: Some(false),
            message: Some(message),
            percentage: Some(0),
        };
        self.outbox.progress(token, value);
    }

    /// `$/progress` report on `token` (see [`Hub::work_begin`]).
    pub fn work_report(&self, token: &ProgressToken, message: String, percentage: u32) {
        let value = WorkDoneProgress::Report {
            cancellable: Some(false),
            message: Some(message),
            percentage: Some(percentage.min(100)),
        };
        self.outbox.progress(token, value);
    }

    /// `$/progress` end on `token` (see [`Hub::work_begin`]).
    pub fn work_end(&self, token: &ProgressToken, message: String) {
        let value = WorkDoneProgress::End {
            message: Some(message),
        };
        self.outbox.progress(token, value);
    }

    /// Runs `report` on the operation of `kind` on `session_id`, if one runs.
    fn with_op(&self, session_id: &str, kind: OperationKind, report: impl FnOnce(&mut Op)) {
        if let Some(op) = lock(&self.ops).get_mut(&(session_id.to_owned(), kind)) {
            report(op);
        }
    }
}

impl EventSink for Hub {
    fn emit(&self, event: EngineEvent) {
        self.on_event(event);
    }
}

/// The observer of one operation on one session.
pub struct OpObserver {
    hub: Arc<Hub>,
    session_id: String,
    kind: OperationKind,
}

impl OperationObserver for OpObserver {
    fn phase(&self, phase: Phase, _message: &str, percentage: Option<u32>) {
        let (hub, session) = (&self.hub, self.session_id.as_str());
        let now = (hub.now)();
        hub.with_op(session, self.kind, |op| {
            op.phase(&hub.outbox, session, phase, percentage, now)
        });
    }
}

impl SummaryObserver for OpObserver {
    fn delta(&self, part: Purpose, text: &str) {
        let (hub, session) = (&self.hub, self.session_id.as_str());
        let now = (hub.now)();
        hub.with_op(session, self.kind, |op| {
            op.delta(&hub.outbox, session, part, text, now)
        });
    }

    fn restart(&self, part: Purpose) {
        let (hub, session) = (&self.hub, self.session_id.as_str());
        hub.with_op(session, self.kind, |op| {
            op.restart(&hub.outbox, session, part)
        });
    }

    fn status(&self, part: Purpose, status: &SummaryStatus) {
        let (hub, session) = (&self.hub, self.session_id.as_str());
        let now = (hub.now)();
        hub.with_op(session, self.kind, |op| {
            op.status(&hub.outbox, session, part, status, now)
        });
    }
}

#[cfg(test)]
mod tests;
