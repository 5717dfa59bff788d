//! `session/compact` (manual compaction, preview, client-chosen boundary) and
//! `session/abortCompaction`.

use std::sync::Arc;
use std::time::Duration;

use crate::protocol::method::WorkDoneProgressCreate;
use crate::protocol::{
    AbortResult, CompactResult, ProgressToken, SessionCompactParams, SessionRef,
    WorkDoneProgressTokenParams,
};
use crate::rpc::{RequestCtx, RpcError};
use crate::server::{Daemon, OpObserver, OperationKind, from_proto, to_proto};

/// How long the client gets to answer `window/workDoneProgress/create`.
const CREATE_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn compact(
    daemon: Arc<Daemon>,
    ctx: RequestCtx,
    params: SessionCompactParams,
) -> Result<CompactResult, RpcError> {
    let session_id = params.session_id.clone();
    // Fail fast, before asking the client for a progress token.
    daemon.engine.state(&session_id).map_err(to_proto::error)?;
    let progress = progress_token(&daemon, &ctx, params.work_done_token.clone()).await;
    let cancel = ctx.token().child_token();
    daemon.hub.begin(
        &session_id,
        OperationKind::Compaction,
        progress,
        cancel.clone(),
    );
    // Reads of the session sent after this request run meanwhile (they see it running)
    // rather than wait for a model; requests that change the session still wait.
    ctx.let_reads_pass();
    let observer = OpObserver {
        hub: daemon.hub.clone(),
        session_id: session_id.clone(),
    };
    let options = from_proto::compact_options(params);
    let result = daemon
        .engine
        .compact(&session_id, options, cancel, &observer)
        .await;
    let end = match &result {
        Ok(_) => "done".to_owned(),
        Err(crate::engine::EngineError::Cancelled(_)) => "cancelled".to_owned(),
        Err(error) => error.to_string(),
    };
    daemon.hub.end(&session_id, OperationKind::Compaction, end);
    daemon.hub.flush().await;
    result
        .map(|outcome| to_proto::compact_result(&outcome))
        .map_err(to_proto::error)
}

/// The request's `workDoneToken`, else a token the client created on request (when it
/// supports server-initiated progress), else none.
pub(crate) async fn progress_token(
    daemon: &Daemon,
    ctx: &RequestCtx,
    requested: Option<ProgressToken>,
) -> Option<ProgressToken> {
    if requested.is_some() {
        return requested;
    }
    if !daemon.capabilities().supports_work_done_progress() {
        return None;
    }
    let token = daemon.new_progress_token();
    let params = WorkDoneProgressTokenParams {
        token: token.clone(),
    };
    let created =
        crate::server::request_ack::<WorkDoneProgressCreate>(ctx.client(), params, CREATE_TIMEOUT)
            .await;
    match created {
        Ok(_) => Some(token),
        Err(error) => {
            tracing::debug!(%error, "the client created no progress token");
            None
        }
    }
}

pub async fn abort(
    daemon: Arc<Daemon>,
    _: RequestCtx,
    params: SessionRef,
) -> Result<AbortResult, RpcError> {
    daemon
        .engine
        .state(&params.session_id)
        .map_err(to_proto::error)?;
    Ok(AbortResult {
        aborted: daemon.engine.abort_compaction(&params.session_id).await,
    })
}
