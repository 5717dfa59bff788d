//! The reads: `session/context`, `session/tree` and `session/usage`.

use std::collections::HashMap;
use std::sync::Arc;

use crate::protocol::{
    SessionContextParams, SessionContextResult, SessionRef, SessionTreeParams, SessionTreeResult,
    SessionUsageResult,
};
use crate::rpc::{RequestCtx, RpcError};
use crate::server::{Daemon, to_proto};

pub async fn context(
    daemon: Arc<Daemon>,
    ctx: RequestCtx,
    params: SessionContextParams,
) -> Result<SessionContextResult, RpcError> {
    // A whole context may be tens of megabytes: wait for room in the output budget for what
    // building it takes, so pipelined reads that nobody reads do not pile up in memory.
    let hint = daemon
        .engine
        .context_size_hint(&params.session_id)
        .await
        .map_err(to_proto::error)?;
    ctx.reserve_output(usize::try_from(hint).unwrap_or(usize::MAX))
        .await?;
    let view = daemon
        .engine
        .context(&params.session_id, params.tokenizer.as_deref())
        .await
        .map_err(to_proto::error)?;
    let per_message = params.per_message.unwrap_or(false);
    // A copy of every message: off the runtime for a large context.
    Ok(crate::engine::off_runtime(move || to_proto::context_result(&view, per_message)).await)
}

pub async fn tree(
    daemon: Arc<Daemon>,
    _: RequestCtx,
    params: SessionTreeParams,
) -> Result<SessionTreeResult, RpcError> {
    let include_entries = params.include_entries.unwrap_or(false);
    let mut view = daemon
        .engine
        .tree(&params.session_id, include_entries)
        .await
        .map_err(to_proto::error)?;
    let entries: HashMap<_, _> = std::mem::take(&mut view.entries)
        .iter()
        .map(|entry| (entry.id.clone(), to_proto::entry(entry)))
        .collect();
    Ok(to_proto::tree_result(view, entries))
}

pub async fn usage(
    daemon: Arc<Daemon>,
    _: RequestCtx,
    params: SessionRef,
) -> Result<SessionUsageResult, RpcError> {
    let engine = &daemon.engine;
    let view = engine
        .usage(&params.session_id)
        .await
        .map_err(to_proto::error)?;
    let activity = engine
        .activity(&params.session_id)
        .map_err(to_proto::error)?;
    Ok(to_proto::usage_result(&view, activity))
}
