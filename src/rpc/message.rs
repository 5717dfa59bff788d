//! JSON-RPC 2.0 messages: request ids, errors with their standard codes, parsing what the
//! client sent into requests, notifications and responses, and serialising what we send.
//!
//! Parsing never panics and never fails silently: anything that is not a well-formed message
//! becomes an `InvalidMessage` carrying the error to answer with (and the request id when
//! it could be recovered).

use std::fmt;

use serde::de::{DeserializeOwned, IgnoredAny};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

/// Standard JSON-RPC and LSP error codes used by the peer.
pub mod error_code {
    /// The input is not valid JSON (or could not be framed).
    pub const PARSE_ERROR: i64 = -32700;
    /// Valid JSON, but not a valid JSON-RPC message (also: "server is shutting down").
    pub const INVALID_REQUEST: i64 = -32600;
    /// No method of that name is registered.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// The params do not match the method's params type.
    pub const INVALID_PARAMS: i64 = -32602;
    /// The handler failed in a way that is the server's fault.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// LSP: the request was cancelled (`$/cancelRequest` or an abort).
    pub const REQUEST_CANCELLED: i64 = -32800;
    /// Too many requests in flight; retry later.
    pub const OVERLOADED: i64 = -32001;
    /// A request other than `initialize` arrived before initialization.
    pub const NOT_INITIALIZED: i64 = -32002;
}

/// The transport's own error kinds (`data.kind`), which any request can get whatever its
/// method: the input could not be framed or parsed, the method is unknown, the lifecycle or
/// the ingress limits refused it, or the server failed. The protocol's typed errors are
/// `protocol::ErrorKind`; both lists are in the schema bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransportErrorKind {
    /// -32700: the input is not JSON, or its framing is broken.
    ParseError,
    /// -32600: valid JSON, but not a JSON-RPC message (a batch, a bad id, a reused id).
    InvalidRequest,
    /// -32600: a message over the size limit (skipped whole).
    MessageTooLarge,
    /// -32600: a second `initialize`.
    AlreadyInitialized,
    /// -32600: a request after `shutdown`.
    ShuttingDown,
    /// -32601: no method of that name.
    MethodNotFound,
    /// -32603: the server failed (a handler panicked, a result did not serialise).
    Internal,
    /// -32001: too much work in flight; retry later.
    Overloaded,
}

impl TransportErrorKind {
    /// Every kind, in code order.
    pub const ALL: [TransportErrorKind; 8] = [
        TransportErrorKind::ParseError,
        TransportErrorKind::InvalidRequest,
        TransportErrorKind::MessageTooLarge,
        TransportErrorKind::AlreadyInitialized,
        TransportErrorKind::ShuttingDown,
        TransportErrorKind::MethodNotFound,
        TransportErrorKind::Internal,
        TransportErrorKind::Overloaded,
    ];

    /// The JSON-RPC error code.
    pub const fn code(self) -> i64 {
        match self {
            Self::ParseError => error_code::PARSE_ERROR,
            Self::InvalidRequest
            | Self::MessageTooLarge
            | Self::AlreadyInitialized
            | Self::ShuttingDown => error_code::INVALID_REQUEST,
            Self::MethodNotFound => error_code::METHOD_NOT_FOUND,
            Self::Internal => error_code::INTERNAL_ERROR,
            Self::Overloaded => error_code::OVERLOADED,
        }
    }

    /// The `data.kind` string.
    pub const fn name(self) -> &'static str {
        match self {
            Self::ParseError => "parseError",
            Self::InvalidRequest => "invalidRequest",
            Self::MessageTooLarge => "messageTooLarge",
            Self::AlreadyInitialized => "alreadyInitialized",
            Self::ShuttingDown => "shuttingDown",
            Self::MethodNotFound => "methodNotFound",
            Self::Internal => "internal",
            Self::Overloaded => "overloaded",
        }
    }

    /// The message's shape (details follow the colon where there is one).
    pub const fn message(self) -> &'static str {
        match self {
            Self::ParseError => "parse error: <detail>",
            Self::InvalidRequest => "invalid request: <detail>",
            Self::MessageTooLarge => "invalid request: message exceeds the limit of <n> bytes …",
            Self::AlreadyInitialized => {
                "already initialized: `initialize` may be sent once per connection"
            }
            Self::ShuttingDown => "server is shutting down",
            Self::MethodNotFound => "unknown method `<method>`",
            Self::Internal => "internal error: <detail>",
            Self::Overloaded => "server overloaded; retry later",
        }
    }

    /// The kind named by a `data.kind` string.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.name() == name)
    }
}

