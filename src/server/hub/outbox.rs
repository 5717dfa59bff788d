//! The one way out to the client: every notification the daemon sends is queued here, in the
//! order it was reported, for one forwarder task that writes it through the peer's [`Client`].
//! [`Outbox::flush`] resolves once everything queued so far was handed to the writer, which is
//! how a request's notifications go out before its answer (the router flushes, see
//! `server/table.rs`).
//!
//! Notifications the client opted out of in `initialize` are dropped here; so is `$/progress`
//! for a token the client refused to create.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use super::lock;
use crate::protocol::method::{Progress, WorkDoneProgressCreate};
use crate::protocol::{
    ClientCapabilities, Method, ProgressParams, ProgressToken, ServerNotification,
    WorkDoneProgress, WorkDoneProgressTokenParams,
};
use crate::rpc::Client;

/// How long the client gets to answer `window/workDoneProgress/create`.
pub(crate) const CREATE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the forwarder task does, in order.
pub(super) enum Out {
    /// The whole message, serialised when queued: a queued value would hold a parsed copy of
    /// what may be a compaction's megabytes of details until the writer gets to it, and
    /// serialised params would be copied once more into the message (issue 35 item 7).
    Notify(&'static str, String),
    /// Ask the client to create a progress token; `$/progress` for it is dropped if refused.
    CreateProgress(ProgressToken),
    Flush(oneshot::Sender<()>),
}

/// The queue to the client and what it may receive; see the module doc.
pub struct Outbox {
    tx: mpsc::UnboundedSender<Out>,
    /// Taken by the forwarder when it starts (at `initialize`); until then messages wait.
    rx: Mutex<Option<mpsc::UnboundedReceiver<Out>>>,
    capabilities: OnceLock<ClientCapabilities>,
}

impl Outbox {
    pub fn new() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Outbox {
            tx,
            rx: Mutex::new(Some(rx)),
            capabilities: OnceLock::new(),
        }
    }

    pub(crate) fn set_capabilities(&self, capabilities: ClientCapabilities) {
        let _ = self.capabilities.set(capabilities);
    }

    /// Whether the client shows server-initiated progress (`window.workDoneProgress`).
    pub fn supports_progress(&self) -> bool {
        self.capabilities
            .get()
            .is_some_and(ClientCapabilities::supports_work_done_progress)
    }

    /// Starts the forwarder on `client` (once, at `initialize`).
    pub(crate) fn start(&self, client: Client) {
        let Some(mut rx) = lock(&self.rx).take() else {
            return;
        };
        tokio::spawn(async move {
            let mut refused: HashSet<ProgressToken> = HashSet::new();
            while let Some(out) = rx.recv().await {
                match out {
                    Out::Notify(method, message) => {
                        if method == Progress::NAME && names_refused(&message, &refused) {
                            continue;
                        }
                        // A closed connection: keep draining so flushes still resolve.
                        let _ = client.send(message).await;
                    }
                    Out::CreateProgress(token) => {
                        let params = WorkDoneProgressTokenParams {
                            token: token.clone(),
                        };
                        let created = crate::server::request_ack::<WorkDoneProgressCreate>(
                            &client,
                            params,
                            CREATE_TIMEOUT,
                        )
                        .await;
                        if let Err(error) = created {
                            tracing::debug!(%error, "no progress token");
                            refused.insert(token);
                        }
                    }
                    Out::Flush(done) => {
                        let _ = done.send(());
                    }
                }
            }
        });
    }

    /// Resolves once everything queued so far was handed to the writer.
    pub async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Out::Flush(done)).is_ok() && lock(&self.rx).is_none() {
            let _ = wait.await;
        }
    }

    /// Queues the notification `M`; its wire name and params type come from the protocol
    /// table. Dropped when the client opted out of it.
    pub fn notify<M: ServerNotification>(&self, params: M::Params) {
        self.notify_as::<M>(&params);
    }

    /// Queues the notification `M` from `params`, a borrowed form of `M::Params` that
    /// serialises exactly as the owned one would (`to_proto`'s `…Ref` forms): for the large
    /// ones, so nothing is copied to build them.
    pub(super) fn notify_as<M: ServerNotification>(&self, params: &impl Serialize) {
        let method = M::NAME;
        if self
            .capabilities
            .get()
            .is_some_and(|c| c.opted_out_of(method))
        {
            return;
        }
        match crate::rpc::notification_json(method, params) {
            // The receiver lives as long as the forwarder; nobody to tell otherwise.
            Ok(message) => drop(self.tx.send(Out::Notify(method, message))),
            Err(error) => tracing::error!(%error, method, "cannot serialise a notification"),
        }
    }

    /// Queues `$/progress` `value` on `token`.
    pub fn progress(&self, token: &ProgressToken, value: WorkDoneProgress) {
        self.notify::<Progress>(ProgressParams {
            token: token.clone(),
            value,
        });
    }

    /// Queues the request that asks the client to create `token`, in order with the
    /// notifications: the `$/progress` queued after it waits for the client's answer.
    pub fn create_progress(&self, token: ProgressToken) {
        drop(self.tx.send(Out::CreateProgress(token)));
    }

    /// The `$/progress` params queued so far, taking the queue (the forwarder must not have
    /// started).
    #[cfg(test)]
    pub(super) fn queued_progress(&self) -> Vec<ProgressParams> {
        let mut rx = lock(&self.rx)
            .take()
            .expect("the forwarder was not started");
        let mut out = Vec::new();
        while let Ok(message) = rx.try_recv() {
            if let Out::Notify(method, message) = message
                && method == Progress::NAME
            {
                let message: Message<ProgressParams> =
                    serde_json::from_str(&message).expect("progress");
                out.push(message.params);
            }
        }
        out
    }
}

impl Default for Outbox {
    fn default() -> Self {
        Self::new()
    }
}

/// The params of a queued message.
#[derive(serde::Deserialize)]
struct Message<P> {
    params: P,
}

/// Whether a `$/progress` message names a token the client refused.
fn names_refused(message: &str, refused: &HashSet<ProgressToken>) -> bool {
    #[derive(serde::Deserialize)]
    struct Token {
        token: ProgressToken,
    }
    if refused.is_empty() {
        return false;
    }
    serde_json::from_str::<Message<Token>>(message).is_ok_and(|m| refused.contains(&m.params.token))
}
