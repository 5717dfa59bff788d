//! `session/prune`: replace old tool outputs in the live context by a notice.

use std::sync::Arc;

use crate::protocol::{PruneResult, SessionPruneParams};
use crate::rpc::{RequestCtx, RpcError};
use crate::server::{Daemon, from_proto, to_proto};

pub async fn prune(
    daemon: Arc<Daemon>,
    _: RequestCtx,
    params: SessionPruneParams,
) -> Result<PruneResult, RpcError> {
    let outcome = daemon
        .engine
        .prune(
            &params.session_id,
            params.dry_run.unwrap_or(false),
            from_proto::expected_leaf(params.expected_leaf_id),
        )
        .await
        .map_err(to_proto::error)?;
    Ok(to_proto::prune_result(outcome))
}
