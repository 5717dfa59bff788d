//! Auto-compaction (spec §4.1–4.4 with DESIGN §3 deviation 3): after an assistant reply is
//! appended, decide whether to recover from a context overflow or to compact because the
//! context passed the threshold, run that compaction, and report it.
//!
//! The decision is the pure [`decide`]; the registry runs it and carries out the result with
//! [`run`]. The rules that keep it from looping:
//! * one overflow recovery per overflow: when the latest compaction on the path was itself an
//!   overflow recovery and no successful reply came after it, a second overflow fails instead
//!   of compacting again;
//! * usage reported by a reply older than the latest compaction is ignored (it measured a
//!   context that no longer exists);
//! * a threshold compaction that leaves the context above the threshold ends with the typed
//!   [`EngineError::CannotGetUnderThreshold`] and no auto-continue prompt.

use std::collections::HashSet;

use tokio_util::sync::CancellationToken;

use crate::session::entry::{Entry, EntryKind};
use crate::session::message::{AssistantMessage, Content, UserMessage};
use crate::session::{AgentMessage, Session};
use crate::settings::Settings;

use super::registry::{AppendAction, Engine, refresh_locked};
use super::state::{OpKind, SessionState};
use super::{
    CompactOptions, CompactOutcome, CompactReason, EngineError, EngineEvent, OperationObserver,
};
use crate::compaction::is_context_overflow;

/// The prompt appended after a successful threshold compaction when `autoContinue` is on.
pub const AUTO_CONTINUE_PROMPT: &str = "Continue if you have next steps.";
/// Error prefix of a failed overflow recovery (reference string).
pub const OVERFLOW_FAILED_PREFIX: &str = "Context overflow recovery failed: ";
/// Error prefix of a failed threshold compaction (reference string).
pub const AUTO_FAILED_PREFIX: &str = "Auto-compaction failed: ";

/// What the registry remembers between auto runs of one session.
#[derive(Debug, Default, Clone)]
pub struct AutoMemory {
    /// Ids of the compaction entries written by overflow recovery.
    pub overflow_recoveries: HashSet<String>,
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
        .rposition(|e| matches!(e.kind, EntryKind::Compaction(_)));
    let stale = latest_compaction.is_some_and(|at| is_older_than(path, last, msg, at));

    if settings.compaction.overflow_recovery && !stale && is_context_overflow(msg, window) {
        if let Some(at) = latest_compaction
            && memory.overflow_recoveries.contains(&path[at].id)
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
        AutoDecision::CompactThreshold { tokens, threshold }
    } else {
        Nothing(Skip::BelowThreshold { tokens, threshold })
    }
}

/// What an auto-compaction run did; mirrors the `AutoCompactionFinished` event.
#[derive(Debug, Clone)]
pub struct AutoResult {
    pub reason: CompactReason,
    pub outcome: Option<CompactOutcome>,
    pub aborted: bool,
    pub will_retry: bool,
    /// Nothing to compact (or another compaction was running): not a failure.
    pub skipped: bool,
    /// `Context overflow recovery failed: …` or `Auto-compaction failed: …`.
    pub error_message: Option<String>,
    /// The typed failure behind `error_message`, when there is one.
    pub error_kind: Option<&'static str>,
    /// The synthetic `Continue if you have next steps.` entry, when one was appended.
    pub continue_entry_id: Option<String>,
}

impl AutoResult {
    fn new(reason: CompactReason) -> Self {
        AutoResult {
            reason,
            outcome: None,
            aborted: false,
            will_retry: false,
            skipped: false,
            error_message: None,
            error_kind: None,
            continue_entry_id: None,
        }
    }
}

