//! What is on disk and in memory: entries, messages, the storage backends (JSONL files, the
//! default; PostgreSQL for fleets, `postgres/`), the tree, and context rebuilding.

pub mod context;
pub mod entry;
pub mod facts;
pub mod file;
pub mod ids;
pub mod listing;
pub mod message;
pub mod postgres;
pub mod size_controls;
pub mod tree;

pub use context::{SessionContext, build_session_context, convert_to_llm};
pub use entry::{CURRENT_SESSION_VERSION, Entry, EntryKind, SessionHeader};
pub use file::{
    CreateOptions, Destination, LoadReport, LoadStep, Session, SessionError, SyncPolicy,
    import_file, postgres_path,
};
pub use message::{AgentMessage, Content, ContentBlock, Usage};
pub use tree::{Tree, TreeNode};
