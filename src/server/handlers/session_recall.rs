//! Recall: `session/search` and `session/readEntry`.

use std::sync::Arc;

use crate::protocol::{
    SessionReadEntryParams, SessionReadEntryResult, SessionSearchParams, SessionSearchResult,
};
use crate::rpc::{RequestCtx, RpcError};
use crate::server::{Daemon, from_proto, to_proto};

pub async fn search(
    daemon: Arc<Daemon>,
    _: RequestCtx,
    params: SessionSearchParams,
) -> Result<SessionSearchResult, RpcError> {
    let session_id = params.session_id.clone();
    let page = daemon
        .engine
        .search(&session_id, from_proto::search_query(params))
        .await
        .map_err(to_proto::error)?;
    Ok(to_proto::search_result(page))
}

pub async fn read_entry(
    daemon: Arc<Daemon>,
    _: RequestCtx,
    params: SessionReadEntryParams,
) -> Result<SessionReadEntryResult, RpcError> {
    let recalled = daemon
        .engine
        .read_entry(&params.session_id, &params.entry_id)
        .await
        .map_err(to_proto::error)?;
    Ok(to_proto::read_entry_result(recalled))
}
