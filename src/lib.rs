//! compactd: keeps coding-agent conversations inside their LLM context window.
//!
//! Layers, each depending only on those below: `rpc` -> `engine` -> {`summarize`,
//! `compaction`} -> `session` -> `tokens`; `settings` is read by all, and `files` (opening
//! only regular files, without blocking) is used by all.

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
