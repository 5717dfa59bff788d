//! `session/append`: entries at the leaf, then the auto-compaction check (spec §4.1–4.4) on
//! the batch's last assistant message; a due compaction runs before the answer
//! (`waitForCompaction: true`) or after it, in the background on the session's write gate.

use std::sync::Arc;

use super::{expected_leaf, invalid};
use crate::engine::auto::AutoResult;
use crate::engine::{AppendAction, AppendOptions};
use crate::protocol::{
    AutoCompactionOutcome, AutoCompactionReason, NextAction, SessionAppendParams,
    SessionAppendResult,
};
use crate::rpc::{RequestCtx, RpcError};
use crate::server::{Daemon, OpObserver, convert, engine_error};

pub async fn append(
    daemon: Arc<Daemon>,
    ctx: RequestCtx,
    params: SessionAppendParams,
) -> Result<SessionAppendResult, RpcError> {
    let entries = params
        .entries
        .into_iter()
        .enumerate()
        .map(|(i, entry)| {
            convert::new_entry(entry)
                .map_err(|e| invalid("session/append", &format!("entries.{i}"), e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let session_id = params.session_id;
    let observer = OpObserver {
        hub: daemon.hub.clone(),
        session_id: session_id.clone(),
    };
    let options = AppendOptions {
        expected_leaf: expected_leaf(params.expected_leaf_id),
        check_compaction: params.check_compaction.unwrap_or(true),
        wait_for_compaction: params.wait_for_compaction.unwrap_or(false),
    };
    let appended = daemon
        .engine
        .append_with(
            &session_id,
            entries,
            options,
            ctx.token().child_token(),
            &observer,
        )
        .await;
    daemon.hub.flush().await;
    let mut outcome = appended.map_err(engine_error)?;
    let usage = daemon
        .engine
        .usage(&session_id)
        .await
        .map_err(engine_error)?;
    if let Some(pending) = outcome.pending.take() {
        // The compaction runs on after the answer, holding the session's write gate so later
        // mutating requests on the session wait behind it; its events report the end.
        let hub = daemon.hub.clone();
        tokio::spawn(async move {
            if let Err(error) = pending.run(&observer).await {
                tracing::warn!(%error, "background auto-compaction failed");
            }
            hub.flush().await;
        });
    }
    let auto = outcome.auto.as_ref();
    let action = match outcome.action {
        AppendAction::Compacting => NextAction::Compacting,
        AppendAction::Recovering => NextAction::Recovering,
        AppendAction::Retry => NextAction::Retry,
        AppendAction::Failed => NextAction::Failed,
        _ if auto.is_some_and(|a| a.aborted || a.skipped) => NextAction::Failed,
        AppendAction::Compacted if auto.is_some_and(|a| a.continue_entry_id.is_some()) => {
            NextAction::AutoContinue
        }
        AppendAction::Compacted | AppendAction::Continue => NextAction::Continue,
    };
    Ok(SessionAppendResult {
        leaf_id: outcome.leaf_id.clone().unwrap_or_default(),
        appended: outcome.appended,
        context_tokens: usage.context_tokens,
        context_window: usage.context_window,
        threshold_tokens: usage.threshold,
        action,
        auto_continue_entry_id: auto.and_then(|a| a.continue_entry_id.clone()),
        pruned: None,
        auto_compaction: auto.map(auto_outcome),
    })
}

fn auto_outcome(auto: &AutoResult) -> AutoCompactionOutcome {
    AutoCompactionOutcome {
        reason: match auto.reason {
            crate::engine::CompactReason::Overflow => AutoCompactionReason::Overflow,
            _ => AutoCompactionReason::Threshold,
        },
        result: auto.outcome.as_ref().map(convert::compact_result),
        aborted: auto.aborted,
        will_retry: auto.will_retry,
        skipped: auto.skipped,
        skip_reason: auto.skipped.then(|| "nothing to compact".to_owned()),
        error_message: auto.error_message.clone(),
    }
}