/// A request id: JSON-RPC allows numbers and strings.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    Number(i64),
    String(String),
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Number(n) => write!(f, "{n}"),
            Self::String(s) => write!(f, "{s:?}"),
        }
    }
}

impl From<i64> for RequestId {
    fn from(n: i64) -> Self {
        Self::Number(n)
    }
}

impl From<String> for RequestId {
    fn from(s: String) -> Self {
        Self::String(s)
    }
}

impl From<&str> for RequestId {
    fn from(s: &str) -> Self {
        Self::String(s.to_owned())
    }
}

/// A JSON-RPC error object. Typed errors carry `data: {"kind": "..."}` so clients can match
/// on a stable string rather than on the message. (`data` is boxed to keep `Result<_,
/// RpcError>` small.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{message} (code {code})")]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Box<Value>>,
}

impl RpcError {
    /// An error with any code and message and no data.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// Sets `data.kind` (keeping other fields of an object `data`).
    pub fn with_kind(self, kind: &str) -> Self {
        self.with_data_field("kind", kind)
    }

    /// Sets one more field of the `data` object (e.g. a path or an id).
    pub fn with_data_field(mut self, name: &str, value: impl Into<Value>) -> Self {
        match self.data.as_deref_mut() {
            Some(Value::Object(map)) => {
                map.insert(name.into(), value.into());
            }
            _ => self.data = Some(Box::new(serde_json::json!({ name: value.into() }))),
        }
        self
    }

    /// `data.kind`, when there is one.
    pub fn kind(&self) -> Option<&str> {
        self.data.as_ref()?.get("kind")?.as_str()
    }

    /// -32700: the input could not be parsed.
    pub fn parse_error(detail: impl fmt::Display) -> Self {
        Self::new(error_code::PARSE_ERROR, format!("parse error: {detail}"))
            .with_kind(TransportErrorKind::ParseError.name())
    }

    /// -32600: the input is not a valid JSON-RPC message.
    pub fn invalid_request(detail: impl fmt::Display) -> Self {
        Self::new(
            error_code::INVALID_REQUEST,
            format!("invalid request: {detail}"),
        )
        .with_kind(TransportErrorKind::InvalidRequest.name())
    }

    /// -32601: "unknown method `foo/bar`".
    pub fn method_not_found(method: &str) -> Self {
        Self::new(
            error_code::METHOD_NOT_FOUND,
            format!("unknown method `{method}`"),
        )
        .with_kind(TransportErrorKind::MethodNotFound.name())
    }

    /// -32602: "invalid params for `method`: detail".
    pub fn invalid_params(method: &str, detail: impl fmt::Display) -> Self {
        Self::new(
            error_code::INVALID_PARAMS,
            format!("invalid params for {method}: {detail}"),
        )
        .with_kind("invalidParams")
    }

    /// -32603: the server failed.
    pub fn internal(detail: impl fmt::Display) -> Self {
        Self::new(
            error_code::INTERNAL_ERROR,
            format!("internal error: {detail}"),
        )
        .with_kind(TransportErrorKind::Internal.name())
    }

    /// -32800: the request was cancelled. Handlers return this when they see their token
    /// cancelled.
    pub fn request_cancelled() -> Self {
        Self::new(error_code::REQUEST_CANCELLED, "request cancelled").with_kind("cancelled")
    }

    /// -32001: too much work queued.
    pub fn overloaded() -> Self {
        Self::new(
            error_code::OVERLOADED,
            TransportErrorKind::Overloaded.message(),
        )
        .with_kind(TransportErrorKind::Overloaded.name())
    }

    /// -32600 `messageTooLarge`: a message over the size limit was skipped.
    pub fn message_too_large(detail: impl fmt::Display) -> Self {
        Self::new(
            error_code::INVALID_REQUEST,
            format!("invalid request: {detail}"),
        )
        .with_kind(TransportErrorKind::MessageTooLarge.name())
    }

    /// -32002: a request before `initialize` (or while it is still running).
    pub fn not_initialized() -> Self {
        Self::new(
            error_code::NOT_INITIALIZED,
            "not initialized: send `initialize` first and wait for its response",
        )
        .with_kind("notInitialized")
    }

