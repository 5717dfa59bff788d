//! Notifications from the engine to the client: session events, LSP `$/progress` and
//! summary deltas.
//!
//! The engine reports synchronously ([`EventSink::emit`], [`OperationObserver`]); the [`Hub`]
//! turns each report into notifications at once, in order, and queues them for one forwarder
//! task that writes them through the peer's [`Client`]. Handlers call [`Hub::flush`] before
//! answering, so every notification about a request goes out before its response.
//!
//! Per session the hub tracks the running operation (a manual compaction, an auto-compaction
//! or a branch summary): its operation id, its progress token, and the summary text streamed
//! but not yet sent (deltas are coalesced to at most one notification per part every
//! [`DELTA_INTERVAL`]).
//!
//! `$/progress` reports say what the operation waits for: each phase, and each change of a
//! summary's status (queued for its server's slot, waiting for the model's first token,
//! retrying, which chunk of how many) are reported as they happen. The character count of
//! streamed text is throttled to one report per [`PROGRESS_INTERVAL`]; a count held back is
//! sent before the next report or the `end`, so the last state always arrives.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::to_proto;
use crate::engine::{
    CompactReason, EngineEvent, EventSink, OperationObserver, Phase, Purpose, SummaryStatus,
};
use crate::protocol::SummaryPart as WirePart;
use crate::protocol::method::*;
use crate::protocol::{
    AutoCompactionFinished, AutoCompactionReason, AutoCompactionStarted, AutoContinue,
    ClientCapabilities, CompactionDelta, CompactionFinished, CompactionReason, CompactionStarted,
    EntriesAppended, Method, ProgressParams, ProgressPhase, ProgressToken, ServerNotification,
    TreeNavigated, WorkDoneProgress, WorkDoneProgressTokenParams,
};
use crate::rpc::Client;

/// Deltas are coalesced to at most one notification per part in this interval (≤ 20/s).
pub const DELTA_INTERVAL: Duration = Duration::from_millis(50);

/// Streamed characters are reported at most once in this interval (≤ 4/s): a slow local
/// model streams a token every 50-100 ms, and one report per token flooded the client.
pub const PROGRESS_INTERVAL: Duration = Duration::from_millis(250);

/// How long the client gets to answer `window/workDoneProgress/create`.
const CREATE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the forwarder task does, in order.
enum Out {
    Notify(&'static str, Value),
    /// Ask the client to create a progress token; `$/progress` for it is dropped if refused.
    CreateProgress(ProgressToken),
    Flush(oneshot::Sender<()>),
}

/// What a running operation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperationKind {
    Compaction,
    BranchSummary,
}

/// What cancelling a progress token does.
#[derive(Debug, Clone)]
pub enum CancelTarget {
    /// Cancel a request's operation token.
    Token(tokio_util::sync::CancellationToken),
    /// Abort the session's auto-compaction (it has no request).
    AbortCompaction(String),
}

struct Op {
    kind: OperationKind,
    /// `Some` for an auto-compaction.
    auto: Option<AutoCompactionReason>,
    reason: CompactionReason,
    operation_id: Option<String>,
    progress: Option<ProgressToken>,
    started_sent: bool,
    characters: u64,
    percentage: u32,
    pending: Vec<(WirePart, String)>,
    /// Parts with text already sent since their last restart.
    sent: Vec<WirePart>,
    last_delta: Option<Instant>,
    /// When the last `$/progress` report was sent.
    last_report: Option<Instant>,
    /// A character count held back by the throttle, sent before the next message.
    held_report: bool,
    /// Which chunk of how many the latest status named, when the input was split.
    chunk: Option<(usize, usize)>,
    /// `session/autoContinue` waits for `session/autoCompactionFinished`.
    auto_continue: Option<AutoContinue>,
}

impl Op {
    fn new(kind: OperationKind, reason: CompactionReason) -> Self {
        Op {
            kind,
            auto: None,
            reason,
            operation_id: None,
            progress: None,
            started_sent: false,
            characters: 0,
            percentage: 0,
            pending: Vec::new(),
            sent: Vec::new(),
            last_delta: None,
            last_report: None,
            held_report: false,
            chunk: None,
            auto_continue: None,
        }
    }
}

