//! What is on disk and in memory: entries, messages, the JSONL file, the tree, and context
//! rebuilding.

pub mod context;
pub mod entry;
pub mod facts;
pub mod file;
pub mod ids;
pub mod listing;
pub mod message;
pub mod tree;

pub use context::{SessionContext, build_session_context, convert_to_llm};
pub use entry::{CURRENT_SESSION_VERSION, Entry, EntryKind, SessionHeader};
pub use file::{CreateOptions, LoadReport, Session, SessionError, SyncPolicy};
pub use message::{AgentMessage, Content, ContentBlock, Usage};
pub use tree::{Tree, TreeNode};