    /// -32600: a second `initialize`.
    pub fn already_initialized() -> Self {
        Self::new(
            error_code::INVALID_REQUEST,
            "already initialized: `initialize` may be sent once per connection",
        )
        .with_kind(TransportErrorKind::AlreadyInitialized.name())
    }

    /// -32600: a request after `shutdown`.
    pub fn shutting_down() -> Self {
        Self::new(
            error_code::INVALID_REQUEST,
            TransportErrorKind::ShuttingDown.message(),
        )
        .with_kind(TransportErrorKind::ShuttingDown.name())
    }
}

/// A message received from the client.
#[derive(Debug)]
pub(crate) enum Incoming {
    Request {
        id: RequestId,
        method: String,
        params: Option<Box<RawValue>>,
    },
    Notification {
        method: String,
        params: Option<Box<RawValue>>,
    },
    /// The client's answer to one of our requests.
    Response {
        id: RequestId,
        result: Result<Box<RawValue>, RpcError>,
    },
}

/// Input that is not a message we can act on, and how to answer it.
#[derive(Debug)]
pub(crate) struct InvalidMessage {
    /// The request id, when it could be recovered; the answer goes to id `null` otherwise.
    pub id: Option<RequestId>,
    pub error: RpcError,
    /// Responses are never answered (JSON-RPC forbids it); the problem is only logged.
    pub answer: bool,
}

/// The members of any JSON-RPC message. `present` keeps an explicit `null` apart from a
/// missing member (`"result": null` is a valid result; `"id": null` is not a request id).
#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    jsonrpc: Option<String>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Option<Box<RawValue>>,
    #[serde(default, deserialize_with = "present")]
    result: Option<Box<RawValue>>,
    #[serde(default, deserialize_with = "present")]
    error: Option<Value>,
}

fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(de: D) -> Result<Option<T>, D::Error> {
    T::deserialize(de).map(Some)
}

/// Parses one framed message.
pub(crate) fn parse_incoming(bytes: &[u8]) -> Result<Incoming, InvalidMessage> {
    let reject = |id: Option<RequestId>, error: RpcError| InvalidMessage {
        id,
        error,
        answer: true,
    };
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'[') {
        return Err(match serde_json::from_slice::<IgnoredAny>(bytes) {
            Err(e) => reject(None, RpcError::parse_error(e)),
            Ok(_) => reject(
                None,
                RpcError::invalid_request("batches are not supported; send one message at a time"),
            ),
        });
    }
    let envelope: Envelope = match serde_json::from_slice(bytes) {
        Ok(envelope) => envelope,
        Err(e) if e.is_data() => {
            return Err(reject(recover_id(bytes), RpcError::invalid_request(e)));
        }
        Err(e) => return Err(reject(None, RpcError::parse_error(e))),
    };
    classify(envelope).map_err(|rejection| {
        let (id, error, answer) = *rejection;
        InvalidMessage { id, error, answer }
    })
}

/// `(id to answer, error, whether to answer)`; boxed as it is the cold path.
type Rejection = Box<(Option<RequestId>, RpcError, bool)>;

fn classify(envelope: Envelope) -> Result<Incoming, Rejection> {
    let id = envelope.id.map(|value| {
        RequestId::deserialize(&value).map_err(|_| {
            let detail = format!("`id` must be a number or a string, got `{value}`");
            Box::new((None, RpcError::invalid_request(detail), true))
        })
    });
    // The `jsonrpc` member may be omitted (as codex does); if present it must say 2.0.
    if let Some(version) = envelope.jsonrpc.as_deref().filter(|v| *v != "2.0") {
        let detail = format!("unsupported `jsonrpc` version {version:?}; expected \"2.0\"");
        let id = id.and_then(Result::ok);
        return Err(Box::new((id, RpcError::invalid_request(detail), true)));
    }
    match (envelope.method, id) {
        (Some(method), Some(id)) => Ok(Incoming::Request {
            id: id?,
            method,
            params: envelope.params,
        }),
        (Some(method), None) => Ok(Incoming::Notification {
            method,
            params: envelope.params,
        }),
        (None, id) => {
            let result = match (envelope.result, envelope.error) {
                (Some(result), None) => Ok(result),
                (None, Some(error)) => Err(RpcError::deserialize(&error).unwrap_or_else(|e| {
                    RpcError::internal(format!("the client sent a malformed error object: {e}"))
                })),
                (Some(_), Some(_)) => {
                    let detail = "a response must not have both `result` and `error`";
                    return Err(Box::new((None, RpcError::invalid_request(detail), false)));
                }
                (None, None) => {
                    let detail = "a message needs `method` (request or notification) \
                                  or `result`/`error` (response)";
                    let id = id.and_then(Result::ok);
                    return Err(Box::new((id, RpcError::invalid_request(detail), true)));
                }
            };
            match id {
                Some(Ok(id)) => Ok(Incoming::Response { id, result }),
                _ => {
                    let detail = format!("response without a usable `id`: {result:?}");
                    Err(Box::new((None, RpcError::invalid_request(detail), false)))
                }
            }
        }
    }
}

