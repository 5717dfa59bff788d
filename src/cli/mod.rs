//! The one-shot commands of the `compactd` binary. Read commands (`context`, `tree`, `plan`)
//! open the session file read-only and never modify it; `prune` rewrites it atomically;
//! `compact` and `navigate` append to it (nothing when cancelled or previewed); `fork` writes
//! a new file and only reads the source; `import` and `export` move sessions into and out of
//! the PostgreSQL backend.

pub mod blobs;
pub mod common;
pub mod compact;
pub mod context;
pub mod fork;
pub mod navigate;
pub mod plan;
pub mod prune;
pub mod store;
pub mod tree;
