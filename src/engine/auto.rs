//! Auto-compaction (spec §4.1–4.4 with DESIGN §3 deviation 3): after an assistant reply is
//! appended, decide whether to recover from a context overflow or to compact because the
//! context passed the threshold, run that compaction, and report it.
//!
//! The decision is the pure [`decide`]; [`plan`] prunes and decides after an append, and
//! [`AutoPlan::execute`] carries the decision out. The rules that keep it from looping:
//! * one overflow recovery per overflow: when the latest compaction on the path was itself an
//!   overflow recovery and no successful reply came after it, a second overflow fails instead
//!   of compacting again;
//! * usage reported by a reply older than the latest compaction is ignored (it measured a
//!   context that no longer exists);
//! * a threshold compaction must leave the context at most [`target_after`] (80% of the
//!   threshold): when it does not, it compacts once more keeping less ([`keep_less`]), then
//!   prunes, and if that is still not enough it ends with the typed
//!   [`EngineError::CannotGetUnderThreshold`] and no auto-continue prompt (never a third try).

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::session::entry::{Entry, EntryKind};
use crate::session::message::{AssistantMessage, Content, UserMessage};
use crate::session::{AgentMessage, Session};
use crate::settings::Settings;
use crate::tokens::TokenCache;

use super::env::{EnvSource, token_counter};
use super::events::new_operation_id;
use super::events::{BackgroundState, DiscardReason, PauseReason};
use super::overflow::is_context_overflow;
use super::run::run_commit;
use super::run::run_compaction;
use super::state::{AutoMemory, OpGuard, OpKind, SessionState};
use super::{
    AutoResult, CompactEnv, CompactOptions, CompactReason, EngineError, EngineEvent, EventSink,
    OperationObserver,
};

/// The prompt appended after a successful threshold compaction when `autoContinue` is on.
pub const AUTO_CONTINUE_PROMPT: &str = "Continue if you have next steps.";
/// Error prefix of a failed overflow recovery (reference string).
pub const OVERFLOW_FAILED_PREFIX: &str = "Context overflow recovery failed: ";
/// Error prefix of a failed threshold compaction (reference string).
pub const AUTO_FAILED_PREFIX: &str = "Auto-compaction failed: ";

/// What the client should do after an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendAction {
    /// Nothing to do.
    Continue,
    /// A threshold compaction ran; with auto-continue, a synthetic prompt was appended: run a
    /// turn on the new context.
    Compacted,
    /// An overflow was recovered: re-send the request with the new context.
    Retry,
    /// Auto-compaction failed (see the auto result's `error_message`).
    Failed,
    /// A threshold compaction runs in the background (`AppendOutcome::pending`).
    Compacting,
    /// An overflow recovery runs in the background (`AppendOutcome::pending`).
    Recovering,
}

/// Why an appended entry leads to no auto-compaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// `compaction.enabled` is off.
    Disabled,
    /// The entry is not an assistant message.
    NotAssistant,
    /// The reply was aborted by the user.
    Aborted,
    /// An error reply that is not an overflow (or overflow recovery is off).
    ErrorReply,
    /// The reply is older than the latest compaction: its usage measured an older context.
    StaleUsage,
    /// The reply carries no usage.
    NoUsage,
    /// The context window is unknown (0): there is no threshold.
    UnknownWindow,
    /// The context is within the threshold.
    BelowThreshold { tokens: u64, threshold: u64 },
    /// Automatic compaction is paused for the session (thrash guard or circuit breaker) until
    /// the user acts.
    Paused(PauseReason),
}

/// The outcome of [`decide`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AutoDecision {
    Nothing(Skip),
    /// Move the leaf to `new_leaf` (the failed reply's parent: the reply stays in the file, off
    /// the path), compact with reason overflow, then ask the client to retry.
    RecoverOverflow {
        failed_entry_id: String,
        new_leaf: Option<String>,
    },
    /// The overflow follows an overflow recovery with no successful reply in between: do not
    /// compact again.
    RecoveryExhausted {
        reason: String,
    },
    /// Compact with reason threshold.
    CompactThreshold {
        tokens: u64,
        threshold: u64,
    },
}

