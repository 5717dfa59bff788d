//! The engine's hooks and the client summarizer, answered by the client through
//! server-to-client requests (`hooks/*`, `summarizer/summarize`).
//!
//! Each is used only when the client declared it in `initialize`. A timeout (from settings),
//! an error answer or a disconnect means "no answer": the engine takes the default path.

use std::sync::Arc;
use std::time::Duration;

use super::{from_proto, to_proto};
use crate::engine::{
    BeforeCompactReply, BeforeCompactRequest, BeforeTreeReply, BeforeTreeRequest, CompactingReply,
    CompactingRequest, Engine, EngineHooks, Summarizer,
};
use crate::protocol::method::*;
use crate::protocol::{HookCapabilities, ServerRequest};
use crate::rpc::Client;
use crate::settings::Settings;
use crate::summarize::client::{ClientCallback, ClientSummarizer};
use futures::future::BoxFuture;

/// The hooks the client declared, asked with server-to-client requests.
pub struct ClientHooks {
    pub client: Client,
    pub declared: HookCapabilities,
    pub engine: std::sync::Weak<Engine>,
}

impl ClientHooks {
    fn settings(&self) -> Settings {
        self.engine
            .upgrade()
            .and_then(|engine| engine.settings().effective().ok())
            .unwrap_or_default()
    }

    async fn ask<M: ServerRequest>(
        &self,
        params: M::Params,
        timeout: Duration,
    ) -> Option<M::Result> {
        match super::request::<M>(&self.client, params, timeout).await {
            Ok(answer) => Some(answer),
            Err(error) => {
                tracing::warn!(%error, "no answer from a hook; taking the default path");
                None
            }
        }
    }
}

impl EngineHooks for ClientHooks {
    fn wants_branch_entries(&self) -> bool {
        self.declared.before_compact
    }

    fn before_compact<'a>(
        &'a self,
        req: BeforeCompactRequest<'a>,
    ) -> BoxFuture<'a, Option<BeforeCompactReply>> {
        Box::pin(async move {
            if !self.declared.before_compact {
                return None;
            }
            let params = to_proto::before_compact_params(&req);
            let timeout = self.settings().hooks.before_compact_timeout();
            let answer = self.ask::<HooksBeforeCompact>(params, timeout).await?;
            Some(from_proto::before_compact_reply(answer))
        })
    }

    fn compacting<'a>(
        &'a self,
        req: CompactingRequest<'a>,
    ) -> BoxFuture<'a, Option<CompactingReply>> {
        Box::pin(async move {
            if !self.declared.compacting {
                return None;
            }
            let params = to_proto::compacting_params(&req);
            let timeout = self.settings().hooks.compacting_timeout();
            let answer = self.ask::<HooksCompacting>(params, timeout).await?;
            Some(from_proto::compacting_reply(answer))
        })
    }

    fn before_tree<'a>(
        &'a self,
        req: BeforeTreeRequest<'a>,
    ) -> BoxFuture<'a, Option<BeforeTreeReply>> {
        Box::pin(async move {
            if !self.declared.before_tree {
                return None;
            }
            let params = to_proto::before_tree_params(&req);
            let timeout = self.settings().hooks.before_tree_timeout();
            let answer = self.ask::<HooksBeforeTree>(params, timeout).await?;
            Some(from_proto::before_tree_reply(answer))
        })
    }
}

/// The client summarizer of `session_id`: `summarizer/summarize` sent to the client, naming
/// the session. Its own timeout is applied by [`ClientSummarizer`]; the request's is a backstop
/// slightly longer.
pub fn client_summarizer(
    client: Client,
    timeout: Duration,
    session_id: &str,
) -> Arc<dyn Summarizer> {
    let session_id = session_id.to_owned();
    let callback: ClientCallback = Box::new(move |req| {
        let client = client.clone();
        let params = to_proto::summarize_params(&session_id, req);
        Box::pin(async move {
            super::request::<SummarizerSummarize>(&client, params, timeout + Duration::from_secs(1))
                .await
                .map(|answer| Some(answer.text))
                .map_err(|error| error.to_string())
        })
    });
    Arc::new(ClientSummarizer::new(callback, timeout))
}
