//! Tool-output pruning of one session (spec §5 with DESIGN §3 deviation 4): only the entries
//! of the live context are looked at and only savings inside it count; pruned entries keep
//! their original content (recoverable), and the file is rewritten atomically.

use std::collections::HashMap;

use crate::session::{Entry, Session};
use crate::tokens::{TokenCache, TokenCounter};

use super::EngineError;
use crate::compaction::{PruneConfig, apply_prune, prune_tool_outputs};

/// What a prune did (or, for a dry run, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
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
    let count = |e: &Entry| e.message().map_or(0, |m| counter.count_message(m));
    prune_live_with(session, &count, counter, dry_run)
}

/// [`prune_live`] counting through the session's token cache, so a dry run after a context
/// call tokenises nothing.
pub fn prune_live_cached(
    session: &mut Session,
    cache: &TokenCache,
    dry_run: bool,
) -> Result<PruneOutcome, EngineError> {
    let count = |e: &Entry| cache.count_entry(e);
    prune_live_with(session, &count, cache.counter().as_ref(), dry_run)
}

fn prune_live_with(
    session: &mut Session,
    count: &dyn Fn(&Entry) -> u64,
    counter: &dyn TokenCounter,
    dry_run: bool,
) -> Result<PruneOutcome, EngineError> {
    let ctx = session.context();
    let live: Vec<&Entry> = ctx
        .entry_ids
        .iter()
        .filter_map(|id| session.get(id))
        .collect();
    let plan = prune_tool_outputs(&live, count, counter, &PruneConfig::default());
    let outcome = PruneOutcome {
        pruned_count: plan.pruned_count,
        tokens_saved: plan.tokens_saved,
        entry_ids: plan.candidates.iter().map(|c| c.entry_id.clone()).collect(),
        dry_run,
    };
    if dry_run || plan.candidates.is_empty() {
        return Ok(outcome);
    }
    let notices: HashMap<&str, &str> = plan
        .candidates
        .iter()
        .map(|c| (c.entry_id.as_str(), c.notice.as_str()))
        .collect();
    let now = crate::session::ids::now_ms();
    session.replace_entries(|entries| {
        for entry in entries.iter_mut() {
            if let Some(notice) = notices.get(entry.id.as_str()) {
                apply_prune(entry, notice, now);
            }
        }
    })?;
    Ok(outcome)
}