/// Decides what auto-compaction does after `last` (normally the entry just appended, at the
/// end of `path`) was appended. `path` is root → leaf; `window` the context window of the
/// reply's model; `pruned_tokens` what pruning just saved inside the live context.
pub fn decide(
    path: &[Entry],
    last: &Entry,
    settings: &Settings,
    window: u64,
    pruned_tokens: u64,
    memory: &AutoMemory,
) -> AutoDecision {
    use AutoDecision::Nothing;
    if !settings.compaction.enabled {
        return Nothing(Skip::Disabled);
    }
    let Some(msg) = last.message().and_then(|m| m.as_assistant()) else {
        return Nothing(Skip::NotAssistant);
    };
    if msg.is_aborted() {
        return Nothing(Skip::Aborted);
    }
    let latest_compaction = path
        .iter()
        .rposition(|e| matches!(e.kind(), EntryKind::Compaction(_)));
    let stale = latest_compaction.is_some_and(|at| is_older_than(path, last, msg, at));

    if settings.compaction.overflow_recovery && !stale && is_context_overflow(msg, window) {
        if let Some(at) = latest_compaction
            && (is_overflow_recovery(&path[at])
                || memory.overflow_recoveries.contains(&path[at].id))
            && !successful_reply_after(path, at, last)
        {
            return AutoDecision::RecoveryExhausted {
                reason: "the context still overflows right after an overflow recovery".into(),
            };
        }
        return AutoDecision::RecoverOverflow {
            failed_entry_id: last.id.clone(),
            new_leaf: last.parent_id.clone(),
        };
    }
    if msg.is_error() {
        return Nothing(Skip::ErrorReply);
    }
    if stale {
        return Nothing(Skip::StaleUsage);
    }
    let Some(usage) = &msg.usage else {
        return Nothing(Skip::NoUsage);
    };
    let Some(threshold) = settings.threshold_tokens(window) else {
        return Nothing(Skip::UnknownWindow);
    };
    let tokens = usage.context_tokens().saturating_sub(pruned_tokens);
    if tokens > threshold {
        if let Some(reason) = memory.paused {
            return Nothing(Skip::Paused(reason));
        }
        AutoDecision::CompactThreshold { tokens, threshold }
    } else {
        Nothing(Skip::BelowThreshold { tokens, threshold })
    }
}

/// A decided auto-compaction, ready to run: everything it needs is owned, so it can run
/// inline (the append waits) or in the background ([`PendingAuto`]).
pub struct AutoPlan {
    events: Arc<dyn EventSink>,
    state: Arc<SessionState>,
    decision: AutoDecision,
    reason: CompactReason,
    operation_id: String,
    env: CompactEnv,
    cache: Arc<TokenCache>,
    /// The auto slot, taken when the plan was made (so a manual compaction started meanwhile
    /// fails with `compactionInProgress`); `None` when another compaction holds it.
    guard: Option<OpGuard>,
    /// The caller's token: a second compaction that keeps less runs under it.
    cancel: CancellationToken,
    /// What the provider counts beyond our estimate (system prompt, tool definitions), sent
    /// again with the compacted context.
    overhead: u64,
}

impl std::fmt::Debug for AutoPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AutoPlan")
            .field("session", &self.state.id)
            .field("decision", &self.decision)
            .field("operation_id", &self.operation_id)
            .finish_non_exhaustive()
    }
}

/// Prunes, then [`decide`]s on `last` (the last assistant message of an append) and, when a
/// compaction (or a failed recovery) is due, returns the plan, whose environment comes from
/// `source` and whose events go to `events`. The caller holds the session's write gate. The
/// run's cancellation token is a child of `cancel`.
pub(crate) async fn plan(
    state: &Arc<SessionState>,
    last: &Entry,
    cancel: &CancellationToken,
    source: &EnvSource,
    events: Arc<dyn EventSink>,
) -> Result<Option<AutoPlan>, EngineError> {
    let settings = state.effective_settings()?;
    if !settings.compaction.enabled {
        return Ok(None);
    }
    let counter = token_counter(&settings, None)?;
    let cache = state.cache_for(&counter);
    let (decision, window, counted) = {
        let mut session = state.session.write().await;
        state.refresh_locked(&mut session)?;
        let pruned = if settings.compaction.prune_enabled {
            let outcome = super::prune::prune_live_cached(&mut session, &cache, false)?;
            state.invalidate_counts(&outcome.entry_ids);
            outcome.tokens_saved
        } else {
            0
        };
        let window = reply_window(last, &session, &settings);
        let path: Vec<Entry> = session.path_to_leaf().into_iter().cloned().collect();
        let decision = {
            let mut memory = state.auto_memory();
            let decision = decide(&path, last, &settings, window, pruned, &memory);
            if !matches!(
                decision,
                AutoDecision::Nothing(Skip::StaleUsage | Skip::NotAssistant | Skip::Disabled)
            ) {
                memory.count_reply();
            }
            decision
        };
        let counted = super::usage::estimate_context_through(&session, &cache, &last.id);
        (decision, window, counted)
    };
    if let AutoDecision::CompactThreshold { .. } = &decision {
        let paused = state.auto_memory().compaction_due();
        if let Some(reason) = paused {
            // The context refills as fast as it is compacted: compacting again would not help.
            super::background::discard(state, events.as_ref(), DiscardReason::Aborted);
            report_pause(state, events.as_ref(), reason);
            return Ok(None);
        }
    }
    let reason = match &decision {
        AutoDecision::Nothing(Skip::BelowThreshold { tokens, threshold }) => {
            let lead = settings.compaction.background.lead(*threshold);
            if settings.compaction.background.enabled
                && *tokens >= threshold.saturating_sub(lead)
                && !state.ops.is_compacting()
                && state.auto_memory().paused.is_none()
            {
                let env = source.env(&state.id, settings, window, None)?;
                super::background::start(state, Some(last.id.clone()), false, env, events);
            }
            return Ok(None);
        }
        AutoDecision::Nothing(_) => return Ok(None),
        AutoDecision::RecoverOverflow { .. } | AutoDecision::RecoveryExhausted { .. } => {
            CompactReason::Overflow
        }
        AutoDecision::CompactThreshold { .. } => CompactReason::Threshold,
    };
    let overhead = match &decision {
        AutoDecision::CompactThreshold { tokens, .. } => fixed_overhead(*tokens, counted, window),
        _ => 0,
    };
    let guard = match &decision {
        AutoDecision::RecoveryExhausted { .. } => None,
        _ => state.ops.start(OpKind::Auto, cancel),
    };
    let operation_id = new_operation_id("auto");
    let mut env = source.env(&state.id, settings, window, None)?;
    env.operation_id = operation_id.clone();
    Ok(Some(AutoPlan {
        events,
        state: Arc::clone(state),
        decision,
        reason,
        operation_id,
        env,
        cache,
        guard,
        cancel: cancel.clone(),
        overhead,
    }))
}

