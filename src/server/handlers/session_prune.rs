//! `session/prune`: replace old tool outputs in the live context by a notice.

use std::sync::Arc;

use crate::protocol::{ErrorKind, PruneResult, SessionPruneParams};
use crate::rpc::{RequestCtx, RpcError};
use crate::server::{Daemon, to_proto};

pub async fn prune(
    daemon: Arc<Daemon>,
    _: RequestCtx,
    params: SessionPruneParams,
) -> Result<PruneResult, RpcError> {
    let engine = &daemon.engine;
    let state = engine.state(&params.session_id).map_err(to_proto::error)?;
    if state.ops.is_compacting() {
        return Err(ErrorKind::CompactionInProgress.error());
    }
    // Session-serial: no write of this connection can come between this check and the prune.
    if let Some(expected) = &params.expected_leaf_id {
        let leaf = state.session.read().await.leaf_id().map(str::to_owned);
        if leaf.as_deref() != Some(expected.as_str()) {
            return Err(ErrorKind::leaf_moved(expected, leaf.as_deref()));
        }
    }
    let outcome = engine
        .prune(&params.session_id, params.dry_run.unwrap_or(false))
        .await
        .map_err(to_proto::error)?;
    Ok(to_proto::prune_result(outcome))
}
