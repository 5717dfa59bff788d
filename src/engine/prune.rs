//! Tool-output pruning of one session (spec §5 with DESIGN §3 deviation 4): only the entries
//! of the live context are looked at and only savings inside it count; pruned entries keep
//! their original content (recoverable), and the file is rewritten atomically.

use std::collections::HashSet;

use crate::session::{Entry, Session};
use crate::tokens::TokenCounter;

use super::EngineError;
use super::prune_plan::{apply_prune, prune_tool_outputs};

/// What a prune did (or, for a dry run, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PruneOutcome {
    pub pruned_count: usize,
    pub tokens_saved: u64,
    /// The tool-result entries pruned.
    pub entry_ids: Vec<String>,
    pub dry_run: bool,
}

/// Prunes old tool outputs in the live context of `session` (its leaf's context). With
/// `dry_run` nothing is written.
pub fn prune_live(
    session: &mut Session,
    counter: &dyn TokenCounter,
    dry_run: bool,
) -> Result<PruneOutcome, EngineError> {
    let ctx = session.context();
    let live: Vec<&Entry> = ctx
        .entry_ids
        .iter()
        .filter_map(|id| session.get(id))
        .collect();
    let plan = prune_tool_outputs(&live, counter);
    let mut outcome = PruneOutcome {
        pruned_count: plan.entry_ids.len(),
        tokens_saved: plan.tokens_saved,
        entry_ids: plan.entry_ids.clone(),
        dry_run,
    };
    if dry_run || plan.entry_ids.is_empty() {
        return Ok(outcome);
    }
    let targets: HashSet<String> = plan.entry_ids.iter().cloned().collect();
    let now = crate::session::ids::now_ms();
    session.replace_entries(|entries| {
        for entry in entries.iter_mut().filter(|e| targets.contains(&e.id)) {
            apply_prune(entry, &plan, now);
        }
    })?;
    outcome.dry_run = false;
    Ok(outcome)
}