/// The provider's tokens beyond what we count: `usage` (the reply's context tokens, minus
/// pruning savings) less our estimate of the messages that reply saw (`counted`, the reply
/// included). This is the fixed part of every request (system prompt, tool definitions); it can
/// never be more than the window leaves beside what we count.
pub fn fixed_overhead(usage: u64, counted: u64, window: u64) -> u64 {
    usage
        .saturating_sub(counted)
        .min(window.saturating_sub(counted))
}

impl AutoPlan {
    /// The operation id its events carry.
    pub fn operation_id(&self) -> &str {
        &self.operation_id
    }

    /// Whether it writes an armed background result that is ready: then it takes no longer
    /// than an append, and runs before the answer even without `waitForCompaction`.
    pub fn commits_at_once(&self) -> bool {
        matches!(
            self.decision,
            AutoDecision::CompactThreshold { .. } | AutoDecision::RecoverOverflow { .. }
        ) && super::background::is_ready(&self.state)
    }

    /// What an append answers while this plan runs in the background.
    pub fn running_action(&self) -> AppendAction {
        match self.reason {
            CompactReason::Overflow => AppendAction::Recovering,
            _ => AppendAction::Compacting,
        }
    }

    /// Runs the plan: the events (`AutoCompactionStarted`, `CompactionStarted`/`Finished`
    /// around the compaction itself, `AutoCompactionFinished`), the compaction, the re-measure
    /// after a threshold compaction, and the auto-continue prompt.
    pub async fn execute(
        self,
        observer: &dyn OperationObserver,
    ) -> Result<(AppendAction, AutoResult), EngineError> {
        let AutoPlan {
            events,
            state,
            decision,
            reason,
            operation_id,
            env,
            cache,
            guard,
            cancel,
            overhead,
        } = self;
        let session_id = state.id.clone();
        events.emit(EngineEvent::AutoCompactionStarted {
            session_id: session_id.clone(),
            operation_id: operation_id.clone(),
            reason,
        });
        let mut result = AutoResult::new(reason);
        let mut continue_after = false;
        let compact = |guard: Option<OpGuard>| {
            let (events, env, state) = (events.as_ref(), &env, &state);
            async move {
                let Some(guard) = guard else {
                    return Err(EngineError::CompactionInProgress);
                };
                compact_auto(events, state, env, reason, guard, observer, overhead).await
            }
        };
        let action = match decision {
            AutoDecision::RecoveryExhausted { reason: why } => {
                result.error_message = Some(format!("{OVERFLOW_FAILED_PREFIX}{why}"));
                AppendAction::Failed
            }
            AutoDecision::RecoverOverflow { new_leaf, .. } => {
                let moved = match &guard {
                    Some(_) => state
                        .session
                        .write()
                        .await
                        .move_leaf(new_leaf.as_deref())
                        .map_err(EngineError::from),
                    None => Ok(()),
                };
                match moved {
                    Err(e) => finish_error(&mut result, e, OVERFLOW_FAILED_PREFIX),
                    Ok(()) => match compact(guard).await {
                        Ok(outcome) => {
                            if let Some(id) = &outcome.entry_id {
                                state.auto_memory().overflow_recoveries.insert(id.clone());
                            }
                            result.outcome = Some(Arc::new(outcome));
                            result.will_retry = true;
                            AppendAction::Retry
                        }
                        Err(e) => finish_error(&mut result, e, OVERFLOW_FAILED_PREFIX),
                    },
                }
            }
            AutoDecision::CompactThreshold { threshold, .. } => match compact(guard).await {
                Ok(mut outcome) => {
                    let target = target_after(threshold);
                    let mut after = measure(&state, &cache, overhead).await;
                    if after > target {
                        let keep = keep_less(&outcome, after, target, overhead, &env);
                        let guard = keep.and_then(|_| state.ops.start(OpKind::Auto, &cancel));
                        if let (Some(keep), Some(guard)) = (keep, guard) {
                            let opts = CompactOptions {
                                reason,
                                keep_recent_tokens: Some(keep),
                                ..CompactOptions::manual()
                            };
                            let run = run_compaction(
                                events.as_ref(),
                                &state,
                                &env,
                                opts,
                                guard,
                                observer,
                            )
                            .await;
                            match run {
                                Ok(second) => {
                                    outcome = second;
                                    after = measure(&state, &cache, overhead).await;
                                }
                                // The cut cannot move (one turn is all that is kept), or the
                                // run failed: the first compaction stands; prune and report.
                                Err(e) => tracing::info!(
                                    session = session_id,
                                    error = %e,
                                    "compacting again keeping less did not run"
                                ),
                            }
                        }
                    }
                    if after > target && env.settings.compaction.prune_enabled {
                        // The summary and the kept turns are too big: drop old tool outputs.
                        let mut session = state.session.write().await;
                        let pruned = super::prune::prune_live_cached(&mut session, &cache, false)?;
                        state.invalidate_counts(&pruned.entry_ids);
                        drop(session);
                        after = measure(&state, &cache, overhead).await;
                    }
                    result.outcome = Some(Arc::new(outcome));
                    if after > target {
                        let e = EngineError::CannotGetUnderThreshold {
                            tokens: after,
                            threshold: target,
                        };
                        result.error_kind = Some(e.kind());
                        result.error_message = Some(format!("{AUTO_FAILED_PREFIX}{e}"));
                        AppendAction::Failed
                    } else {
                        continue_after = env.settings.compaction.auto_continue;
                        AppendAction::Compacted
                    }
                }
                Err(e) => finish_error(&mut result, e, AUTO_FAILED_PREFIX),
            },
            AutoDecision::Nothing(_) => AppendAction::Continue,
        };
        if reason == CompactReason::Threshold
            && matches!(action, AppendAction::Compacted | AppendAction::Failed)
        {
            let paused = state
                .auto_memory()
                .compaction_ended(action == AppendAction::Compacted);
            if let Some(pause) = paused {
                report_pause(&state, events.as_ref(), pause);
            }
        }
        events.emit(EngineEvent::AutoCompactionFinished {
            session_id: session_id.clone(),
            operation_id,
            result: Box::new(result.clone()),
        });
        // As in the reference, the follow-up prompt comes after the end event.
        if continue_after {
            let entry = append_continue(&state).await?;
            result.continue_entry_id = Some(entry.id.clone());
            events.emit(EngineEvent::EntriesAppended {
                session_id: session_id.clone(),
                entries: vec![entry.clone()],
            });
            events.emit(EngineEvent::AutoContinue {
                session_id,
                prompt: AUTO_CONTINUE_PROMPT.to_owned(),
                entry_id: entry.id,
            });
        }
        Ok((action, result))
    }
}

