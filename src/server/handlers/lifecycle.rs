//! `initialize`, `initialized`, `shutdown` and `window/workDoneProgress/cancel`.

use std::sync::Arc;

use crate::engine::EngineError;
use crate::protocol::Method;
use crate::protocol::method::*;
use crate::protocol::{
    Direction, ErrorKind, InitializeParams, InitializeResult, METHODS, MessageKind, NoParams,
    PROTOCOL_VERSION, ServerCapabilities, ServerInfo, WorkDoneProgressTokenParams,
};
use crate::rpc::{NotificationCtx, RequestCtx, RpcError};
use crate::server::hub::CancelTarget;
use crate::server::{ClientHooks, Daemon, client_summarizer, to_proto};

/// Records the client's capabilities, layers its settings, wires hooks, the client
/// summarizer and notifications to it, and watches its process.
pub async fn initialize(
    daemon: Arc<Daemon>,
    ctx: RequestCtx,
    params: InitializeParams,
) -> Result<InitializeResult, RpcError> {
    if let Some(settings) = &params
        .initialization_options
        .as_ref()
        .and_then(|o| o.settings.clone())
    {
        let layer = serde_json::Value::Object(settings.clone());
        daemon
            .engine
            .update_settings(|stack| {
                stack
                    .set_initialize(&layer)
                    .map_err(|e| EngineError::Settings(e.to_string()))
            })
            .map_err(to_proto::error)?;
    }
    let capabilities = params.capabilities.clone();
    if !daemon.set_capabilities(capabilities.clone()) {
        return Err(RpcError::already_initialized());
    }
    daemon.hub.start(ctx.client().clone());
    let hooks = capabilities.hooks;
    if hooks.before_compact || hooks.compacting || hooks.before_tree {
        daemon.engine.set_hooks(Arc::new(ClientHooks {
            client: ctx.client().clone(),
            declared: hooks,
            engine: Arc::downgrade(&daemon.engine),
        }));
    }
    if capabilities.summarizer {
        let timeout = daemon
            .engine
            .settings()
            .effective()
            .map(|s| s.summarizer.client_timeout())
            .map_err(|e| ErrorKind::SettingsInvalid.with_message(e.to_string()))?;
        let client = ctx.client().clone();
        daemon
            .engine
            .set_client_summarizer_factory(Some(Arc::new(move |session_id: &str| {
                client_summarizer(client.clone(), timeout, session_id)
            })));
    }
    if let Some(pid) = params.process_id {
        ctx.peer().watch_parent(pid);
    }
    if let Some(info) = &params.client_info {
        tracing::info!(client = %info.name, version = ?info.version, "initialized");
    }
    let names = |direction, kind| {
        METHODS
            .iter()
            .filter(move |m| m.direction == direction && m.kind == kind)
            .map(|m| m.name.to_owned())
    };
    let mut server_requests = Vec::new();
    if capabilities.supports_work_done_progress() {
        server_requests.push(WorkDoneProgressCreate::NAME.to_owned());
    }
    for (declared, name) in [
        (hooks.before_compact, HooksBeforeCompact::NAME),
        (hooks.compacting, HooksCompacting::NAME),
        (hooks.before_tree, HooksBeforeTree::NAME),
        (capabilities.summarizer, SummarizerSummarize::NAME),
    ] {
        if declared {
            server_requests.push(name.to_owned());
        }
    }
    Ok(InitializeResult {
        server_info: ServerInfo {
            name: "compactd".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
        },
        capabilities: ServerCapabilities {
            protocol_version: PROTOCOL_VERSION,
            methods: names(Direction::ClientToServer, MessageKind::Request).collect(),
            notifications: names(Direction::ServerToClient, MessageKind::Notification)
                .filter(|m| !capabilities.opted_out_of(m))
                .collect(),
            server_requests,
        },
    })
}

/// The client got the `initialize` result; nothing to do.
pub async fn initialized(_: Arc<Daemon>, _: NotificationCtx, _: NoParams) {}

/// Later requests are refused by the transport; in-flight ones finish. The router flushes the
/// notifications queued so far before the answer.
pub async fn shutdown(_: Arc<Daemon>, _: RequestCtx, _: NoParams) -> Result<(), RpcError> {
    Ok(())
}

/// The editor's progress UI cancels the operation behind a token.
pub async fn work_done_progress_cancel(
    daemon: Arc<Daemon>,
    _: NotificationCtx,
    params: WorkDoneProgressTokenParams,
) {
    match daemon.hub.cancel_target(&params.token) {
        Some(CancelTarget::Token(token)) => token.cancel(),
        Some(CancelTarget::AbortCompaction(session_id)) => {
            // A closed session has nothing left to abort.
            let _ = daemon.engine.abort_compaction(&session_id);
        }
        None => tracing::debug!(token = ?params.token, "cancel for no running operation"),
    }
}
