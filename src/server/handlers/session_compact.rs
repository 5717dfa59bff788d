//! `session/compact` (manual compaction, preview, client-chosen boundary),
//! `session/commitCompaction` (write a kept preview, maybe edited) and
//! `session/abortCompaction`. The router brackets the compaction (see `server/table.rs`).

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::engine::{CompactOutcome, CompactionClaim, Engine, EngineError, SummaryEdit};
use crate::protocol::method::{SessionCommitCompaction, SessionCompact};
use crate::protocol::{
    AbortResult, CommitCompactionParams, CompactResult, ProgressToken, SessionCompactParams,
    SessionRef,
};
use crate::rpc::{RequestCtx, RpcError};
use crate::server::{Daemon, OpObserver, OperationKind, OperationRequest, from_proto, to_proto};

impl OperationRequest for SessionCompact {
    const KIND: OperationKind = OperationKind::Compaction;
    type Claim = CompactionClaim;
    type Outcome = CompactOutcome;

    fn session_id(params: &SessionCompactParams) -> &str {
        &params.session_id
    }

    fn work_done_token(params: &SessionCompactParams) -> Option<ProgressToken> {
        params.work_done_token.clone()
    }

    fn claim(
        engine: &Engine,
        params: &SessionCompactParams,
        cancel: &CancellationToken,
    ) -> Result<CompactionClaim, EngineError> {
        let preview = params.preview.unwrap_or(false);
        engine.claim_compaction(&params.session_id, preview, cancel)
    }

    async fn run(
        engine: &Engine,
        claim: CompactionClaim,
        params: SessionCompactParams,
        observer: &OpObserver,
    ) -> Result<CompactOutcome, EngineError> {
        let options = from_proto::compact_options(params);
        engine.compact(claim, options, observer).await
    }

    fn end_message(outcome: &Result<CompactOutcome, EngineError>) -> String {
        match outcome {
            Ok(_) => "done".to_owned(),
            Err(EngineError::Cancelled(_)) => "cancelled".to_owned(),
            Err(error) => error.to_string(),
        }
    }

    fn result(outcome: CompactOutcome) -> CompactResult {
        to_proto::compact_result(outcome)
    }
}

impl OperationRequest for SessionCommitCompaction {
    const KIND: OperationKind = OperationKind::Compaction;
    type Claim = CompactionClaim;
    type Outcome = CompactOutcome;

    fn session_id(params: &CommitCompactionParams) -> &str {
        &params.session_id
    }

    fn work_done_token(params: &CommitCompactionParams) -> Option<ProgressToken> {
        params.work_done_token.clone()
    }

    /// Writing a kept preview runs no summarizer.
    fn waits_for_a_model(_params: &CommitCompactionParams) -> bool {
        false
    }

    fn claim(
        engine: &Engine,
        params: &CommitCompactionParams,
        cancel: &CancellationToken,
    ) -> Result<CompactionClaim, EngineError> {
        engine.claim_compaction(&params.session_id, false, cancel)
    }

    async fn run(
        engine: &Engine,
        claim: CompactionClaim,
        params: CommitCompactionParams,
        _observer: &OpObserver,
    ) -> Result<CompactOutcome, EngineError> {
        let edit = SummaryEdit {
            summary: params.summary,
            short_summary: params.short_summary,
        };
        engine
            .commit_compaction(claim, &params.preview_id, edit)
            .await
    }

    fn end_message(outcome: &Result<CompactOutcome, EngineError>) -> String {
        <SessionCompact as OperationRequest>::end_message(outcome)
    }

    fn result(outcome: CompactOutcome) -> CompactResult {
        to_proto::compact_result(outcome)
    }
}

pub async fn abort(
    daemon: Arc<Daemon>,
    _: RequestCtx,
    params: SessionRef,
) -> Result<AbortResult, RpcError> {
    let aborted = daemon
        .engine
        .abort_compaction(&params.session_id)
        .map_err(to_proto::error)?;
    Ok(AbortResult { aborted })
}
