//! The library's engine and summarizers end to end on real session files, and the session
//! commands of the command line: compaction, tree navigation, the registry with
//! auto-compaction, the HTTP summarizers against a fake LLM server on 127.0.0.1.
//!
//! The harness (sessions in temp dirs, fake summarizers and hooks, the fake LLM server, the
//! fixtures) is the `devtools` crate. Run one file's tests with `cargo test --test engine
//! <module>::`.

mod auto;
mod cli;
mod cli_codex;
mod cli_edit;
mod compact;
mod extractive;
mod install;
mod memory;
mod navigate;
mod summaries;
mod summarizers;
