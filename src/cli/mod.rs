//! The one-shot commands of the `compactd` binary. Read commands (`context`, `tree`, `plan`)
//! open the session file read-only and never modify it; `prune` rewrites it atomically.

pub mod common;
pub mod context;
pub mod plan;
pub mod prune;
pub mod tree;
