//! compactd: keeps coding-agent conversations inside their LLM context window.
//!
//! Layers, each depending only on those below it (no cycle):
//!
//! ```text
//! cli ──> server ──> protocol ──> rpc          the wire: handlers, method table and types, transport
//!   │       │
//!   └───────┴──> engine ──> summarize ─────────────┐
//!                  │  └───> compaction ──> tokens ──┴──> session
//!                  └──────────────────────> tokens
//! ```
//!
//! `cli` is the command line (`src/main.rs` only calls [`cli::main`]): it runs one-shot
//! commands on the engine and prints the protocol's types through `server`'s `to_proto`.
//! Each layer's submodules are private; what other crates may use (the tests, benches and
//! `compactd-devtools`) is re-exported at the layer's root.
//!
//! `tokens` sits above `session`: it counts `session`'s messages, and `session` knows nothing
//! of token counts. `settings` is read by all, and `files` (opening only regular files,
//! without blocking) is used by all. `docs/architecture.md` follows one request through these
//! layers, from the wire to the file.
//!
//! Comments cite `spec §N` (the reference behaviour compactd reimplements) and `DESIGN §N`
//! (its design notes); neither document is in this repository, and `docs/references.md` says
//! what each cited section is about and where `docs/conformance.md` covers it.

pub mod cli;
pub mod compaction;
pub mod engine;
pub mod files;
pub mod protocol;
pub mod rpc;
pub mod server;
pub mod session;
pub mod settings;
pub mod summarize;
pub mod tokens;