/// The id of a message that failed to parse as a whole, so the error reaches the right caller.
fn recover_id(bytes: &[u8]) -> Option<RequestId> {
    #[derive(Deserialize)]
    struct IdOnly {
        id: RequestId,
    }
    serde_json::from_slice::<IdOnly>(bytes).ok().map(|m| m.id)
}

/// Deserialises a method's params. Missing params are read as `null` (for `()` and options)
/// or else as `{}` (for structs whose fields all have defaults); errors name the field path.
pub(crate) fn parse_params<P: DeserializeOwned>(
    method: &str,
    params: Option<&RawValue>,
) -> Result<P, RpcError> {
    match params {
        Some(raw) => deserialize_with_path(method, raw.get()),
        None => serde_json::from_str("null").or_else(|_| deserialize_with_path(method, "{}")),
    }
}

fn deserialize_with_path<P: DeserializeOwned>(method: &str, json: &str) -> Result<P, RpcError> {
    let mut de = serde_json::Deserializer::from_str(json);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            RpcError::invalid_params(method, inner)
        } else {
            RpcError::invalid_params(method, format!("at `{path}`: {inner}"))
                .with_data_field("path", path)
        }
    })
}

#[derive(Serialize)]
struct OutgoingResponse<'a> {
    jsonrpc: &'static str,
    id: Option<&'a RequestId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a RpcError>,
}

#[derive(Serialize)]
struct OutgoingRequest<'a, P: ?Sized> {
    jsonrpc: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a RequestId>,
    method: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<&'a P>,
}

// Serialising these cannot fail: every member is a string, an integer, a `RawValue` (already
// valid JSON) or a `serde_json::Value` (whose map keys are strings).
const INFALLIBLE: &str = "serialising a JSON-RPC envelope of plain JSON values cannot fail";

/// A response; `id` is `None` only for errors about input whose id could not be read.
pub(crate) fn response_json(
    id: Option<&RequestId>,
    result: Result<&RawValue, &RpcError>,
) -> String {
    let (result, error) = match result {
        Ok(value) => (Some(value), None),
        Err(error) => (None, Some(error)),
    };
    let response = OutgoingResponse {
        jsonrpc: "2.0",
        id,
        result,
        error,
    };
    serde_json::to_string(&response).expect(INFALLIBLE)
}

/// A request (with `id`) or a notification (without). `params` that serialise to `null`
/// are left out, as JSON-RPC wants params to be an object or an array when present.
pub(crate) fn request_json(id: Option<&RequestId>, method: &str, params: &RawValue) -> String {
    let params = (params.get() != "null").then_some(params);
    let request = OutgoingRequest {
        jsonrpc: "2.0",
        id,
        method,
        params,
    };
    serde_json::to_string(&request).expect(INFALLIBLE)
}

