//! Tree navigation with an optional summary of the branch being left (spec §6.4).

use tokio_util::sync::CancellationToken;

use crate::session::Entry;

use super::{CompactEnv, EngineError, OperationObserver, SharedSession};

/// How to navigate.
#[derive(Debug, Clone, Default)]
pub struct NavigateOptions {
    /// Summarise the branch being left.
    pub summarize: bool,
    pub custom_instructions: Option<String>,
    /// Custom instructions replace the branch prompt instead of being appended to it.
    pub replace_instructions: bool,
    /// `Some(leaf)`: fail with `LeafMoved` unless the session's leaf is `leaf`.
    pub expected_leaf_id: Option<Option<String>>,
}

/// What a navigation did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NavigateOutcome {
    /// The target user message's text, to pre-fill the editor.
    pub editor_text: Option<String>,
    pub cancelled: bool,
    pub aborted: bool,
    /// The branch summary entry appended, if any.
    pub summary_entry: Option<Entry>,
    /// The new leaf.
    pub leaf_id: Option<String>,
    pub old_leaf_id: Option<String>,
}

/// Moves the session's leaf to `target_id`, summarising the branch left when asked.
pub async fn navigate_tree(
    session: &SharedSession,
    env: &CompactEnv,
    target_id: &str,
    opts: NavigateOptions,
    cancel: CancellationToken,
    observer: &dyn OperationObserver,
) -> Result<NavigateOutcome, EngineError> {
    let _ = (session, env, target_id, opts, cancel, observer);
    Err(EngineError::InvalidParams("not implemented yet".into()))
}
