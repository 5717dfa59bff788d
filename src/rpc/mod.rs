//! The wire: a generic JSON-RPC 2.0 peer over a byte stream (stdio in the daemon). It owns
//! transport and dispatch only; no business logic lives here.
//!
//! * [`framing`]: LSP `Content-Length` headers or newline-delimited JSON, auto-detected.

pub mod framing;
