//! The engine's session events as notifications: entries appended (by this daemon or, read
//! from the database, by another), the brackets of every compaction and auto-compaction with
//! the `$/progress` of an auto-compaction, a navigation, and the auto-continue prompt, which
//! follows the end of its auto-compaction as in the reference.

use super::operation::{Op, OperationKind, begin};
use super::{Hub, lock};
use crate::engine::{AutoResult, CompactReason, EngineEvent};
use crate::protocol::method::*;
use crate::protocol::{
    AutoCompactionPaused, AutoCompactionReason, AutoCompactionStarted, AutoContinue,
    BackgroundCompaction, TreeNavigated, WorkDoneProgress,
};
use crate::server::to_proto::{
    self, AutoCompactionFinishedRef, CompactionFinishedRef, EntriesAppendedRef,
};

impl Hub {
    /// Turns `event` into its notifications, queued in order.
    pub(super) fn on_event(&self, event: EngineEvent) {
        let out = &self.outbox;
        match event {
            EngineEvent::EntriesAppended {
                session_id,
                entries,
            } => {
                let Some(leaf) = entries.last() else {
                    return;
                };
                out.notify_as::<SessionEntriesAppended>(&EntriesAppendedRef {
                    session_id: &session_id,
                    entries: &entries,
                    leaf_id: &leaf.id,
                    external: false,
                });
            }
            EngineEvent::ExternalEntries {
                session_id,
                entries,
                leaf_id,
            } => out.notify_as::<SessionEntriesAppended>(&EntriesAppendedRef {
                session_id: &session_id,
                entries: &entries,
                leaf_id: &leaf_id,
                external: true,
            }),
            EngineEvent::CompactionStarted {
                session_id,
                operation_id,
                reason,
            } => {
                let mut ops = lock(&self.ops);
                let key = (session_id, OperationKind::Compaction);
                let op = ops
                    .entry(key.clone())
                    .or_insert_with(|| Op::new(to_proto::compaction_reason(reason)));
                if op.started_sent {
                    return;
                }
                op.operation_id = Some(operation_id);
                op.reason = to_proto::compaction_reason(reason);
                op.send_started(out, &key.0);
            }
            EngineEvent::CompactionFinished {
                session_id,
                operation_id,
                outcome,
                aborted,
                error,
            } => {
                let now = (self.now)();
                let key = (session_id, OperationKind::Compaction);
                if let Some(op) = lock(&self.ops).get_mut(&key) {
                    op.settle(out, &key.0, now);
                    op.started_sent = false;
                }
                out.notify_as::<SessionCompactionFinished>(&CompactionFinishedRef {
                    session_id: &key.0,
                    operation_id: &operation_id,
                    result: outcome.as_deref(),
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
            } => self.auto_finished(session_id, operation_id, &result),
            EngineEvent::TreeNavigated {
                session_id,
                new_leaf_id,
                old_leaf_id,
                summary_entry,
                from_extension,
                report,
            } => out.notify::<SessionTreeNavigated>(TreeNavigated {
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
                match ops.get_mut(&(session_id, OperationKind::Compaction)) {
                    Some(op) if op.auto.is_some() => op.auto_continue = Some(event),
                    _ => {
                        drop(ops);
                        out.notify::<SessionAutoContinue>(event);
                    }
                }
            }
            EngineEvent::BackgroundCompaction {
                session_id,
                operation_id,
                state,
                reason,
                message,
            } => out.notify::<SessionBackgroundCompaction>(BackgroundCompaction {
                session_id,
                operation_id,
                state: to_proto::background_state(state),
                reason: reason.map(to_proto::discard_reason),
                message,
            }),
            EngineEvent::AutoCompactionPaused {
                session_id,
                reason,
                count,
            } => out.notify::<SessionAutoCompactionPaused>(AutoCompactionPaused {
                session_id,
                reason: to_proto::pause_reason(reason),
                count,
            }),
        }
    }

    /// `session/autoCompactionStarted` and the `$/progress` begin of an auto-compaction, on a
    /// token the client is asked to create.
    fn auto_started(&self, session_id: String, operation_id: String, reason: CompactReason) {
        let auto = to_proto::auto_reason(reason);
        let mut op = Op::new(auto.into());
        op.auto = Some(auto);
        op.operation_id = Some(operation_id.clone());
        op.progress = self.tokens.for_auto(&self.outbox, &session_id);
        self.outbox
            .notify::<SessionAutoCompactionStarted>(AutoCompactionStarted {
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
        op.progress(&self.outbox, begin(title));
        lock(&self.ops).insert((session_id, OperationKind::Compaction), op);
    }

    /// `session/autoCompactionFinished`, the `$/progress` end, then the auto-continue prompt
    /// that waited for them.
    fn auto_finished(&self, session_id: String, operation_id: String, result: &AutoResult) {
        let key = (session_id, OperationKind::Compaction);
        let Some(mut op) = lock(&self.ops).remove(&key) else {
            return;
        };
        let out = &self.outbox;
        op.settle(out, &key.0, (self.now)());
        let end_message = if result.aborted {
            "cancelled".to_owned()
        } else if let Some(message) = &result.error_message {
            message.clone()
        } else if result.skipped {
            "skipped".to_owned()
        } else {
            "done".to_owned()
        };
        out.notify_as::<SessionAutoCompactionFinished>(&AutoCompactionFinishedRef::new(
            &key.0,
            &operation_id,
            result,
        ));
        if let Some(token) = &op.progress {
            self.tokens.forget(token);
        }
        op.progress(
            out,
            WorkDoneProgress::End {
                message: Some(end_message),
            },
        );
        if let Some(auto_continue) = op.auto_continue.take() {
            out.notify::<SessionAutoContinue>(auto_continue);
        }
    }
}
