//! Compaction of one session (spec §4.5–§4.16 with DESIGN §3's deviations): hooks, planning,
//! summaries (history and turn prefix in parallel), the retention guard, and the append.

use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::settings::Settings;

use super::{
    CompactReason, EngineError, EngineHooks, OperationObserver, Prompts, SharedSession,
    SummarizerSet, TokenCounter,
};

/// How to run one compaction.
#[derive(Debug, Clone)]
pub struct CompactOptions {
    pub reason: CompactReason,
    /// Appended to the history prompt as "Additional focus".
    pub custom_instructions: Option<String>,
    /// Compute everything, write nothing.
    pub preview: bool,
    /// A caller-chosen boundary ("summarize up to here"); must be a valid cut point on the path.
    pub first_kept_entry_id: Option<String>,
    /// `Some(leaf)`: fail with `LeafMoved` unless the session's leaf is `leaf` when persisting.
    pub expected_leaf_id: Option<Option<String>>,
}

impl CompactOptions {
    /// A manual compaction with nothing else set.
    pub fn manual() -> Self {
        CompactOptions {
            reason: CompactReason::Manual,
            custom_instructions: None,
            preview: false,
            first_kept_entry_id: None,
            expected_leaf_id: None,
        }
    }
}

/// What a compaction produced.
#[derive(Debug, Clone, PartialEq)]
pub struct CompactOutcome {
    /// The appended entry's id; `None` for a preview.
    pub entry_id: Option<String>,
    pub summary: String,
    pub short_summary: Option<String>,
    pub first_kept_entry_id: String,
    pub tokens_before: u64,
    /// Estimated context tokens after the compaction, with the session's counter.
    pub tokens_after: u64,
    /// `{readFiles, modifiedFiles, retainedFacts?}`.
    pub details: Value,
    pub preserve_data: Option<Value>,
    pub from_extension: bool,
    pub preview: bool,
    /// Which summarizer wrote the history summary (`extractive`, `openai/gpt-4o`, `hook`, …).
    pub summarizer: String,
}

/// Everything a compaction needs besides the session; built by the registry from settings.
#[derive(Clone)]
pub struct CompactEnv {
    pub settings: Settings,
    pub counter: Arc<dyn TokenCounter>,
    pub summarizers: SummarizerSet,
    pub hooks: Arc<dyn EngineHooks>,
    pub prompts: Arc<Prompts>,
    /// The session model's context window (for budgets such as the branch summary's).
    pub context_window: u64,
    /// The session id, for hook requests.
    pub session_id: String,
}

/// Compacts `session`: see the module doc. Nothing is written when cancelled or on preview.
pub async fn compact(
    session: &SharedSession,
    env: &CompactEnv,
    opts: CompactOptions,
    cancel: CancellationToken,
    observer: &dyn OperationObserver,
) -> Result<CompactOutcome, EngineError> {
    let _ = (session, env, opts, cancel, observer);
    Err(EngineError::InvalidParams("not implemented yet".into()))
}
