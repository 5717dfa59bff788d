//! The real `compactd` binary over real pipes, as clients drive it: the protocol's methods,
//! the agent flow, concurrency, robustness against hostile clients and failing LLM servers,
//! crash safety, two writers on one file, and what the process may touch.
//!
//! The harness (the daemon driver, the fake LLM server, the fixtures) is the `devtools`
//! crate. Run one file's tests with `cargo test --test daemon <module>::`.

mod agent_flow;
mod armed;
mod background;
mod blob_store;
mod commit_preview;
mod concurrency;
mod crash;
mod detail;
mod exposure;
mod faults;
mod file_access;
mod hostile;
mod large;
mod ledger;
mod lifecycle;
mod observe_turn;
mod progress;
mod project_trust;
mod pruning;
mod recall;
mod sessions;
mod small_window;
mod storage;
mod two_writers;
mod undo;
