//! compactd: keeps coding-agent conversations inside their LLM context window.

pub mod session;
