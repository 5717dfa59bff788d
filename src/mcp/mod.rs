//! `compactd mcp`: a Model Context Protocol server on stdio, so any agent that speaks MCP
//! (Claude Code, Codex, opencode, ...) gets recall of its compacted history as tools.
//!
//! The subset of MCP it serves (protocol versions 2025-06-18 and 2025-11-25): newline-delimited
//! JSON-RPC 2.0 on stdin/stdout; `initialize`, `ping`, `tools/list` and `tools/call` requests;
//! notifications (`notifications/initialized`, cancellations) are accepted and need no answer.
//! Any other request is answered with JSON-RPC's method-not-found error (Claude Code asks
//! `server/discover` first), a line that is not JSON with a parse error: never a crash. A
//! failing tool is a result with `isError: true` and a message the model can act on.
//!
//! The tools run on the [`Engine`] like the daemon's handlers; sessions are opened read-only
//! (the agent owns its file), by path or stored id under the same rules as `session/open`.
//! The wire types are this module's own ([`tools`]), converted here. Every tool is marked
//! `readOnlyHint` (it never writes), so an agent may run it without asking for approval.

mod tools;

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader};

use crate::engine::{Engine, EngineEvent, EventSink};
use crate::foreign::claude;
use crate::settings::SettingsStack;

/// The protocol versions served, newest first: the newest is offered when the client asks
/// for one not in this list.
pub const PROTOCOL_VERSIONS: [&str; 2] = ["2025-11-25", "2025-06-18"];

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;

/// Engine events have no reader here: tools answer with what they did.
struct Quiet;

impl EventSink for Quiet {
    fn emit(&self, _: EngineEvent) {}
}

/// The server's state: the engine and the sessions the tools opened, by what the model called
/// them (a path or an id) → the engine's session id.
pub struct McpServer {
    engine: Arc<Engine>,
    opened: tokio::sync::Mutex<HashMap<String, String>>,
}

impl McpServer {
    pub fn new(settings: SettingsStack) -> Self {
        McpServer {
            engine: Arc::new(Engine::new(settings, Arc::new(Quiet))),
            opened: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The engine's id of `session` (a `.jsonl` path or a stored session id), opened
    /// read-only the first time. A Claude Code transcript is read again on every call (the
    /// agent is appending to it while it asks).
    async fn session_id(&self, session: &str) -> Result<String, crate::engine::EngineError> {
        if claude::is_transcript(std::path::Path::new(session)) {
            return self.transcript_id(session).await;
        }
        let mut opened = self.opened.lock().await;
        if let Some(id) = opened.get(session) {
            return Ok(id.clone());
        }
        let info = self
            .engine
            .open_with(session, true, Arc::new(|_| {}))
            .await?;
        opened.insert(session.to_owned(), info.id.clone());
        Ok(info.id)
    }

    /// A Claude Code transcript read into a session now: opened from a temporary copy in
    /// compactd's format, removed once loaded; the session opened for it before is closed.
    async fn transcript_id(&self, path: &str) -> Result<String, crate::engine::EngineError> {
        use crate::engine::EngineError;
        let owned = path.to_owned();
        let copy = tokio::task::spawn_blocking(move || -> Result<_, String> {
            let transcript =
                claude::read(std::path::Path::new(&owned)).map_err(|e| e.to_string())?;
            let dir = tempfile::Builder::new()
                .prefix("compactd-claude-")
                .tempdir()
                .map_err(|e| e.to_string())?;
            let file = dir.path().join(format!("{}.jsonl", transcript.session_id));
            std::fs::write(&file, &transcript.session_jsonl).map_err(|e| e.to_string())?;
            Ok((dir, file))
        })
        .await
        .map_err(|e| EngineError::InvalidParams(e.to_string()))?
        .map_err(EngineError::InvalidParams)?;
        let (dir, file) = copy;
        let mut opened = self.opened.lock().await;
        if let Some(before) = opened.remove(path) {
            let _ = self.engine.close(&before).await;
        }
        let info = self
            .engine
            .open_with(&file.to_string_lossy(), true, Arc::new(|_| {}))
            .await;
        drop(dir);
        let info = info?;
        opened.insert(path.to_owned(), info.id.clone());
        Ok(info.id)
    }

    /// The answer to one line, if it needs one.
    pub async fn handle_line(&self, line: &str) -> Option<Value> {
        let message: Value = match serde_json::from_str(line) {
            Ok(message) => message,
            Err(error) => {
                return Some(error_response(
                    Value::Null,
                    PARSE_ERROR,
                    &format!("parse error: {error}"),
                ));
            }
        };
        let Some(object) = message.as_object() else {
            return Some(error_response(
                Value::Null,
                INVALID_REQUEST,
                "expected one JSON-RPC object (batches are not part of MCP since 2025-06-18)",
            ));
        };
        let method = object.get("method").and_then(Value::as_str);
        let id = object.get("id").cloned();
        let (Some(method), Some(id)) = (method, id) else {
            // A notification, or a response to a request this server never sends.
            return None;
        };
        let params = object.get("params").cloned().unwrap_or(Value::Null);
        Some(match self.request(method, params).await {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err((code, message)) => error_response(id, code, &message),
        })
    }

    async fn request(&self, method: &str, params: Value) -> Result<Value, (i64, String)> {
        match method {
            "initialize" => Ok(initialize_result(&params)),
            "ping" => Ok(json!({})),
            "tools/list" => Ok(json!({"tools": tools::list()})),
            "tools/call" => {
                let name = params
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or((INVALID_PARAMS, "tools/call needs a tool `name`".to_owned()))?;
                let arguments = params.get("arguments").cloned().unwrap_or(json!({}));
                tools::call(self, name, arguments)
                    .await
                    .ok_or((INVALID_PARAMS, format!("unknown tool: {name}")))
            }
            other => Err((METHOD_NOT_FOUND, format!("method not found: {other}"))),
        }
    }
}

fn error_response(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

fn initialize_result(params: &Value) -> Value {
    let asked = params.get("protocolVersion").and_then(Value::as_str);
    let version = asked
        .filter(|v| PROTOCOL_VERSIONS.contains(v))
        .unwrap_or(PROTOCOL_VERSIONS[0]);
    json!({
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": false}},
        "serverInfo": {"name": "compactd", "title": "compactd recall", "version": env!("CARGO_PKG_VERSION")},
        "instructions": "Earlier parts of a coding session that were compacted away are still on disk. \
            Use search_history to find them (by text or regex) and read_history_entry to read \
            an entry whole; `session` is the session file's path or its id.",
    })
}

/// Serves MCP on stdin/stdout until stdin ends.
pub async fn serve_stdio(settings: SettingsStack) -> std::io::Result<()> {
    serve(tokio::io::stdin(), tokio::io::stdout(), settings).await
}

/// Serves MCP on any byte streams, one request at a time, in order.
pub async fn serve<R, W>(reader: R, mut writer: W, settings: SettingsStack) -> std::io::Result<()>
where
    R: tokio::io::AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let server = McpServer::new(settings);
    let mut lines = BufReader::new(reader).lines();
    while let Some(line) = lines.next_line().await? {
        if line.trim().is_empty() {
            continue;
        }
        if let Some(answer) = server.handle_line(&line).await {
            let mut text = answer.to_string();
            text.push('\n');
            writer.write_all(text.as_bytes()).await?;
            writer.flush().await?;
        }
    }
    Ok(())
}