/// An auto-compaction left to run after the append answered (`waitForCompaction: false`). It
/// holds the session's write gate, so later mutating calls on the session wait behind it.
pub struct PendingAuto {
    pub(crate) plan: AutoPlan,
    pub(crate) gate: tokio::sync::OwnedMutexGuard<()>,
}

impl std::fmt::Debug for PendingAuto {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.plan.fmt(f)
    }
}

impl PendingAuto {
    /// The operation id its events carry.
    pub fn operation_id(&self) -> &str {
        self.plan.operation_id()
    }

    /// Runs the compaction to its end (see [`AutoPlan::execute`]); releases the gate after.
    pub async fn run(
        self,
        observer: &dyn OperationObserver,
    ) -> Result<(AppendAction, AutoResult), EngineError> {
        let PendingAuto { plan, gate } = self;
        let out = plan.execute(observer).await;
        drop(gate);
        out
    }
}

/// The context window for the reply's `provider/model`, else the session's.
fn reply_window(last: &Entry, session: &Session, settings: &Settings) -> u64 {
    let model =
        last.message()
            .and_then(|m| m.as_assistant())
            .and_then(|a| match (&a.provider, &a.model) {
                (Some(p), Some(m)) => Some(format!("{p}/{m}")),
                (None, Some(m)) => Some(m.clone()),
                _ => None,
            });
    match model {
        Some(m) => super::usage::window_for(Some(&m), settings),
        None => super::usage::session_window(session, settings),
    }
}