/// Turns engine reports into ordered notifications; see the module doc.
pub struct Hub {
    tx: mpsc::UnboundedSender<Out>,
    rx: Mutex<Option<mpsc::UnboundedReceiver<Out>>>,
    capabilities: OnceLock<ClientCapabilities>,
    ops: Mutex<HashMap<String, Op>>,
    cancels: Mutex<HashMap<ProgressToken, CancelTarget>>,
    next_auto: AtomicU64,
    /// The clock of the throttles (a test's own clock in unit tests).
    now: Clock,
}

/// Where the hub reads the time.
type Clock = Box<dyn Fn() -> Instant + Send + Sync>;

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
        let (tx, rx) = mpsc::unbounded_channel();
        Hub {
            tx,
            rx: Mutex::new(Some(rx)),
            capabilities: OnceLock::new(),
            ops: Mutex::new(HashMap::new()),
            cancels: Mutex::new(HashMap::new()),
            next_auto: AtomicU64::new(1),
            now,
        }
    }

    pub(crate) fn set_capabilities(&self, capabilities: ClientCapabilities) {
        let _ = self.capabilities.set(capabilities);
    }

    /// Starts the forwarder on `client` (once, at `initialize`). Until then notifications wait.
    pub(crate) fn start(&self, client: Client) {
        let Some(mut rx) = lock(&self.rx).take() else {
            return;
        };
        tokio::spawn(async move {
            let mut refused: HashSet<ProgressToken> = HashSet::new();
            while let Some(out) = rx.recv().await {
                match out {
                    Out::Notify(method, params) => {
                        if method == Progress::NAME && progress_token(&params, &refused) {
                            continue;
                        }
                        // A closed connection: keep draining so flushes still resolve.
                        let _ = client.notify(method, params).await;
                    }
                    Out::CreateProgress(token) => {
                        let params = WorkDoneProgressTokenParams {
                            token: token.clone(),
                        };
                        let created = super::request_ack::<WorkDoneProgressCreate>(
                            &client,
                            params,
                            CREATE_TIMEOUT,
                        )
                        .await;
                        if let Err(error) = created {
                            tracing::debug!(%error, "no progress token");
                            refused.insert(token);
                        }
                    }
                    Out::Flush(done) => {
                        let _ = done.send(());
                    }
                }
            }
        });
    }

    /// Resolves once everything queued so far was handed to the writer.
    pub async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Out::Flush(done)).is_ok() && lock(&self.rx).is_none() {
            let _ = wait.await;
        }
    }

    /// Queues the notification `M`; its wire name and params type come from the protocol
    /// table. Dropped when the client opted out of it.
    fn notify<M: ServerNotification>(&self, params: M::Params) {
        let method = M::NAME;
        if self
            .capabilities
            .get()
            .is_some_and(|c| c.opted_out_of(method))
        {
            return;
        }
        match serde_json::to_value(params) {
            // The receiver lives as long as the hub's forwarder; nobody to tell otherwise.
            Ok(params) => drop(self.tx.send(Out::Notify(method, params))),
            Err(error) => tracing::error!(%error, method, "cannot serialise a notification"),
        }
    }

    fn progress(&self, token: &Option<ProgressToken>, value: WorkDoneProgress) {
        if let Some(token) = token {
            self.notify::<Progress>(ProgressParams {
                token: token.clone(),
                value,
            });
        }
    }

    fn supports_progress(&self) -> bool {
        self.capabilities
            .get()
            .is_some_and(ClientCapabilities::supports_work_done_progress)
    }

    /// What cancelling `token` should do, while its operation runs.
    pub fn cancel_target(&self, token: &ProgressToken) -> Option<CancelTarget> {
        lock(&self.cancels).get(token).cloned()
    }

    /// A request starts an operation: `$/progress` begin on `progress` (if any), and
    /// `cancel` is what `window/workDoneProgress/cancel` on it does.
    pub fn begin(
        &self,
        session_id: &str,
        kind: OperationKind,
        progress: Option<ProgressToken>,
        cancel: tokio_util::sync::CancellationToken,
    ) {
        let title = match kind {
            OperationKind::Compaction => format!("Compacting session {session_id}"),
            OperationKind::BranchSummary => format!("Summarizing the branch of {session_id}"),
        };
        let mut op = Op::new(kind, CompactionReason::Manual);
        op.progress = progress.clone();
        if let Some(token) = &progress {
            lock(&self.cancels).insert(token.clone(), CancelTarget::Token(cancel));
        }
        lock(&self.ops).insert(session_id.to_owned(), op);
        self.progress(&progress, begin(title));
    }

    /// `$/progress` begin on `token` for work that is not an operation on an open session
    /// (opening one); it cannot be cancelled.
    pub fn work_begin(&self, token: &ProgressToken, title: String, message: String) {
        self.notify::<Progress>(ProgressParams {
            token: token.clone(),
            value: WorkDoneProgress::Begin {
                title,
                cancellable: Some(false),
                message: Some(message),
                percentage: Some(0),
            },
        });
    }

    /// `$/progress` report on `token` (see [`Hub::work_begin`]).
    pub fn work_report(&self, token: &ProgressToken, message: String, percentage: u32) {
        self.notify::<Progress>(ProgressParams {
            token: token.clone(),
            value: WorkDoneProgress::Report {
                cancellable: Some(false),
                message: Some(message),
                percentage: Some(percentage.min(100)),
            },
        });
    }

    /// `$/progress` end on `token` (see [`Hub::work_begin`]).
    pub fn work_end(&self, token: &ProgressToken, message: String) {
        self.notify::<Progress>(ProgressParams {
            token: token.clone(),
            value: WorkDoneProgress::End {
                message: Some(message),
            },
        });
    }

    /// The request's operation ended: flush what streamed, `$/progress` end with `message`
    /// (`done`, `cancelled` or the error).
    pub fn end(&self, session_id: &str, kind: OperationKind, message: String) {
        let op = {
            let mut ops = lock(&self.ops);
            match ops.get(session_id) {
                Some(op) if op.kind == kind && op.auto.is_none() => ops.remove(session_id),
                _ => None,
            }
        };
        if let Some(mut op) = op {
            self.flush_deltas(session_id, &mut op);
            self.release_held(&mut op);
            if let Some(token) = &op.progress {
                lock(&self.cancels).remove(token);
            }
            self.progress(
                &op.progress,
                WorkDoneProgress::End {
                    message: Some(message),
                },
            );
        }
    }

    fn with_op<T>(&self, session_id: &str, f: impl FnOnce(&Hub, &mut Op) -> T) -> Option<T> {
        let mut ops = lock(&self.ops);
        let op = ops.get_mut(session_id)?;
        Some(f(self, op))
    }

    fn phase(&self, session_id: &str, phase: Phase, percentage: Option<u32>) {
        self.with_op(session_id, |hub, op| {
            hub.flush_deltas(session_id, op);
            hub.release_held(op);
            let phase = to_proto::progress_phase(phase, op.characters);
            hub.report(
                op,
                phase.message(),
                Some(percentage.unwrap_or_else(|| phase.percentage())),
            );
        });
    }

    /// Sends a `$/progress` report; `percentage` only ever grows (`None` keeps it).
    fn report(&self, op: &mut Op, message: String, percentage: Option<u32>) {
        op.percentage = op.percentage.max(percentage.unwrap_or(0).min(100));
        op.last_report = Some((self.now)());
        op.held_report = false;
        self.progress(
            &op.progress,
            WorkDoneProgress::Report {
                cancellable: Some(true),
                message: Some(message),
                percentage: Some(op.percentage),
            },
        );
    }

    /// `summarizing (N characters)`, with the chunk when the input was split.
    fn report_characters(&self, op: &mut Op) {
        let characters = op.characters;
        let mut message = ProgressPhase::Summarizing { characters }.message();
        if let Some((chunk, chunks)) = op.chunk {
            message.push_str(&format!(", chunk {chunk} of {chunks}"));
        }
        self.report(op, message, None);
    }

    /// The character count the throttle held back, before any other message.
    fn release_held(&self, op: &mut Op) {
        if op.held_report {
            self.report_characters(op);
        }
    }

    fn delta(&self, session_id: &str, part: Purpose, text: &str) {
        self.with_op(session_id, |hub, op| {
            op.characters += text.chars().count() as u64;
            if let Some(part) = to_proto::summary_part(part) {
                match op.pending.iter_mut().find(|(p, _)| *p == part) {
                    Some((_, pending)) => pending.push_str(text),
                    None => op.pending.push((part, text.to_owned())),
                }
            }
            let now = (hub.now)();
            if op
                .last_delta
                .is_none_or(|last| now - last >= DELTA_INTERVAL)
            {
                hub.flush_deltas(session_id, op);
            }
            if op
                .last_report
                .is_none_or(|last| now - last >= PROGRESS_INTERVAL)
            {
                hub.report_characters(op);
            } else {
                op.held_report = true;
            }
        });
    }

    /// A summary's status changed (queued, waiting for the model, retrying, the next chunk):
    /// reported at once, after any held character count.
    fn status(&self, session_id: &str, part: Purpose, status: &SummaryStatus) {
        self.with_op(session_id, |hub, op| {
            hub.flush_deltas(session_id, op);
            hub.release_held(op);
            op.chunk = (status.chunks > 1).then_some((status.chunk, status.chunks));
            hub.report(op, to_proto::status_message(part, status), None);
        });
    }

    /// An attempt starts `part` over: text not sent yet is dropped, and a client that already
    /// received some is told to discard it (`reset: true`, empty text) before the new text.
    fn restart(&self, session_id: &str, part: Purpose) {
        let Some(part) = to_proto::summary_part(part) else {
            return;
        };
        self.with_op(session_id, |hub, op| {
            op.pending.retain(|(p, _)| *p != part);
            if let Some(at) = op.sent.iter().position(|p| *p == part) {
                op.sent.remove(at);
                hub.notify::<SessionCompactionDelta>(CompactionDelta {
                    session_id: session_id.to_owned(),
                    operation_id: op.operation_id.clone().unwrap_or_default(),
                    part,
                    text: String::new(),
                    reset: true,
                });
            }
        });
    }

    fn flush_deltas(&self, session_id: &str, op: &mut Op) {
        if op.pending.is_empty() {
            return;
        }
        op.last_delta = Some((self.now)());
        let operation_id = op.operation_id.clone().unwrap_or_default();
        for (part, text) in op.pending.drain(..) {
            if !op.sent.contains(&part) {
                op.sent.push(part);
            }
            self.notify::<SessionCompactionDelta>(CompactionDelta {
                session_id: session_id.to_owned(),
                operation_id: operation_id.clone(),
                part,
                text,
                reset: false,
            });
        }
    }

    fn send_started(&self, session_id: &str, op: &mut Op) {
        op.started_sent = true;
        self.notify::<SessionCompactionStarted>(CompactionStarted {
            session_id: session_id.to_owned(),
            operation_id: op.operation_id.clone().unwrap_or_default(),
            reason: op.reason,
            work_done_token: op.progress.clone(),
        });
    }

    fn on_event(&self, event: EngineEvent) {
        match event {
            EngineEvent::EntriesAppended {
                session_id,
                entries,
            } => {
                let Some(leaf_id) = entries.last().map(|e| e.id.clone()) else {
                    return;
                };
                self.notify::<SessionEntriesAppended>(EntriesAppended {
                    session_id,
                    entries: entries.iter().map(to_proto::entry).collect(),
                    leaf_id,
                    external: false,
                });
            }
            EngineEvent::ExternalEntries {
                session_id,
                entries,
                leaf_id,
            } => self.notify::<SessionEntriesAppended>(EntriesAppended {
                session_id,
                entries: entries.iter().map(to_proto::entry).collect(),
                leaf_id,
                external: true,
            }),
            EngineEvent::CompactionStarted {
                session_id,
                operation_id,
                reason,
            } => {
                let mut ops = lock(&self.ops);
                let op = ops.entry(session_id.clone()).or_insert_with(|| {
                    Op::new(
                        OperationKind::Compaction,
                        to_proto::compaction_reason(reason),
                    )
                });
                if op.started_sent {
                    return;
                }
                op.operation_id = Some(operation_id);
                op.reason = to_proto::compaction_reason(reason);
                self.send_started(&session_id, op);
            }
            EngineEvent::CompactionFinished {
                session_id,
                operation_id,
                outcome,
                aborted,
                error,
            } => {
                let mut ops = lock(&self.ops);
                if let Some(op) = ops.get_mut(&session_id) {
                    self.flush_deltas(&session_id, op);
                    self.release_held(op);
                    op.started_sent = false;
                }
                drop(ops);
                self.notify::<SessionCompactionFinished>(CompactionFinished {
                    session_id,
                    operation_id,
                    result: outcome.map(|o| to_proto::compact_result(&o)),
                    aborted,
                    error: to_proto::finished_error(aborted, error),
                });
            }
            EngineEvent::AutoCompactionStarted {
                session_id,
                operation_id,
                reason,
            } => self.auto_started(session_id, operation_id, reason),
            EngineEvent::AutoCompactionFinished {
                session_id,
                operation_id,
                result,
            } => {
                let Some(mut op) = lock(&self.ops).remove(&session_id) else {
                    return;
                };
                self.flush_deltas(&session_id, &mut op);
                self.release_held(&mut op);
                let end_message = if result.aborted {
                    "cancelled".to_owned()
                } else if let Some(message) = &result.error_message {
                    message.clone()
                } else if result.skipped {
                    "skipped".to_owned()
                } else {
                    "done".to_owned()
                };
                self.notify::<SessionAutoCompactionFinished>(AutoCompactionFinished {
                    session_id,
                    operation_id,
                    outcome: to_proto::auto_outcome(&result),
                });
                if let Some(token) = &op.progress {
                    lock(&self.cancels).remove(token);
                }
                self.progress(
                    &op.progress,
                    WorkDoneProgress::End {
                        message: Some(end_message),
                    },
                );
                if let Some(auto_continue) = op.auto_continue.take() {
                    self.notify::<SessionAutoContinue>(auto_continue);
                }
            }
            EngineEvent::TreeNavigated {
                session_id,
                new_leaf_id,
                old_leaf_id,
                summary_entry,
                from_extension,
                report,
            } => self.notify::<SessionTreeNavigated>(TreeNavigated {
                session_id,
                new_leaf_id,
                old_leaf_id,
                summary_entry: summary_entry.map(|e| to_proto::entry(&e)),
                from_extension,
                summarizer: to_proto::branch_summarizer(from_extension, report.as_deref()),
                summarizers: to_proto::branch_reports(report.as_deref()),
            }),
            EngineEvent::AutoContinue {
                session_id,
                prompt,
                entry_id,
            } => {
                let event = AutoContinue {
                    session_id: session_id.clone(),
                    prompt,
                    entry_id,
                };
                // The reference order: the auto-compaction ends, then the prompt follows.
                let mut ops = lock(&self.ops);
                match ops.get_mut(&session_id) {
                    Some(op) if op.auto.is_some() => op.auto_continue = Some(event),
                    _ => {
                        drop(ops);
                        self.notify::<SessionAutoContinue>(event);
                    }
                }
            }
        }
    }

    fn auto_started(&self, session_id: String, operation_id: String, reason: CompactReason) {
        let auto = to_proto::auto_reason(reason);
        let n = self.next_auto.fetch_add(1, Ordering::Relaxed);
        let mut op = Op::new(OperationKind::Compaction, auto.into());
        op.auto = Some(auto);
        op.operation_id = Some(operation_id.clone());
        if self.supports_progress() {
            let token = ProgressToken::String(format!("compactd-auto-{n}"));
            drop(self.tx.send(Out::CreateProgress(token.clone())));
            lock(&self.cancels).insert(
                token.clone(),
                CancelTarget::AbortCompaction(session_id.clone()),
            );
            op.progress = Some(token);
        }
        self.notify::<SessionAutoCompactionStarted>(AutoCompactionStarted {
            session_id: session_id.clone(),
            reason: auto,
            operation_id,
        });
        let title = match auto {
            AutoCompactionReason::Overflow => {
                format!("Recovering session {session_id} from a context overflow")
            }
            AutoCompactionReason::Threshold => format!("Auto-compacting session {session_id}"),
        };
        self.progress(&op.progress, begin(title));
        lock(&self.ops).insert(session_id, op);
    }
}

