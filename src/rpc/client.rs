//! The server's side of talking *to* the client: notifications and server-to-client requests.
//!
//! [`Client`] puts serialised messages on the writer's queue and keeps a table of requests
//! awaiting an answer. Answers are routed here by id from the reader. When the client's input
//! closes, every pending request fails at once with [`ClientRequestError::Disconnected`]
//! instead of waiting for its timeout, and later requests fail immediately.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};

use super::budget::OutputBudget;
use super::lock;
use super::message::{RequestId, RpcError, request_json};

/// Why a notification or a server-to-client request did not get through.
#[derive(Debug, thiserror::Error)]
pub enum ClientRequestError {
    #[error("the client did not answer `{method}` within {timeout:?}")]
    Timeout { method: String, timeout: Duration },
    #[error("the client connection closed before `{method}` was answered")]
    Disconnected { method: String },
    #[error("the client answered `{method}` with an error: {error}")]
    Rejected { method: String, error: RpcError },
    #[error("the client's answer to `{method}` has an unexpected shape: {detail}")]
    InvalidResponse { method: String, detail: String },
    #[error("the params of `{method}` could not be serialised: {detail}")]
    InvalidParams { method: String, detail: String },
}

type Answer = Result<Box<RawValue>, RpcError>;

/// A handle for sending notifications and requests to the client. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Client {
    inner: Arc<ClientShared>,
}

#[derive(Debug)]
struct ClientShared {
    outgoing: mpsc::Sender<String>,
    /// Counts every message from its production until the writer flushed it.
    budget: Arc<OutputBudget>,
    pending: Mutex<Pending>,
    next_id: AtomicI64,
}

#[derive(Debug, Default)]
struct Pending {
    /// Set when the client's input closed: nothing can be answered any more.
    closed: bool,
    waiting: HashMap<RequestId, oneshot::Sender<Answer>>,
}

impl Client {
    pub(crate) fn new(outgoing: mpsc::Sender<String>, budget: Arc<OutputBudget>) -> Self {
        Self {
            inner: Arc::new(ClientShared {
                outgoing,
                budget,
                pending: Mutex::new(Pending::default()),
                next_id: AtomicI64::new(1),
            }),
        }
    }

    /// Sends a notification. Waits only for room on the output queue.
    pub async fn notify<P: Serialize>(
        &self,
        method: &str,
        params: P,
    ) -> Result<(), ClientRequestError> {
        let params = to_raw(method, &params)?;
        self.send(request_json(None, method, &params))
            .await
            .map_err(|()| ClientRequestError::Disconnected {
                method: method.to_owned(),
            })
    }

    /// Sends a request and waits up to `timeout` for the client's answer, deserialised as `R`.
    ///
    /// `timeout` covers queueing the request and waiting for the answer. On timeout the client
    /// is sent `$/cancelRequest` for it. Dropping the returned future
    /// (e.g. when the calling handler is cancelled) forgets the request.
    pub async fn request<P: Serialize, R: DeserializeOwned>(
        &self,
        method: &str,
        params: P,
        timeout: Duration,
    ) -> Result<R, ClientRequestError> {
        let disconnected = || ClientRequestError::Disconnected {
            method: method.to_owned(),
        };
        let params = to_raw(method, &params)?;
        let id = RequestId::Number(self.inner.next_id.fetch_add(1, Ordering::Relaxed));
        let (answer_tx, answer_rx) = oneshot::channel();
        {
            let mut pending = lock(&self.inner.pending);
            if pending.closed {
                return Err(disconnected());
            }
            pending.waiting.insert(id.clone(), answer_tx);
        }
        let _forget_on_drop = PendingGuard {
            client: self,
            id: &id,
        };
        // The timeout covers waiting for room on the output queue too.
        let exchange = async {
            self.send(request_json(Some(&id), method, &params))
                .await
                .map_err(|()| disconnected())?;
            // The sender is dropped only when the input closes.
            answer_rx.await.map_err(|_| disconnected())
        };
        let answer = match tokio::time::timeout(timeout, exchange).await {
            Ok(answer) => answer?,
            Err(_elapsed) => {
                // Best effort and never blocking: a full or closed output means the client
                // cannot be told now anyway.
                let cancel = serde_json::json!({ "id": id });
                let cancel = serde_json::value::to_raw_value(&cancel)
                    .map(|params| request_json(None, "$/cancelRequest", &params));
                if let Ok(cancel) = cancel {
                    let bytes = cancel.len();
                    self.inner.budget.charge(bytes);
                    if self.inner.outgoing.try_send(cancel).is_err() {
                        self.inner.budget.release(bytes);
                    }
                }
                return Err(ClientRequestError::Timeout {
                    method: method.to_owned(),
                    timeout,
                });
            }
        };
        let result = answer.map_err(|error| ClientRequestError::Rejected {
            method: method.to_owned(),
            error,
        })?;
        serde_json::from_str(result.get()).map_err(|e| ClientRequestError::InvalidResponse {
            method: method.to_owned(),
            detail: e.to_string(),
        })
    }

    /// Queues a serialised message for the writer; `Err` when the writer is gone. The message
    /// counts against the output budget until the writer has flushed it.
    pub(crate) async fn send(&self, message: String) -> Result<(), ()> {
        let bytes = message.len();
        self.inner.budget.charge(bytes);
        let sent = self.inner.outgoing.send(message).await;
        if sent.is_err() {
            self.inner.budget.release(bytes);
        }
        sent.map_err(|_| ())
    }

    /// The output budget this client's messages count against.
    pub(crate) fn budget(&self) -> &Arc<OutputBudget> {
        &self.inner.budget
    }

    /// Routes the client's answer to the request waiting for it.
    pub(crate) fn complete(&self, id: RequestId, answer: Answer) {
        let waiter = lock(&self.inner.pending).waiting.remove(&id);
        match waiter {
            // The requester may have timed out in the meantime; then nobody listens.
            Some(waiter) => drop(waiter.send(answer)),
            None => tracing::warn!(%id, "ignoring a response to no pending request"),
        }
    }

    /// The client's input closed: fail every pending request now and refuse new ones.
    pub(crate) fn close(&self) {
        let mut pending = lock(&self.inner.pending);
        pending.closed = true;
        // Dropping the senders wakes every waiter with "disconnected".
        pending.waiting.clear();
    }
}

/// Removes a request from the pending table when its caller stops waiting.
struct PendingGuard<'a> {
    client: &'a Client,
    id: &'a RequestId,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        lock(&self.client.inner.pending).waiting.remove(self.id);
    }
}

fn to_raw<P: Serialize>(method: &str, params: &P) -> Result<Box<RawValue>, ClientRequestError> {
    serde_json::value::to_raw_value(params).map_err(|e| ClientRequestError::InvalidParams {
        method: method.to_owned(),
        detail: e.to_string(),
    })
}
