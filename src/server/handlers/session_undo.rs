//! `session/undoCompaction`.

use std::sync::Arc;

use crate::protocol::{UndoCompactionParams, UndoCompactionResult};
use crate::rpc::{RequestCtx, RpcError};
use crate::server::{Daemon, from_proto, to_proto};

pub async fn undo_compaction(
    daemon: Arc<Daemon>,
    _: RequestCtx,
    params: UndoCompactionParams,
) -> Result<UndoCompactionResult, RpcError> {
    let outcome = daemon
        .engine
        .undo_compaction(
            &params.session_id,
            params.entry_id.as_deref(),
            from_proto::expected_leaf(params.expected_leaf_id),
        )
        .await
        .map_err(to_proto::error)?;
    Ok(to_proto::undo_result(&outcome))
}