/// The most context an automatic compaction may leave: 80% of the threshold, so the next
/// turns do not cross it again at once.
pub fn target_after(threshold: u64) -> u64 {
    threshold.saturating_mul(4) / 5
}

/// How many recent tokens a second compaction may keep so that the context lands under
/// `target`, after the first `outcome` left it at `after`: what remains of the target beside
/// the fixed `overhead` and the summary (counted with a tenth more, as the next summary also
/// takes in what the cut moves past). `None` when keeping less cannot help: nothing would be
/// left to keep, or the budget is no smaller than what the settings keep already.
fn keep_less(
    outcome: &super::CompactOutcome,
    after: u64,
    target: u64,
    overhead: u64,
    env: &CompactEnv,
) -> Option<u64> {
    let summary = env.counter.count_text(&outcome.summary);
    let summary = summary + summary / 10;
    let keep = target.checked_sub(overhead + summary)?;
    let kept_now = after.saturating_sub(overhead + summary);
    (keep > 0 && keep < env.settings.compaction.keep_recent_tokens && keep < kept_now)
        .then_some(keep)
}

/// The estimated context at the leaf plus the provider's fixed `overhead`.
async fn measure(state: &SessionState, cache: &TokenCache, overhead: u64) -> u64 {
    let session = state.session.read().await;
    super::usage::estimate_context(&session, cache) + overhead
}

/// Reports that automatic compaction paused for `state`'s session.
fn report_pause(state: &SessionState, events: &dyn EventSink, reason: PauseReason) {
    let count = {
        let memory = state.auto_memory();
        match reason {
            PauseReason::Thrashing => memory.quick_refills,
            PauseReason::RepeatedFailures => memory.consecutive_failures,
        }
    };
    tracing::warn!(
        session = state.id,
        reason = reason.name(),
        count,
        "automatic compaction paused"
    );
    events.emit(EngineEvent::AutoCompactionPaused {
        session_id: state.id.clone(),
        reason,
        count,
    });
}

/// One automatic compaction in the slot `guard` holds: the session's armed background result
/// when there is one that fits at the leaf (waiting for it if it still runs), else a
/// compaction of the branch as it is now.
async fn compact_auto(
    events: &dyn EventSink,
    state: &SessionState,
    env: &CompactEnv,
    reason: CompactReason,
    guard: OpGuard,
    observer: &dyn OperationObserver,
    overhead: u64,
) -> Result<super::CompactOutcome, EngineError> {
    let armed = super::background::take_for_commit(state, events, None, guard.token()).await;
    if let Some((background_id, armed)) = armed {
        let limit = env
            .settings
            .threshold_tokens(env.context_window)
            .map(target_after);
        let fits = {
            let session = state.session.read().await;
            let path = session.path_to_leaf();
            armed.fits(&path).and_then(|()| {
                let after = armed.tokens_after_on(&path, env.counter.as_ref()) + overhead;
                match limit {
                    Some(limit) if after > limit => Err(DiscardReason::DoesNotFit),
                    _ => Ok(()),
                }
            })
        };
        match fits {
            Ok(()) => {
                let run = run_commit(events, state, env, armed, guard).await;
                let report = match &run {
                    Ok(_) => Ok(BackgroundState::Committed),
                    Err(EngineError::Cancelled(_)) => Err((DiscardReason::Aborted, None)),
                    Err(e) => Err((DiscardReason::Failed, Some(e.to_string()))),
                };
                super::background::report(state, events, &background_id, report);
                return run;
            }
            Err(why) => super::background::report(state, events, &background_id, Err((why, None))),
        }
    }
    if guard.token().is_cancelled() {
        return Err(EngineError::compaction_cancelled());
    }
    let opts = CompactOptions {
        reason,
        ..CompactOptions::manual()
    };
    run_compaction(events, state, env, opts, guard, observer).await
}

/// Sorts a failed compaction into skipped / aborted / failed.
fn finish_error(result: &mut AutoResult, e: EngineError, prefix: &str) -> AppendAction {
    match e {
        EngineError::NothingToCompact
        | EngineError::AlreadyCompacted
        | EngineError::CompactionInProgress => {
            result.skipped = true;
            AppendAction::Continue
        }
        EngineError::Cancelled(_) => {
            result.aborted = true;
            AppendAction::Continue
        }
        e => {
            result.error_kind = Some(e.kind());
            result.error_message = Some(format!("{prefix}{e}"));
            AppendAction::Failed
        }
    }
}

/// Appends the synthetic auto-continue prompt.
async fn append_continue(state: &SessionState) -> Result<Entry, EngineError> {
    let message = AgentMessage::User(UserMessage {
        content: Content::Text(AUTO_CONTINUE_PROMPT.to_owned()),
        synthetic: Some(true),
        timestamp: Some(serde_json::Value::from(crate::session::ids::now_ms())),
        extra: Default::default(),
    });
    let mut session = state.session.write().await;
    Ok(session.append(EntryKind::Message(message))?.clone())
}

