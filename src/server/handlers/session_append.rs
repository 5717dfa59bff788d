//! `session/append`: entries at the leaf, then the auto-compaction check (spec §4.1–4.4) on
//! the batch's last assistant message; a due compaction runs before the answer
//! (`waitForCompaction: true`) or after it, in the background on the session's write gate.

use std::sync::Arc;

use super::invalid;
use crate::protocol::{SessionAppendParams, SessionAppendResult};
use crate::rpc::{RequestCtx, RpcError};
use crate::server::{Daemon, OperationKind, from_proto, to_proto};

pub async fn append(
    daemon: Arc<Daemon>,
    ctx: RequestCtx,
    params: SessionAppendParams,
) -> Result<SessionAppendResult, RpcError> {
    let options = from_proto::append_options(&params);
    let entries = params
        .entries
        .into_iter()
        .enumerate()
        .map(|(i, entry)| {
            from_proto::new_entry(entry)
                .map_err(|e| invalid("session/append", &format!("entries.{i}"), e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let session_id = params.session_id;
    // A due auto-compaction reports as the session's compaction.
    let observer = daemon.hub.observer(&session_id, OperationKind::Compaction);
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
    let mut outcome = appended.map_err(to_proto::error)?;
    let usage = daemon
        .engine
        .usage(&session_id)
        .await
        .map_err(to_proto::error)?;
    if let Some(pending) = outcome.pending.take() {
        // The compaction runs on after the answer, holding the session's write gate so later
        // mutating requests on the session wait behind it; its events report the end.
        tokio::spawn(async move {
            if let Err(error) = pending.run(&observer).await {
                tracing::warn!(%error, "background auto-compaction failed");
            }
        });
    }
    let auto = outcome.auto.as_ref();
    let action = to_proto::next_action(outcome.action, auto);
    let auto_continue_entry_id = auto.and_then(|a| a.continue_entry_id.clone());
    Ok(SessionAppendResult {
        leaf_id: outcome.leaf_id.clone().unwrap_or_default(),
        appended: outcome.appended,
        context_tokens: usage.context_tokens,
        context_window: usage.context_window,
        threshold_tokens: usage.threshold,
        action,
        auto_continue_entry_id,
        pruned: None,
        auto_compaction: outcome.auto.map(to_proto::auto_outcome),
    })
}
