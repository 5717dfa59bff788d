//! The checks behind compactd's fuzz targets, one module per target.
//!
//! Each module has `check(data: &[u8])`, which panics when an invariant is broken. The
//! `fuzz_targets/*.rs` binaries only call it; `tests/contract/fuzz_regressions.rs` in the
//! main crate includes this file by path and runs the same checks over
//! `fuzz/regressions/<target>/` on stable, so a crasher found once stays fixed.

pub mod framing;
pub mod rpc_message;
pub mod session_loader;
pub mod settings;
