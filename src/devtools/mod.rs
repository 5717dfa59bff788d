//! Developer tools that are not part of the daemon's job: the deterministic session generator
//! used by the benchmarks (`benches/bench.rs`) and by load tests.

pub mod generate;

pub use generate::{GenerateOptions, GenerateStats, SizePreset, generate_session};
