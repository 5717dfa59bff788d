//! Progress tokens and what cancelling one does. A request's operation reports on the token
//! the request brought (`workDoneToken`) or, when the client shows server-initiated progress,
//! on one the client created at the daemon's asking; an auto-compaction, which has no request,
//! on a daemon token the client is asked to create. `window/workDoneProgress/cancel` on a
//! token cancels what it reports on, while that runs.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio_util::sync::CancellationToken;

use super::lock;
use super::outbox::{CREATE_TIMEOUT, Outbox};
use crate::protocol::method::WorkDoneProgressCreate;
use crate::protocol::{ProgressToken, WorkDoneProgressTokenParams};
use crate::rpc::Client;

/// What cancelling a progress token does.
#[derive(Debug, Clone)]
pub enum CancelTarget {
    /// Cancel a request's operation token.
    Token(CancellationToken),
    /// Abort the session's auto-compaction (it has no request).
    AbortCompaction(String),
}

/// The daemon's progress tokens and their cancel targets; see the module doc.
#[derive(Default)]
pub struct ProgressTokens {
    next_request: AtomicU64,
    next_auto: AtomicU64,
    cancels: Mutex<HashMap<ProgressToken, CancelTarget>>,
}

impl ProgressTokens {
    /// The token of a request's operation: the one it brought, else one the client created on
    /// request (when it shows server-initiated progress), else none.
    pub async fn for_request(
        &self,
        client: &Client,
        outbox: &Outbox,
        requested: Option<ProgressToken>,
    ) -> Option<ProgressToken> {
        if requested.is_some() {
            return requested;
        }
        if !outbox.supports_progress() {
            return None;
        }
        let n = self.next_request.fetch_add(1, Ordering::Relaxed) + 1;
        let token = ProgressToken::String(format!("compactd-progress-{n}"));
        let params = WorkDoneProgressTokenParams {
            token: token.clone(),
        };
        let created =
            crate::server::request_ack::<WorkDoneProgressCreate>(client, params, CREATE_TIMEOUT)
                .await;
        match created {
            Ok(()) => Some(token),
            Err(error) => {
                tracing::debug!(%error, "the client created no progress token");
                None
            }
        }
    }

    /// The token of session `session_id`'s auto-compaction when the client shows
    /// server-initiated progress: asked for through `outbox`, in order with the notifications,
    /// and cancelled by aborting the compaction.
    pub fn for_auto(&self, outbox: &Outbox, session_id: &str) -> Option<ProgressToken> {
        if !outbox.supports_progress() {
            return None;
        }
        let n = self.next_auto.fetch_add(1, Ordering::Relaxed) + 1;
        let token = ProgressToken::String(format!("compactd-auto-{n}"));
        outbox.create_progress(token.clone());
        self.watch(&token, CancelTarget::AbortCompaction(session_id.to_owned()));
        Some(token)
    }

    /// Cancelling `token` does `target` from now on.
    pub fn watch(&self, token: &ProgressToken, target: CancelTarget) {
        lock(&self.cancels).insert(token.clone(), target);
    }

    /// `token`'s operation ended: cancelling it does nothing any more.
    pub fn forget(&self, token: &ProgressToken) {
        lock(&self.cancels).remove(token);
    }

    /// What cancelling `token` does, while its operation runs.
    pub fn cancel_target(&self, token: &ProgressToken) -> Option<CancelTarget> {
        lock(&self.cancels).get(token).cloned()
    }
}
