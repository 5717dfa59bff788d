//! `session/navigateTree` (spec §6.4, with an optional branch summary) and
//! `session/abortBranchSummary`.

use std::sync::Arc;

use super::session_compact::progress_token;
use crate::protocol::{AbortResult, NavigateTreeParams, NavigateTreeResult, SessionRef};
use crate::rpc::{RequestCtx, RpcError};
use crate::server::{Daemon, OpObserver, OperationKind, from_proto, to_proto};

pub async fn navigate(
    daemon: Arc<Daemon>,
    ctx: RequestCtx,
    params: NavigateTreeParams,
) -> Result<NavigateTreeResult, RpcError> {
    let session_id = params.session_id.clone();
    daemon.engine.state(&session_id).map_err(to_proto::error)?;
    let summarize = params.summarize.unwrap_or(false);
    let cancel = ctx.token().child_token();
    // Progress only when there is a summary to wait for.
    let progress = match summarize {
        true => progress_token(&daemon, &ctx, params.work_done_token.clone()).await,
        false => None,
    };
    daemon.hub.begin(
        &session_id,
        OperationKind::BranchSummary,
        progress,
        cancel.clone(),
    );
    if summarize {
        // Reads of the session sent after this request run meanwhile (they see it running)
        // rather than wait for a model; requests that change the session still wait.
        ctx.let_reads_pass();
    }
    let observer = OpObserver {
        hub: daemon.hub.clone(),
        session_id: session_id.clone(),
    };
    let options = from_proto::navigate_options(&params);
    let result = daemon
        .engine
        .navigate(&session_id, &params.target_id, options, cancel, &observer)
        .await;
    let end = match &result {
        Ok(outcome) if outcome.aborted || outcome.cancelled => "cancelled".to_owned(),
        Ok(_) => "done".to_owned(),
        Err(error) => error.to_string(),
    };
    daemon
        .hub
        .end(&session_id, OperationKind::BranchSummary, end);
    daemon.hub.flush().await;
    let outcome = result.map_err(to_proto::error)?;
    Ok(to_proto::navigate_result(outcome))
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
        aborted: daemon.engine.abort_branch_summary(&params.session_id).await,
    })
}