/// Whether the reply in `last` predates the compaction at `path[at]`: it sits before it on
/// the path, or its own timestamp is earlier (a reply to a request sent before the compaction).
fn is_older_than(path: &[Entry], last: &Entry, msg: &AssistantMessage, at: usize) -> bool {
    if path
        .iter()
        .position(|e| e.id == last.id)
        .is_some_and(|pos| pos < at)
    {
        return true;
    }
    let compacted_at = crate::session::ids::ms_from_iso(&path[at].timestamp);
    let replied_at = msg.timestamp.as_ref().and_then(serde_json::Value::as_i64);
    matches!((replied_at, compacted_at), (Some(r), Some(c)) if r < c)
}

/// Whether `entry` is a compaction written by overflow recovery (its `details.reason`).
fn is_overflow_recovery(entry: &Entry) -> bool {
    match entry.kind() {
        EntryKind::Compaction(c) => c
            .details
            .as_ref()
            .and_then(|d| d.get("reason"))
            .and_then(serde_json::Value::as_str)
            .is_some_and(|r| r == CompactReason::Overflow.name()),
        _ => false,
    }
}

/// Whether an assistant reply that neither failed nor was aborted sits on the path after the
/// compaction at `path[at]`, not counting `last` itself.
fn successful_reply_after(path: &[Entry], at: usize, last: &Entry) -> bool {
    path[at + 1..]
        .iter()
        .filter(|e| e.id != last.id)
        .filter_map(|e| e.message().and_then(|m| m.as_assistant()))
        .any(|a| !a.is_error() && !a.is_aborted())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    const WINDOW: u64 = 200_000;
    // The default threshold for a 200k window: 200000 - 16384.
    const THRESHOLD: u64 = 183_616;

    fn entry(v: Value) -> Entry {
        Entry::from_value(v).unwrap()
    }

    fn user(id: &str, parent: Option<&str>) -> Entry {
        entry(json!({"type":"message","id":id,"parentId":parent,
            "timestamp":"2026-01-01T08:00:00.000Z",
            "message":{"role":"user","content":"hi","timestamp":1767254400000_i64}}))
    }

    fn reply(id: &str, parent: &str, ts_ms: i64, extra: Value) -> Entry {
        let mut message = json!({"role":"assistant","content":[{"type":"text","text":"ok"}],
            "provider":"anthropic","model":"claude-sonnet-4-5","stopReason":"stop",
            "timestamp":ts_ms});
        for (k, v) in extra.as_object().unwrap() {
            message[k] = v.clone();
        }
        entry(json!({"type":"message","id":id,"parentId":parent,
            "timestamp":crate::session::ids::iso_from_ms(ts_ms),"message":message}))
    }

    fn usage(total: u64) -> Value {
        json!({"usage":{"input":total,"output":0,"cacheRead":0,"cacheWrite":0,"totalTokens":total}})
    }

    fn compaction(id: &str, parent: &str, iso: &str) -> Entry {
        entry(
            json!({"type":"compaction","id":id,"parentId":parent,"timestamp":iso,
            "summary":"s","firstKeptEntryId":"u1","tokensBefore":1}),
        )
    }

    fn overflow_error() -> Value {
        json!({"stopReason":"error","errorMessage":"prompt is too long: 210000 tokens > 200000 maximum"})
    }

    // 2026-01-01T09:00:00Z
    const T9: i64 = 1_767_258_000_000;

    fn run(path: &[Entry], settings: &Settings, window: u64, memory: &AutoMemory) -> AutoDecision {
        decide(path, path.last().unwrap(), settings, window, 0, memory)
    }

    #[test]
    fn disabled_does_nothing_even_on_overflow() {
        let mut s = Settings::default();
        s.compaction.enabled = false;
        let path = vec![user("u1", None), reply("a1", "u1", T9, overflow_error())];
        assert_eq!(
            run(&path, &s, WINDOW, &AutoMemory::default()),
            AutoDecision::Nothing(Skip::Disabled)
        );
    }

    #[test]
    fn aborted_reply_does_nothing() {
        let path = vec![
            user("u1", None),
            reply(
                "a1",
                "u1",
                T9,
                json!({"stopReason":"aborted","usage":usage(WINDOW)["usage"]}),
            ),
        ];
        assert_eq!(
            run(&path, &Settings::default(), WINDOW, &AutoMemory::default()),
            AutoDecision::Nothing(Skip::Aborted)
        );
    }

    #[test]
    fn non_assistant_does_nothing() {
        let path = vec![user("u1", None)];
        assert_eq!(
            run(&path, &Settings::default(), WINDOW, &AutoMemory::default()),
            AutoDecision::Nothing(Skip::NotAssistant)
        );
    }

    #[test]
    fn overflow_error_recovers_moving_the_leaf_to_the_parent() {
        let path = vec![user("u1", None), reply("a1", "u1", T9, overflow_error())];
        assert_eq!(
            run(&path, &Settings::default(), WINDOW, &AutoMemory::default()),
            AutoDecision::RecoverOverflow {
                failed_entry_id: "a1".into(),
                new_leaf: Some("u1".into())
            }
        );
    }

    #[test]
    fn silent_overflow_recovers_but_not_with_an_unknown_window() {
        let silent = json!({"usage":{"input":150000,"cacheRead":60000,"output":10}});
        let path = vec![user("u1", None), reply("a1", "u1", T9, silent)];
        let s = Settings::default();
        let memory = AutoMemory::default();
        assert!(matches!(
            run(&path, &s, WINDOW, &memory),
            AutoDecision::RecoverOverflow { .. }
        ));
        // Window 0: no silent-overflow check and no threshold (spec §13 #10).
        assert_eq!(
            run(&path, &s, 0, &memory),
            AutoDecision::Nothing(Skip::UnknownWindow)
        );
    }

    #[test]
    fn overflow_recovery_off_treats_the_error_as_an_error() {
        let mut s = Settings::default();
        s.compaction.overflow_recovery = false;
        let path = vec![user("u1", None), reply("a1", "u1", T9, overflow_error())];
        assert_eq!(
            run(&path, &s, WINDOW, &AutoMemory::default()),
            AutoDecision::Nothing(Skip::ErrorReply)
        );
    }

    #[test]
    fn other_errors_never_compact() {
        let err = json!({"stopReason":"error","errorMessage":"rate limited","usage":usage(WINDOW)["usage"]});
        let path = vec![user("u1", None), reply("a1", "u1", T9, err)];
        assert_eq!(
            run(&path, &Settings::default(), WINDOW, &AutoMemory::default()),
            AutoDecision::Nothing(Skip::ErrorReply)
        );
    }

    #[test]
    fn second_overflow_right_after_a_recovery_is_not_recovered_again() {
        let path = vec![
            user("u1", None),
            compaction("c1", "u1", "2026-01-01T08:30:00.000Z"),
            reply("a2", "c1", T9, overflow_error()),
        ];
        let mut memory = AutoMemory::default();
        memory.overflow_recoveries.insert("c1".into());
        assert!(matches!(
            run(&path, &Settings::default(), WINDOW, &memory),
            AutoDecision::RecoveryExhausted { .. }
        ));
        // A threshold compaction before it does not count as a recovery attempt.
        assert!(matches!(
            run(&path, &Settings::default(), WINDOW, &AutoMemory::default()),
            AutoDecision::RecoverOverflow { .. }
        ));
    }

    #[test]
    fn overflow_after_a_successful_reply_since_the_recovery_is_recovered() {
        let path = vec![
            user("u1", None),
            compaction("c1", "u1", "2026-01-01T08:30:00.000Z"),
            reply("a2", "c1", T9, usage(1000)),
            user("u3", Some("a2")),
            reply("a3", "u3", T9 + 1000, overflow_error()),
        ];
        let mut memory = AutoMemory::default();
        memory.overflow_recoveries.insert("c1".into());
        assert!(matches!(
            run(&path, &Settings::default(), WINDOW, &memory),
            AutoDecision::RecoverOverflow { .. }
        ));
    }

    #[test]
    fn stale_usage_after_a_compaction_is_ignored() {
        // The reply's own timestamp predates the compaction that now precedes it on the path.
        let path = vec![
            user("u1", None),
            compaction("c1", "u1", "2026-01-01T10:00:00.000Z"),
            reply("a1", "c1", T9, usage(WINDOW)),
        ];
        let s = Settings::default();
        let memory = AutoMemory::default();
        assert_eq!(
            run(&path, &s, WINDOW, &memory),
            AutoDecision::Nothing(Skip::StaleUsage)
        );
        // A reply kept before the compaction on the path is stale as well.
        let kept = vec![
            user("u1", None),
            reply("a1", "u1", T9, usage(WINDOW)),
            compaction("c1", "a1", "2026-01-01T08:00:00.000Z"),
        ];
        assert_eq!(
            decide(&kept, &kept[1], &s, WINDOW, 0, &memory),
            AutoDecision::Nothing(Skip::StaleUsage)
        );
        // A stale overflow is not recovered either.
        let stale_overflow = vec![
            user("u1", None),
            compaction("c1", "u1", "2026-01-01T10:00:00.000Z"),
            reply("a1", "c1", T9, overflow_error()),
        ];
        assert_eq!(
            run(&stale_overflow, &s, WINDOW, &memory),
            AutoDecision::Nothing(Skip::ErrorReply)
        );
    }

    #[test]
    fn threshold_is_exclusive_and_prune_savings_count() {
        let s = Settings::default();
        let memory = AutoMemory::default();
        let at = vec![user("u1", None), reply("a1", "u1", T9, usage(THRESHOLD))];
        assert_eq!(
            run(&at, &s, WINDOW, &memory),
            AutoDecision::Nothing(Skip::BelowThreshold {
                tokens: THRESHOLD,
                threshold: THRESHOLD
            })
        );
        let above = vec![
            user("u1", None),
            reply("a1", "u1", T9, usage(THRESHOLD + 1)),
        ];
        assert_eq!(
            run(&above, &s, WINDOW, &memory),
            AutoDecision::CompactThreshold {
                tokens: THRESHOLD + 1,
                threshold: THRESHOLD
            }
        );
        assert!(matches!(
            decide(&above, &above[1], &s, WINDOW, 10, &memory),
            AutoDecision::Nothing(Skip::BelowThreshold { .. })
        ));
    }

    #[test]
    fn fresh_usage_after_a_compaction_counts() {
        let path = vec![
            user("u1", None),
            compaction("c1", "u1", "2026-01-01T08:30:00.000Z"),
            reply("a2", "c1", T9, usage(THRESHOLD + 5)),
        ];
        assert!(matches!(
            run(&path, &Settings::default(), WINDOW, &AutoMemory::default()),
            AutoDecision::CompactThreshold { .. }
        ));
    }

    #[test]
    fn no_usage_does_nothing() {
        let path = vec![user("u1", None), reply("a1", "u1", T9, json!({}))];
        assert_eq!(
            run(&path, &Settings::default(), WINDOW, &AutoMemory::default()),
            AutoDecision::Nothing(Skip::NoUsage)
        );
    }

    #[test]
    fn three_quick_refills_in_a_row_pause_threshold_compaction() {
        let mut memory = AutoMemory::default();
        // The first compaction is never a refill.
        assert_eq!(memory.compaction_due(), None);
        assert_eq!(memory.compaction_ended(true), None);
        for round in 1..=3 {
            for _ in 0..2 {
                memory.count_reply();
            }
            let paused = memory.compaction_due();
            if round < 3 {
                assert_eq!(paused, None, "round {round}");
                memory.compaction_ended(true);
            } else {
                assert_eq!(paused, Some(PauseReason::Thrashing));
            }
        }
        let above = vec![
            user("u1", None),
            reply("a1", "u1", T9, usage(THRESHOLD + 1)),
        ];
        assert_eq!(
            run(&above, &Settings::default(), WINDOW, &memory),
            AutoDecision::Nothing(Skip::Paused(PauseReason::Thrashing))
        );
        // An overflow is still recovered.
        let overflow = vec![user("u1", None), reply("a1", "u1", T9, overflow_error())];
        assert!(matches!(
            run(&overflow, &Settings::default(), WINDOW, &memory),
            AutoDecision::RecoverOverflow { .. }
        ));
        memory.resume();
        assert!(matches!(
            run(&above, &Settings::default(), WINDOW, &memory),
            AutoDecision::CompactThreshold { .. }
        ));
    }

    #[test]
    fn a_slow_refill_resets_the_thrash_count() {
        let mut memory = AutoMemory::default();
        memory.compaction_due();
        memory.compaction_ended(true);
        for _ in 0..2 {
            memory.count_reply();
            assert_eq!(memory.compaction_due(), None);
            memory.compaction_ended(true);
        }
        for _ in 0..4 {
            memory.count_reply();
        }
        assert_eq!(memory.compaction_due(), None);
        assert_eq!(memory.quick_refills, 0);
    }

    #[test]
    fn three_failed_compactions_in_a_row_open_the_breaker_until_the_user_acts() {
        let mut memory = AutoMemory::default();
        assert_eq!(memory.compaction_ended(false), None);
        assert_eq!(
            memory.compaction_ended(true),
            None,
            "a success resets the count"
        );
        assert_eq!(memory.compaction_ended(false), None);
        assert_eq!(memory.compaction_ended(false), None);
        assert_eq!(
            memory.compaction_ended(false),
            Some(PauseReason::RepeatedFailures)
        );
        memory.resume();
        assert_eq!(memory.paused, None);
        assert_eq!(memory.consecutive_failures, 0);
    }

    #[test]
    fn the_target_after_a_compaction_is_80_percent_of_the_threshold() {
        assert_eq!(target_after(10_000), 8_000);
        assert_eq!(target_after(7), 5);
    }

    #[test]
    fn the_fixed_overhead_is_bounded_by_what_the_window_leaves() {
        assert_eq!(fixed_overhead(190_000, 150_000, 200_000), 40_000);
        assert_eq!(fixed_overhead(100_000, 150_000, 200_000), 0);
        // A usage above the window cannot mean more overhead than the window leaves.
        assert_eq!(fixed_overhead(260_000, 150_000, 200_000), 50_000);
    }
}
