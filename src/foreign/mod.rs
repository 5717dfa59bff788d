//! Other agents' session files, read as guests (DESIGN §8): compactd reads them into its own
//! model and appends only that agent's own records, never rewriting what is there.

pub mod codex;
