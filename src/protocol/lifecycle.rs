//! `initialize` and its capabilities, `$/cancelRequest`.
//!
//! `initialize` accepts LSP `InitializeParams` as VS Code's and Neovim's LSP clients send
//! them: fields compactd does not use (`rootUri`, `workspaceFolders`, `textDocument`
//! capabilities, ...) are ignored, never rejected, and `capabilities.window.workDoneProgress`
//! counts like compactd's own `capabilities.workDoneProgress`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::rpc::RequestId;

/// The protocol version in `InitializeResult.capabilities.protocolVersion`. It changes only
/// when a change would break an existing client.
pub const PROTOCOL_VERSION: u32 = 1;

/// Params of `initialize`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams {
    /// The client's process id. compactd exits when that process dies (LSP semantics);
    /// `null` or absent: not watched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_id: Option<u32>,
    /// Who the client is, for logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_info: Option<ClientInfo>,
    /// What the client can do; everything defaults to "no".
    #[serde(default)]
    pub capabilities: ClientCapabilities,
    /// Settings overrides for this connection (the `initialize` settings layer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization_options: Option<InitializationOptions>,
}

/// The client's name and version (LSP `clientInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientInfo {
    /// E.g. `vscode-compactd`, `nvim`, `my-agent`.
    pub name: String,
    /// The client's version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// What the client supports. compactd sends a server-to-client request only when the client
/// declared it here; capabilities are fixed for the connection.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientCapabilities {
    /// Which `hooks/*` requests the client answers.
    #[serde(default)]
    pub hooks: HookCapabilities,
    /// The client answers `summarizer/summarize` (needed for `summarizer.kind = "client"`).
    #[serde(default)]
    pub summarizer: bool,
    /// The client understands `window/workDoneProgress/create` and `$/progress` for
    /// server-initiated progress (LSP `window.workDoneProgress`).
    #[serde(default)]
    pub work_done_progress: bool,
    /// Notification methods the client does not want, by exact name (e.g.
    /// `session/compactionDelta`).
    #[serde(default)]
    pub opt_out_notifications: Vec<String>,
    /// LSP's window capabilities; `window.workDoneProgress` is honoured like
    /// `workDoneProgress`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowCapabilities>,
}

impl ClientCapabilities {
    /// Whether server-initiated progress may be used, in either spelling.
    pub fn supports_work_done_progress(&self) -> bool {
        self.work_done_progress
            || self
                .window
                .as_ref()
                .and_then(|w| w.work_done_progress)
                .unwrap_or(false)
    }

    /// Whether the client opted out of `method`.
    pub fn opted_out_of(&self, method: &str) -> bool {
        self.opt_out_notifications.iter().any(|m| m == method)
    }
}

/// The hooks a client answers; each defaults to `false` (not asked).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookCapabilities {
    /// `hooks/beforeCompact`: cancel a compaction or supply it.
    #[serde(default)]
    pub before_compact: bool,
    /// `hooks/compacting`: add context, replace the prompt, attach `preserveData`.
    #[serde(default)]
    pub compacting: bool,
    /// `hooks/beforeTree`: cancel a navigation or supply the branch summary.
    #[serde(default)]
    pub before_tree: bool,
}

/// LSP `ClientCapabilities.window`, the part compactd reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WindowCapabilities {
    /// LSP: the client supports server-initiated progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_done_progress: Option<bool>,
}

/// `initializationOptions`. Other keys are ignored.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitializationOptions {
    /// A partial `settings.json` object (see `settings.schema.json`), layered above the user
    /// and project files for this connection. Invalid settings fail `initialize` with
    /// `settingsInvalid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<Map<String, Value>>,
}

/// Result of `initialize`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    /// compactd's name and version.
    pub server_info: ServerInfo,
    /// What this server supports.
    pub capabilities: ServerCapabilities,
}

/// The server's name and version (LSP `serverInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerInfo {
    /// `compactd`.
    pub name: String,
    /// The crate version, e.g. `0.1.0`.
    pub version: String,
}

/// The server's capabilities. LSP clients ignore these keys; compactd clients read them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerCapabilities {
    /// The protocol version (1); it changes only when a change would break a client.
    pub protocol_version: u32,
    /// The requests the client may send, by wire name.
    pub methods: Vec<String>,
    /// The notifications the server may send, by wire name.
    pub notifications: Vec<String>,
    /// The server-to-client requests the server may send (only those the client declared).
    pub server_requests: Vec<String>,
}

/// Params of `$/cancelRequest` (LSP).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CancelParams {
    /// The id of the request to cancel. It is answered with `cancelled` (-32800) unless it
    /// already finished.
    #[schemars(with = "IdSchema")]
    pub id: RequestId,
}

/// A JSON-RPC request id: an integer or a string.
#[derive(JsonSchema)]
#[serde(untagged)]
#[schemars(rename = "RequestId")]
#[allow(dead_code)]
enum IdSchema {
    Number(i64),
    String(String),
}

/// The params of methods that take none (`shutdown`, `initialized`, `exit`). Absent params,
/// `null` and any object are accepted (LSP clients send `{}` or nothing); it is sent as `{}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NoParams;

impl Serialize for NoParams {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        serializer.serialize_map(Some(0))?.end()
    }
}

impl<'de> Deserialize<'de> for NoParams {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(deserializer).map(|_| NoParams)
    }
}

impl JsonSchema for NoParams {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "NoParams".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "No params: absent, `null` or an object (ignored).",
            "type": ["object", "null"]
        })
    }
}