fn begin(title: String) -> WorkDoneProgress {
    WorkDoneProgress::Begin {
        title,
        cancellable: Some(true),
        message: Some(ProgressPhase::Preparing.message()),
        percentage: Some(0),
    }
}

/// Whether `$/progress` params name a token the client refused.
fn progress_token(params: &Value, refused: &HashSet<ProgressToken>) -> bool {
    if refused.is_empty() {
        return false;
    }
    serde_json::from_value::<ProgressToken>(params["token"].clone())
        .is_ok_and(|token| refused.contains(&token))
}

impl EventSink for Hub {
    fn emit(&self, event: EngineEvent) {
        self.on_event(event);
    }
}

/// The observer of one operation on one session.
pub struct OpObserver {
    pub hub: Arc<Hub>,
    pub session_id: String,
}

impl OperationObserver for OpObserver {
    fn phase(&self, phase: Phase, _message: &str, percentage: Option<u32>) {
        self.hub.phase(&self.session_id, phase, percentage);
    }

    fn delta(&self, part: Purpose, text: &str) {
        self.hub.delta(&self.session_id, part, text);
    }

    fn restart(&self, part: Purpose) {
        self.hub.restart(&self.session_id, part);
    }

    fn status(&self, part: Purpose, status: &SummaryStatus) {
        self.hub.status(&self.session_id, part, status);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use super::*;

    /// A hub whose clock reads `millis` after a fixed start, with a client that accepts
    /// progress; returns what it queued for the client.
    fn hub_at(millis: Arc<AtomicU64>) -> Hub {
        let start = Instant::now();
        let hub = Hub::with_clock(Box::new(move || {
            start + Duration::from_millis(millis.load(Ordering::SeqCst))
        }));
        let capabilities: ClientCapabilities =
            serde_json::from_value(serde_json::json!({"window": {"workDoneProgress": true}}))
                .expect("capabilities");
        hub.set_capabilities(capabilities);
        hub
    }

    fn progress_messages(hub: &Hub) -> Vec<WorkDoneProgress> {
        let mut rx = lock(&hub.rx).take().expect("the forwarder was not started");
        let mut out = Vec::new();
        while let Ok(message) = rx.try_recv() {
            if let Out::Notify(method, params) = message
                && method == Progress::NAME
            {
                let params: ProgressParams = serde_json::from_value(params).expect("progress");
                out.push(params.value);
            }
        }
        out
    }

    fn message(progress: &WorkDoneProgress) -> &str {
        match progress {
            WorkDoneProgress::Begin { message, .. }
            | WorkDoneProgress::Report { message, .. }
            | WorkDoneProgress::End { message } => message.as_deref().unwrap_or(""),
        }
    }

    #[test]
    fn a_slow_stream_is_reported_four_times_a_second_and_its_last_count_arrives() {
        // A local model: one token every 60 ms for 2,048 tokens (about two minutes). One report
        // per delta was 2,048 reports; throttled, at most one per 250 ms.
        let clock = Arc::new(AtomicU64::new(0));
        let hub = hub_at(clock.clone());
        let token = ProgressToken::String("tok".into());
        let cancel = tokio_util::sync::CancellationToken::new();
        hub.begin("s", OperationKind::BranchSummary, Some(token), cancel);
        hub.phase("s", Phase::Summarizing, None);
        for i in 0..2_048u64 {
            clock.store(i * 60, Ordering::SeqCst);
            hub.delta("s", Purpose::Branch, "abcd");
        }
        hub.end("s", OperationKind::BranchSummary, "done".into());
        let sent = progress_messages(&hub);
        let counts: Vec<&str> = sent
            .iter()
            .map(message)
            .filter(|m| m.starts_with("summarizing ("))
            .collect();
        let most = 2_048 * 60 / PROGRESS_INTERVAL.as_millis() as usize + 2;
        assert!(
            counts.len() <= most && counts.len() > most / 2,
            "{} reports",
            counts.len()
        );
        // The count held back by the throttle goes out before the end.
        assert_eq!(counts.last(), Some(&"summarizing (8192 characters)"));
        assert!(matches!(sent.last(), Some(WorkDoneProgress::End { .. })));
    }

    #[test]
    fn statuses_are_reported_at_once_with_their_chunk() {
        let clock = Arc::new(AtomicU64::new(0));
        let hub = hub_at(clock.clone());
        let token = ProgressToken::String("tok".into());
        let cancel = tokio_util::sync::CancellationToken::new();
        hub.begin("s", OperationKind::Compaction, Some(token), cancel);
        let status = |state, chunk| SummaryStatus {
            summarizer: "local/m".into(),
            chunk,
            chunks: 3,
            state,
        };
        hub.status(
            "s",
            Purpose::TurnPrefix,
            &status(crate::engine::SummaryState::Queued { ahead: 0 }, 1),
        );
        hub.status(
            "s",
            Purpose::History,
            &status(crate::engine::SummaryState::WaitingForModel, 2),
        );
        hub.delta("s", Purpose::History, "text");
        hub.end("s", OperationKind::Compaction, "done".into());
        let sent: Vec<String> = progress_messages(&hub)
            .iter()
            .map(|p| message(p).to_owned())
            .collect();
        assert_eq!(
            sent,
            [
                "preparing",
                "turn prefix: queued for local/m while its server is busy (chunk 1 of 3)",
                "history: waiting for the model local/m (chunk 2 of 3)",
                "summarizing (4 characters), chunk 2 of 3",
                "done",
            ]
        );
    }
}
