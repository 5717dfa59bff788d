//! `session/observeTurn`: an agent that writes its own session file tells compactd about a
//! turn, which may start a background compaction (see `engine/background.rs`).

use std::sync::Arc;

use crate::protocol::{ObserveTurnParams, ObserveTurnResult};
use crate::rpc::{RequestCtx, RpcError};
use crate::server::{Daemon, from_proto, to_proto};

pub async fn observe_turn(
    daemon: Arc<Daemon>,
    _: RequestCtx,
    params: ObserveTurnParams,
) -> Result<ObserveTurnResult, RpcError> {
    let session_id = params.session_id.clone();
    let observation = daemon
        .engine
        .observe_turn(&session_id, from_proto::observed_turn(params))
        .await
        .map_err(to_proto::error)?;
    Ok(to_proto::observe_turn_result(observation))
}