/// A notification of `params` (an object), serialised straight into its message: for params
/// that may be megabytes, which [`request_json`] would have serialised once more. `Err` when
/// `params` cannot be serialised.
pub fn notification_json<P: Serialize + ?Sized>(
    method: &str,
    params: &P,
) -> Result<String, serde_json::Error> {
    serde_json::to_string(&OutgoingRequest {
        jsonrpc: "2.0",
        id: None,
        method,
        params: Some(params),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn invalid(input: &str) -> InvalidMessage {
        match parse_incoming(input.as_bytes()) {
            Err(invalid) => invalid,
            Ok(message) => panic!("expected {input} to be rejected, got {message:?}"),
        }
    }

    #[test]
    fn classifies_requests_notifications_and_responses() {
        let request = parse_incoming(br#"{"jsonrpc":"2.0","id":"a","method":"m","params":{}}"#);
        assert!(
            matches!(request, Ok(Incoming::Request { id: RequestId::String(ref s), .. }) if s == "a")
        );
        let note = parse_incoming(br#"{"method":"m"}"#);
        assert!(matches!(
            note,
            Ok(Incoming::Notification { params: None, .. })
        ));
        let null_result = parse_incoming(br#"{"id":3,"result":null}"#);
        assert!(matches!(
            null_result,
            Ok(Incoming::Response { id: RequestId::Number(3), result: Ok(ref r) }) if r.get() == "null"
        ));
        let error = parse_incoming(br#"{"id":4,"error":{"code":-1,"message":"no"}}"#);
        assert!(matches!(
            error,
            Ok(Incoming::Response {
                result: Err(RpcError { code: -1, .. }),
                ..
            })
        ));
    }

    #[test]
    fn rejects_bad_input_with_the_right_code() {
        assert_eq!(invalid("{nope").error.code, error_code::PARSE_ERROR);
        assert_eq!(invalid("[1,2]").error.code, error_code::INVALID_REQUEST);
        assert_eq!(invalid("5").error.code, error_code::INVALID_REQUEST);
        let no_method = invalid(r#"{"id":7}"#);
        assert_eq!(no_method.error.code, error_code::INVALID_REQUEST);
        assert_eq!(no_method.id, Some(RequestId::Number(7)));
        let bad_method = invalid(r#"{"id":8,"method":5}"#);
        assert_eq!(bad_method.id, Some(RequestId::Number(8)));
        assert_eq!(
            invalid(r#"{"id":1.5,"method":"m"}"#).error.code,
            error_code::INVALID_REQUEST
        );
        assert!(
            invalid(r#"{"jsonrpc":"1.0","id":1,"method":"m"}"#)
                .error
                .message
                .contains("1.0")
        );
        assert!(!invalid(r#"{"id":1,"result":1,"error":{}}"#).answer);
    }

    #[test]
    fn params_errors_name_the_method_and_path() {
        #[derive(Debug, Deserialize)]
        #[serde(rename_all = "camelCase")]
        #[allow(dead_code)]
        struct Append {
            session_id: String,
            entries: Vec<Entry>,
        }
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct Entry {
            role: String,
        }
        let raw = RawValue::from_string(r#"{"entries":[]}"#.into()).expect("valid JSON");
        let error = parse_params::<Append>("session/append", Some(&raw)).unwrap_err();
        assert_eq!(error.code, error_code::INVALID_PARAMS);
        assert_eq!(
            error.message,
            "invalid params for session/append: missing field `sessionId` at line 1 column 14"
        );
        let raw = RawValue::from_string(r#"{"sessionId":"s","entries":[{"role":1}]}"#.into())
            .expect("valid JSON");
        let error = parse_params::<Append>("session/append", Some(&raw)).unwrap_err();
        assert!(
            error.message.contains("at `entries[0].role`"),
            "{}",
            error.message
        );
        assert_eq!(
            error.data.as_deref(),
            Some(&json!({"kind": "invalidParams", "path": "entries[0].role"}))
        );
        assert!(parse_params::<()>("shutdown", None).is_ok());
    }

    #[test]
    fn outgoing_messages_are_json_rpc_2() {
        let params = RawValue::from_string("null".into()).expect("valid JSON");
        assert_eq!(
            request_json(Some(&RequestId::Number(1)), "m", &params),
            r#"{"jsonrpc":"2.0","id":1,"method":"m"}"#
        );
        let error = RpcError::method_not_found("foo/bar");
        assert_eq!(
            response_json(None, Err(&error)),
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32601,"message":"unknown method `foo/bar`","data":{"kind":"methodNotFound"}}}"#
        );
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_input_never_panics(input in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let _ = parse_incoming(&input);
        }

        #[test]
        fn arbitrary_json_shapes_never_panic(input in r#"\{("(id|method|params|result|error|jsonrpc)":(null|1|-1\.5|"x"|\{\}|\[\]|true),?){0,4}\}"#) {
            let _ = parse_incoming(input.as_bytes());
        }
    }
}
