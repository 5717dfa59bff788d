//! `session/navigateTree` (spec §6.4, with an optional branch summary) and
//! `session/abortBranchSummary`. The router brackets the navigation (see `server/table.rs`).

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::engine::{Engine, EngineError, NavigateOutcome, NavigationClaim};
use crate::protocol::method::SessionNavigateTree;
use crate::protocol::{
    AbortResult, NavigateTreeParams, NavigateTreeResult, ProgressToken, SessionRef,
};
use crate::rpc::{RequestCtx, RpcError};
use crate::server::{Daemon, OpObserver, OperationKind, OperationRequest, from_proto, to_proto};

impl OperationRequest for SessionNavigateTree {
    const KIND: OperationKind = OperationKind::BranchSummary;
    type Claim = NavigationClaim;
    type Outcome = NavigateOutcome;

    fn session_id(params: &NavigateTreeParams) -> &str {
        &params.session_id
    }

    fn work_done_token(params: &NavigateTreeParams) -> Option<ProgressToken> {
        params.work_done_token.clone()
    }

    /// Only a navigation that summarises the branch it leaves waits for a model.
    fn waits_for_a_model(params: &NavigateTreeParams) -> bool {
        params.summarize.unwrap_or(false)
    }

    fn claim(
        engine: &Engine,
        params: &NavigateTreeParams,
        cancel: &CancellationToken,
    ) -> Result<NavigationClaim, EngineError> {
        let preview = params.preview.unwrap_or(false);
        engine.claim_navigation(&params.session_id, preview, cancel)
    }

    async fn run(
        engine: &Engine,
        claim: NavigationClaim,
        params: NavigateTreeParams,
        observer: &OpObserver,
    ) -> Result<NavigateOutcome, EngineError> {
        let options = from_proto::navigate_options(&params);
        engine
            .navigate(claim, &params.target_id, options, observer)
            .await
    }

    fn end_message(outcome: &Result<NavigateOutcome, EngineError>) -> String {
        match outcome {
            Ok(outcome) if outcome.aborted || outcome.cancelled => "cancelled".to_owned(),
            Ok(_) => "done".to_owned(),
            Err(error) => error.to_string(),
        }
    }

    fn result(outcome: NavigateOutcome) -> NavigateTreeResult {
        to_proto::navigate_result(outcome)
    }
}

pub async fn abort(
    daemon: Arc<Daemon>,
    _: RequestCtx,
    params: SessionRef,
) -> Result<AbortResult, RpcError> {
    let aborted = daemon
        .engine
        .abort_branch_summary(&params.session_id)
        .map_err(to_proto::error)?;
    Ok(AbortResult { aborted })
}
