//! The wire: a generic JSON-RPC 2.0 peer over a byte stream (stdio in the daemon). It owns
//! transport and dispatch only; no business logic lives here.
//!
//! * [`framing`]: LSP `Content-Length` headers or newline-delimited JSON, auto-detected.
//! * [`message`]: request ids, [`RpcError`] and the standard error codes.

pub mod framing;
#[allow(dead_code)] // the parsing half is used by the peer, which comes next
pub mod message;

pub use message::{RequestId, RpcError, error_code};
