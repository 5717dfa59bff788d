//! `session/ledger`, `session/pin` and `session/unpin`.

use std::sync::Arc;

use crate::protocol::{
    SessionLedgerResult, SessionPinParams, SessionPinResult, SessionRef, SessionUnpinParams,
    SessionUnpinResult,
};
use crate::rpc::{RequestCtx, RpcError};
use crate::server::{Daemon, to_proto};

pub async fn ledger(
    daemon: Arc<Daemon>,
    _: RequestCtx,
    params: SessionRef,
) -> Result<SessionLedgerResult, RpcError> {
    let ledger = daemon
        .engine
        .ledger(&params.session_id)
        .await
        .map_err(to_proto::error)?;
    Ok(to_proto::ledger(&ledger))
}

pub async fn pin(
    daemon: Arc<Daemon>,
    _: RequestCtx,
    params: SessionPinParams,
) -> Result<SessionPinResult, RpcError> {
    let entry = daemon
        .engine
        .pin(&params.session_id, &params.text)
        .await
        .map_err(to_proto::error)?;
    // The pin entry is appended at the leaf, so it is the leaf now.
    Ok(SessionPinResult {
        leaf_id: entry.id.clone(),
        pin_id: entry.id,
    })
}

pub async fn unpin(
    daemon: Arc<Daemon>,
    _: RequestCtx,
    params: SessionUnpinParams,
) -> Result<SessionUnpinResult, RpcError> {
    let entry = daemon
        .engine
        .unpin(&params.session_id, &params.pin_id)
        .await
        .map_err(to_proto::error)?;
    Ok(SessionUnpinResult {
        leaf_id: entry.id.clone(),
        entry_id: entry.id,
    })
}
