//! The request handlers, one file per method or small group. Each is thin: wire params to a
//! domain call to a wire result, converted by `server/from_proto.rs` and
//! `server/to_proto.rs`; the behaviour lives in the engine.

pub(crate) mod lifecycle;
pub(crate) mod session_append;
pub(crate) mod session_compact;
pub(crate) mod session_label;
pub(crate) mod session_ledger;
pub(crate) mod session_navigate;
pub(crate) mod session_observe;
pub(crate) mod session_open;
pub(crate) mod session_prune;
pub(crate) mod session_read;
pub(crate) mod session_recall;
pub(crate) mod session_undo;
pub(crate) mod settings;

use crate::protocol::ErrorKind;
use crate::rpc::RpcError;

/// `invalidParams` naming a field.
fn invalid(method: &str, path: &str, detail: impl std::fmt::Display) -> RpcError {
    ErrorKind::InvalidParams
        .with_message(format!("invalid params for {method}: {detail}"))
        .with_data_field("path", path)
}
