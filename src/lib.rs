//! compactd: keeps coding-agent conversations inside their LLM context window.
//!
//! The layers, top to bottom, and the layers each one imports (`crate::…` paths outside
//! tests). `tests/contract/layers.rs` reads this table and fails when the code imports
//! something the table does not list, stops importing something it lists, or when a layer
//! imports one above it:
//!
//! ```text
//! layer        imports
//! cli          mcp foreign server engine protocol summarize compaction tokens session settings files
//! mcp          engine foreign session settings
//! foreign      session
//! server       engine protocol rpc summarize session settings files
//! protocol     rpc settings
//! rpc          -
//! engine       summarize compaction tokens session settings
//! summarize    compaction tokens session settings files
//! compaction   tokens session
//! tokens       session
//! session      settings files
//! settings     files
//! files        -
//! ```
//!
//! Imports point down, so there is no cycle; inside a layer, too, no files import one another
//! in a loop (a part may use its folder's `mod.rs`, which hands its names on). The same test
//! holds three more rules of the design: `engine` never sees wire types (it imports none of
//! `protocol`, `rpc` and `server`), `compaction` does no I/O (no file system, network,
//! process, environment, clock or async runtime: it plans, the engine performs), and `rpc`
//! holds no domain (it imports nothing of compactd). `src/main.rs` only calls [`cli::main`].
//!
//! `cli` is the command line: it runs one-shot commands on the engine and prints the protocol's
//! types through `server`'s `to_proto`. `server` is the daemon: the method table, one handler
//! per method, and the only place domain values become wire values. `summarize` decides which
//! summarizer writes a summary; `compaction` plans what to summarise and keep. `tokens` counts
//! `session`'s messages, and `session` knows nothing of token counts. `files` opens only
//! regular files, without blocking. `foreign` reads other agents' session files (Claude
//! Code transcripts, Codex rollouts) into compactd's session model and appends only those
//! agents' own compaction records, never rewriting a byte already there.
//!
//! Each layer's submodules are private to the crate. A layer's root re-exports what the rest
//! of the crate (the other layers and their unit tests, `src/main.rs`) uses from it, and no
//! more; the same test fails when a root re-exports a name nothing outside its layer uses.
//! What only the integration tests, benches, fuzz targets and `compactd-devtools` reach is
//! re-exported in one place, the hidden [`testkit`] module, which names who uses each item.
//!
//! `docs/architecture.md` follows one request through these layers, from the wire to the file.
//!
//! Comments cite `spec §N` (the reference behaviour compactd reimplements) and `DESIGN §N`
//! (its design notes); neither document is in this repository, and `docs/references.md` says
//! what each cited section is about and where `docs/conformance.md` covers it.

pub mod cli;
pub mod compaction;
pub mod engine;
pub mod files;
pub mod foreign;
pub mod mcp;
pub mod protocol;
pub mod rpc;
pub mod server;
pub mod session;
pub mod settings;
pub mod summarize;
pub mod tokens;

#[doc(hidden)]
pub mod testkit;
