//! Other agents' session files, read as guests (DESIGN §8): compactd reads them into its own
//! model and appends only that agent's own compaction records, never rewriting a byte.

pub mod claude;
pub mod codex;
mod in_use;