/// Runs auto-compaction after `last` (an assistant message) was appended to `state`'s session:
/// prune, [`decide`], then carry the decision out. The caller holds the session's write gate.
pub(crate) async fn run(
    engine: &Engine,
    state: &SessionState,
    last: &Entry,
    observer: &dyn OperationObserver,
) -> Result<(AppendAction, Option<AutoResult>), EngineError> {
    let settings = state.effective_settings()?;
    if !settings.compaction.enabled {
        return Ok((AppendAction::Continue, None));
    }
    let counter = engine.counter(&settings, None)?;
    let cache = state.cache_for(&counter);
    let (decision, window, tokens_before_estimate) = {
        let mut session = state.session.write().await;
        refresh_locked(state, &mut session)?;
        let pruned = if settings.compaction.prune_enabled {
            let outcome = super::prune::prune_live(&mut session, counter.as_ref(), false)?;
            state.invalidate_counts(&outcome.entry_ids);
            outcome.tokens_saved
        } else {
            0
        };
        let window = reply_window(last, &session, &settings);
        let path: Vec<Entry> = session.path_to_leaf().into_iter().cloned().collect();
        let decision = decide(&path, last, &settings, window, pruned, &state.auto_memory());
        let estimate = super::usage::estimate_context(&session, &cache);
        (decision, window, estimate)
    };
    let (reason, threshold) = match &decision {
        AutoDecision::Nothing(_) => return Ok((AppendAction::Continue, None)),
        AutoDecision::RecoverOverflow { .. } | AutoDecision::RecoveryExhausted { .. } => {
            (CompactReason::Overflow, None)
        }
        AutoDecision::CompactThreshold { tokens, threshold } => {
            (CompactReason::Threshold, Some((*tokens, *threshold)))
        }
    };
    engine.emit(EngineEvent::AutoCompactionStarted {
        session_id: state.id.clone(),
        reason,
    });
    let mut result = AutoResult::new(reason);
    let action = match decision {
        AutoDecision::RecoveryExhausted { reason: why } => {
            result.error_message = Some(format!("{OVERFLOW_FAILED_PREFIX}{why}"));
            result.error_kind = Some("overflowRecoveryFailed");
            AppendAction::Failed
        }
        AutoDecision::RecoverOverflow { new_leaf, .. } => {
            {
                let mut session = state.session.write().await;
                session.move_leaf(new_leaf.as_deref())?;
            }
            let run = compact_once(engine, state, settings.clone(), window, reason, observer).await;
            match run {
                Ok(outcome) => {
                    if let Some(id) = &outcome.entry_id {
                        state.auto_memory().overflow_recoveries.insert(id.clone());
                    }
                    result.outcome = Some(outcome);
                    result.will_retry = true;
                    AppendAction::Retry
                }
                Err(e) => finish_error(&mut result, e, OVERFLOW_FAILED_PREFIX),
            }
        }
        AutoDecision::CompactThreshold { .. } => {
            let run = compact_once(engine, state, settings.clone(), window, reason, observer).await;
            match run {
                Ok(outcome) => {
                    let (usage_tokens, threshold) = threshold.unwrap_or((0, u64::MAX));
                    // What the provider counted beyond our estimate (system prompt, tools):
                    // it will be sent again with the new context.
                    let overhead = usage_tokens.saturating_sub(tokens_before_estimate);
                    let after = {
                        let session = state.session.read().await;
                        super::usage::estimate_context(&session, &cache) + overhead
                    };
                    result.outcome = Some(outcome);
                    if after > threshold {
                        let e = EngineError::CannotGetUnderThreshold {
                            tokens: after,
                            threshold,
                        };
                        result.error_kind = Some(e.kind());
                        result.error_message = Some(format!("{AUTO_FAILED_PREFIX}{e}"));
                        AppendAction::Failed
                    } else {
                        if settings.compaction.auto_continue {
                            let id = append_continue(state).await?;
                            engine.emit(EngineEvent::AutoContinue {
                                session_id: state.id.clone(),
                                prompt: AUTO_CONTINUE_PROMPT.to_owned(),
                                entry_id: id.clone(),
                            });
                            result.continue_entry_id = Some(id);
                        }
                        AppendAction::Compacted
                    }
                }
                Err(e) => finish_error(&mut result, e, AUTO_FAILED_PREFIX),
            }
        }
        AutoDecision::Nothing(_) => AppendAction::Continue,
    };
    engine.emit(EngineEvent::AutoCompactionFinished {
        session_id: state.id.clone(),
        outcome: result.outcome.clone().map(Box::new),
        aborted: result.aborted,
        will_retry: result.will_retry,
        skipped: result.skipped,
        error_message: result.error_message.clone(),
    });
    Ok((action, Some(result)))
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

/// One auto compaction in the auto slot (its own token).
async fn compact_once(
    engine: &Engine,
    state: &SessionState,
    settings: Settings,
    window: u64,
    reason: CompactReason,
    observer: &dyn OperationObserver,
) -> Result<CompactOutcome, EngineError> {
    let guard = state
        .ops
        .start(OpKind::Auto, &CancellationToken::new())
        .ok_or(EngineError::CompactionInProgress)?;
    let env = engine.compact_env(state, settings, window)?;
    let mut opts = CompactOptions::manual();
    opts.reason = reason;
    super::compact(&state.session, &env, opts, guard.token().clone(), observer).await
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

/// Appends the synthetic auto-continue prompt; returns its entry id.
async fn append_continue(state: &SessionState) -> Result<String, EngineError> {
    let message = AgentMessage::User(UserMessage {
        content: Content::Text(AUTO_CONTINUE_PROMPT.to_owned()),
        synthetic: Some(true),
        timestamp: Some(serde_json::Value::from(crate::session::ids::now_ms())),
        extra: Default::default(),
    });
    let mut session = state.session.write().await;
    Ok(session.append(EntryKind::Message(message))?.id.clone())
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
}
