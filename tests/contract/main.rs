//! What compactd promises to the outside, checked against artifacts in the repository: the
//! reference's real sessions load and cut as the reference does (`docs/conformance.md`), the
//! examples of `docs/protocol.md` parse into the protocol's types, `schema/` is what the types
//! generate and validates every documented example and every message of a real session, the
//! fuzzers' saved inputs still pass their checks, and the sources keep the layer rules of
//! `src/lib.rs`.
//!
//! Run one file's tests with `cargo test --test contract <module>::`.

mod claude_fixtures;
mod conformance;
mod fuzz_regressions;
mod layers;
mod pi_fixtures;
mod protocol_docs;
mod schema;
mod schema_validation;
