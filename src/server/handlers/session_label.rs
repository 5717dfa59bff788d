//! `session/setLabel`.

use std::sync::Arc;

use crate::protocol::{SetLabelParams, SetLabelResult};
use crate::rpc::{RequestCtx, RpcError};
use crate::server::{Daemon, from_proto, to_proto};

pub async fn set_label(
    daemon: Arc<Daemon>,
    _: RequestCtx,
    params: SetLabelParams,
) -> Result<SetLabelResult, RpcError> {
    let entry = daemon
        .engine
        .set_label(
            &params.session_id,
            &params.target_id,
            params.label.as_deref(),
            from_proto::expected_leaf(params.expected_leaf_id),
        )
        .await
        .map_err(to_proto::error)?;
    // The label entry is appended at the leaf, so it is the leaf now.
    Ok(SetLabelResult {
        leaf_id: entry.id.clone(),
        entry_id: entry.id,
    })
}
