//! Tools for developing compactd that are not part of the daemon's job, kept out of the
//! library so that neither the shipped binary nor the library's public API carries them:
//!
//! * [`generate`]: the deterministic session generator used by the benchmarks and load tests.
//! * [`fixtures`]: the one place that finds the repository's files (fixtures, the example
//!   session, the built binary) and copies them where a test may change them.
//! * [`daemon`]: the built `compactd` binary driven over real pipes, like a client would.
//! * [`fake_llm`]: a fake LLM server on 127.0.0.1 (real HTTP/1.1 and SSE).
//! * [`engine`]: sessions, environments, summarizers and hooks for the engine's tests.
//!
//! The integration tests (`tests/daemon/`, `tests/engine/`, `tests/contract/`) and the
//! benchmarks take it as a dev-dependency under the name `devtools`.

pub mod daemon;
pub mod engine;
pub mod fake_llm;
pub mod fixtures;
pub mod generate;

pub use generate::{GenerateOptions, GenerateStats, SizePreset, generate_session};
