//! What is on disk and in memory: entries, messages, the JSONL file, the tree, and context
//! rebuilding.

pub mod entry;
pub mod message;

pub use entry::{CURRENT_SESSION_VERSION, Entry, EntryKind, SessionHeader};
pub use message::{AgentMessage, Content, ContentBlock, Usage};
