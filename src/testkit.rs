//! What the integration tests (`tests/`), the benches (`benches/`), the fuzz targets (`fuzz/`)
//! and `compactd-devtools` (`devtools/`) reach that the layers do not export to each other.
//!
//! A layer's root re-exports only what the rest of the crate uses (other layers and
//! `src/main.rs`; `tests/contract/layers.rs` holds it so). The names below are used by no
//! other layer, only from outside the library, so they are re-exported here rather than at
//! their layer's root: one place to see what the crate opens up for testing. This module only
//! re-exports; it is not part of the daemon's interface and has no logic of its own.

// engine
/// `tests/engine/auto.rs` names what `Engine::append` returns.
pub use crate::engine::append::AppendOutcome;
/// `tests/postgres/partial.rs`: the auto-compaction decision on a session loaded from rows.
pub use crate::engine::auto::decide;
/// `devtools/src/engine.rs`, `tests/engine/{compact,navigate}.rs`: an engine without hooks.
pub use crate::engine::hooks::NoHooks;
/// `benches/bench.rs` times pruning on a session it holds itself.
pub use crate::engine::prune::prune_live_cached;
/// `tests/postgres/partial.rs`: `decide` with a fresh memory.
pub use crate::engine::state::AutoMemory;
/// `tests/engine/memory.rs`, `tests/postgres/partial.rs`: usage of a session held outside an
/// engine.
pub use crate::engine::usage::usage_view;

// protocol
/// `tests/engine/cli.rs`: every `--json` command has its output type listed.
pub use crate::protocol::cli::CLI_OUTPUTS;
/// `tests/contract/protocol_docs.rs`: the examples of `docs/protocol.md` match their types.
pub use crate::protocol::schema::TypeSpec;
/// `tests/contract/schema.rs`: the checked-in schemas under `schema/` match the types.
pub use crate::protocol::schema::{protocol_schemas, schema_file_text};

// rpc
/// `fuzz/src/{framing,rpc_message}.rs`: the codec, fed arbitrary bytes.
pub use crate::rpc::framing::{DetectedFraming, Frame, MessageCodec};
/// `fuzz/src/rpc_message.rs`: a peer with its limits set.
pub use crate::rpc::peer::PeerConfig;

// session
/// `devtools/src/generate.rs` (the session generator) builds entries and content blocks.
pub use crate::session::entry::{CustomMessageEntry, SessionHeader};
/// `devtools/src/generate.rs`, as above.
pub use crate::session::message::{ImageBlock, TextBlock, ThinkingBlock};
/// `devtools/src/{daemon,engine}.rs`, `tests/postgres/`, `benches/storage.rs`: a PostgreSQL
/// store opened and filled directly.
pub use crate::session::postgres::{PgOptions, PgStore, import_file, postgres_path};

// summarize
/// `tests/engine/summarizers.rs`: each HTTP summarizer against a fake server.
pub use crate::summarize::anthropic::{AnthropicConfig, AnthropicSummarizer};
/// `tests/engine/summarizers.rs`: the summarizers of settings with a chosen environment.
pub use crate::summarize::candidates::summarizers_with_env;
/// `tests/engine/extractive.rs`, `benches/bench.rs`, `devtools/src/engine.rs`: the offline
/// summarizer, called directly.
pub use crate::summarize::extractive::ExtractiveSummarizer;
/// `tests/engine/summarizers.rs`, as above.
pub use crate::summarize::http::HttpOptions;
/// `tests/engine/summarizers.rs`: what `write_summary` returns.
pub use crate::summarize::ladder::Written;
/// `tests/engine/summarizers.rs`, as above.
pub use crate::summarize::openai::{OpenAiConfig, OpenAiSummarizer};
/// `tests/engine/summarizers.rs`, as above.
pub use crate::summarize::remote::{RemoteConfig, RemoteSummarizer};
