//! What is on disk and in memory: entries, messages, the storage backends (JSONL files, the
//! default; PostgreSQL for fleets, `postgres/`), the tree, and context rebuilding.

pub(crate) mod backend;
pub(crate) mod catalog;
pub(crate) mod changes;
pub(crate) mod context;
pub(crate) mod entry;
pub(crate) mod file;
pub(crate) mod ids;
pub(crate) mod listing;
pub(crate) mod message;
pub(crate) mod postgres;
pub(crate) mod recall;
pub(crate) mod size_controls;
pub(crate) mod span;
pub(crate) mod tree;
pub(crate) mod undo;

pub use backend::{ConnectError, connect, stored_id};
pub use catalog::Catalog;
pub use changes::ChangeSignal;
pub use context::{SessionContext, convert_to_llm};
pub use entry::{BranchSummaryEntry, CURRENT_SESSION_VERSION, CompactionEntry, Entry, EntryKind};
pub use file::{
    CreateOptions, Destination, LoadReport, LoadStep, Session, SessionError, SyncPolicy,
};
pub use ids::{IdKey, iso_from_ms, now_ms};
pub use message::{
    AgentMessage, AssistantMessage, Content, ContentBlock, ExecutionMessage, Extra,
    ORIGINAL_CONTENT_FIELD, ToolCall, ToolResultMessage, Usage, UserMessage,
};
pub use recall::{
    DEFAULT_LIMIT as DEFAULT_SEARCH_LIMIT, RecallError, RecalledEntry, SearchHit, SearchPage,
    SearchQuery, SearchScope, entry_texts, read_entry, search,
};
pub use size_controls::FULL_TEXT_FIELD;
pub use span::{EntrySpan, LlmMessages};
pub use tree::{Tree, TreeNode};
pub use undo::{UndoError, plan_undo};
