//! Compaction of one session (spec §4.5–§4.17 with DESIGN §3's deviations).
//!
//! Order: prepare under a read lock → `before_compact` hook (cancel, or a supplied compaction,
//! validated) → `compacting` hook (context lines, prompt override, preserveData) → history and
//! turn-prefix summaries in parallel, with no lock held → best-effort short summary → retention
//! guard and file-operation tags → under the write lock, check the leaf has not moved and
//! append the entry. A preview stops before the append. Cancellation at any point writes
//! nothing: the token is checked once more right before the append.

mod edit;

use std::sync::Arc;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::compaction::{
    BoundaryError, CompactionParams, CompactionPreparation, FileOps, Ledger, compute_file_lists,
    file_lists_details, format_file_operations, prepare_compaction_at, prepare_compaction_in,
    record_ledger_in_details, render_ledger_block, validate_boundary,
};
use crate::session::context::compaction_summary_text;
use crate::session::entry::CompactionEntry;
use crate::session::{AgentMessage, Entry, EntryKind, EntrySpan, LlmMessages, Session};
use crate::summarize::prompts::{
    HistoryPrompt, history_max_tokens, short_summary_max_tokens, turn_prefix_max_tokens,
};
use crate::summarize::{
    PromptBuilder, Purpose, SummarizeError, SummaryJob, SummaryOutput, SummaryReport,
    record_reports, retention, write_summary,
};

pub use edit::SummaryEdit;

use super::events::DiscardReason;
use super::{
    BeforeCompactRequest, CompactEnv, CompactReason, CompactingReply, CompactingRequest,
    EngineError, OperationObserver, Phase, SharedSession, SummarizerSet, TokenCounter,
};

/// The history text when there is nothing to summarise and no previous summary (spec §4.9).
pub const NO_PRIOR_HISTORY: &str = "No prior history.";
/// Joins the history summary and the turn-prefix summary of a split turn (spec §4.9).
pub const TURN_CONTEXT_SEPARATOR: &str = "\n\n---\n\n**Turn Context (split turn):**\n\n";

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
    /// `Some(leaf)`: fail with `LeafMoved` unless the session's leaf is `leaf` (checked when
    /// preparing and again when persisting).
    pub expected_leaf_id: Option<Option<String>>,
    /// Compact the branch that ends at this entry instead of the session's leaf: what another
    /// program whose leaf is that entry would get (only with `preview`, as nothing can be
    /// appended there).
    pub leaf_id: Option<String>,
    /// The summary's size in tokens, overriding `compaction.detail`: sizes the summarizer's
    /// output budget and length line, the extractive sections and the ledger block; the
    /// outcome's [`TargetReport`] says whether it was met.
    pub target_tokens: Option<u64>,
    /// Overrides `compaction.keepRecentTokens` for this compaction: an automatic compaction
    /// that left the context over its target compacts again keeping less.
    pub keep_recent_tokens: Option<u64>,
    /// Use the session's armed background compaction when it fits the leaf (waiting for one
    /// that still runs), instead of summarising again; see [`super::background`].
    pub use_armed: bool,
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
            leaf_id: None,
            target_tokens: None,
            keep_recent_tokens: None,
            use_armed: false,
        }
    }

    /// Whether an armed background result can stand for this compaction: it was drafted with
    /// no instructions, boundary or target of its own.
    pub fn armed_can_serve(&self) -> bool {
        self.use_armed
            && self.custom_instructions.is_none()
            && self.first_kept_entry_id.is_none()
            && self.target_tokens.is_none()
            && self.keep_recent_tokens.is_none()
    }
}

/// Whether a compaction's summary met the `targetTokens` it was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetReport {
    pub target_tokens: u64,
    /// The stored summary's size (file tags, retained facts and ledger included).
    pub summary_tokens: u64,
    pub met: bool,
    /// Why not, when not met.
    pub reason: Option<String>,
}

/// The detail scale of a compaction: `targetTokens` over the usual history budget when given,
/// else `compaction.detail`'s factor.
pub fn detail_scale(settings: &crate::settings::CompactionSettings, target: Option<u64>) -> f64 {
    match target {
        Some(target) => {
            let usual = u64::from(history_max_tokens(settings.reserve_tokens)).max(1);
            target as f64 / usual as f64
        }
        None => settings.detail.factor(),
    }
}

/// `budget` times `scale`, at least 1.
fn scale_budget(budget: u64, scale: f64) -> u64 {
    ((budget as f64 * scale).round() as u64).max(1)
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
    /// Which summarizer wrote each part (history, turn prefix, short summary), what its
    /// answer checks found, and why the rungs before it gave up; also in `details.summarizers`.
    pub reports: Vec<(Purpose, SummaryReport)>,
    /// Settings the session's project file tried to set and that were ignored (see
    /// `settings::trust`), for the client to show.
    pub warnings: Vec<String>,
    /// For a preview kept by the engine: the id `session/commitCompaction` writes it by.
    pub preview_id: Option<String>,
    /// With `targetTokens`: whether the summary met it.
    pub target: Option<TargetReport>,
    /// The background compaction whose armed result this is (`useArmed`).
    pub background_operation_id: Option<String>,
}

impl CompactOutcome {
    /// A copy without the `details` (`null` in their place): the part of an outcome that stays
    /// small when a huge session's ledger is megabytes, for a report that writes the details
    /// from the original (issue 35 item 7).
    pub fn clone_without_details(&self) -> CompactOutcome {
        CompactOutcome {
            entry_id: self.entry_id.clone(),
            summary: self.summary.clone(),
            short_summary: self.short_summary.clone(),
            first_kept_entry_id: self.first_kept_entry_id.clone(),
            tokens_before: self.tokens_before,
            tokens_after: self.tokens_after,
            details: Value::Null,
            preserve_data: self.preserve_data.clone(),
            from_extension: self.from_extension,
            preview: self.preview,
            summarizer: self.summarizer.clone(),
            reports: self.reports.clone(),
            warnings: self.warnings.clone(),
            preview_id: self.preview_id.clone(),
            target: self.target.clone(),
            background_operation_id: self.background_operation_id.clone(),
        }
    }
}

/// What was prepared under the read lock.
struct Prepared {
    prep: CompactionPreparation,
    /// The path, root first, as it was when prepared; the preparation's messages are read from
    /// it.
    path: Arc<[Entry]>,
    leaf: Option<String>,
}

impl Prepared {
    /// The leaf it was prepared at; the rest (a copy of the whole branch) is dropped.
    fn into_leaf(self) -> Option<String> {
        self.leaf
    }
}

/// The summary parts of a compaction before it is persisted.
#[derive(Clone)]
struct Drafted {
    summary: String,
    short_summary: Option<String>,
    first_kept_entry_id: String,
    tokens_before: u64,
    details: Value,
    preserve_data: Option<Value>,
    from_extension: bool,
    summarizer: String,
    reports: Vec<(Purpose, SummaryReport)>,
    /// Messages kept after the summary, to estimate the context afterwards.
    kept: Vec<AgentMessage>,
    /// What an edited summary needs to get the treatment of a generated one (`None` for a
    /// hook's compaction, which gets none).
    kit: Option<edit::EditKit>,
    /// With `targetTokens`: whether the summary met it.
    target: Option<TargetReport>,
}

/// Compacts `session`: see the module doc.
pub async fn compact(
    session: &SharedSession,
    env: &CompactEnv,
    opts: CompactOptions,
    cancel: CancellationToken,
    observer: &dyn OperationObserver,
) -> Result<CompactOutcome, EngineError> {
    compact_keeping(session, env, opts, cancel, observer)
        .await
        .map(|(outcome, _)| outcome)
}

/// [`compact`], and for a preview the compaction it would write, to be written later with
/// [`commit_preview`] while the branch is unchanged.
pub async fn compact_keeping(
    session: &SharedSession,
    env: &CompactEnv,
    opts: CompactOptions,
    cancel: CancellationToken,
    observer: &dyn OperationObserver,
) -> Result<(CompactOutcome, Option<PreviewedCompaction>), EngineError> {
    observer.phase(Phase::Preparing, "Preparing compaction", None);
    let prepared = prepare(session, env, &opts).await?;
    let mut drafted = match run_before_compact(env, &opts, &prepared, &cancel).await? {
        Some(drafted) => drafted,
        None => draft(env, &opts, &prepared, &cancel, observer).await?,
    };
    record_reason(&mut drafted.details, opts.reason);
    // The snapshot of the branch is not needed to write what was drafted from it.
    let leaf = prepared.into_leaf();
    if cancel.is_cancelled() {
        return Err(EngineError::compaction_cancelled());
    }
    let tokens_after = estimate_after(env.counter.as_ref(), &drafted);
    if opts.preview {
        let kept = PreviewedCompaction {
            leaf,
            drafted: drafted.clone(),
        };
        return Ok((outcome(None, drafted, tokens_after, true), Some(kept)));
    }
    observer.phase(Phase::Persisting, "Saving the compaction", None);
    let entry_id = persist(session, &opts, &leaf, &mut drafted, &cancel).await?;
    Ok((outcome(Some(entry_id), drafted, tokens_after, false), None))
}

/// A previewed compaction kept for `session/commitCompaction`: the entry it would append and
/// the leaf it was computed at (not the branch itself, so a kept preview stays small).
#[derive(Clone)]
pub struct PreviewedCompaction {
    leaf: Option<String>,
    drafted: Drafted,
}

impl std::fmt::Debug for PreviewedCompaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreviewedCompaction")
            .field("leaf", &self.leaf)
            .field("first_kept_entry_id", &self.drafted.first_kept_entry_id)
            .finish_non_exhaustive()
    }
}

impl PreviewedCompaction {
    /// The leaf the preview was computed at.
    #[cfg(test)]
    pub fn leaf(&self) -> Option<&str> {
        self.leaf.as_deref()
    }

    #[cfg(test)]
    pub(crate) fn for_tests(leaf: Option<String>) -> Self {
        PreviewedCompaction {
            leaf,
            drafted: Drafted {
                summary: "summary".into(),
                short_summary: None,
                first_kept_entry_id: "kept".into(),
                tokens_before: 0,
                details: json!({}),
                preserve_data: None,
                from_extension: false,
                summarizer: "extractive".into(),
                reports: Vec::new(),
                kept: Vec::new(),
                kit: None,
                target: None,
            },
        }
    }
}

/// Writes a previewed compaction at `session`'s leaf, with the user's text when `edit` has
/// some ([`SummaryEdit`]). Valid only while the branch is as it was: the leaf must be the
/// preview's (the check [`snapshot_fits`] makes, with nothing appended since) and `stale`
/// unset (a prune or navigation since); otherwise `LeafMoved` and nothing is written.
pub async fn commit_preview(
    session: &SharedSession,
    counter: &dyn TokenCounter,
    preview: PreviewedCompaction,
    stale: bool,
    edit: SummaryEdit,
    cancel: &CancellationToken,
) -> Result<CompactOutcome, EngineError> {
    let PreviewedCompaction { leaf, mut drafted } = preview;
    drafted.apply_edit(edit)?;
    let mut s = session.write().await;
    s.refresh()?;
    let actual = s.leaf_id().map(str::to_owned);
    let unchanged = {
        let path = s.path_to_leaf();
        snapshot_fits(leaf.as_deref(), &path).is_ok()
            && path.last().map(|e| e.id.as_str()) == leaf.as_deref()
    };
    if stale || !unchanged {
        return Err(EngineError::LeafMoved {
            expected: leaf,
            actual,
        });
    }
    if cancel.is_cancelled() {
        return Err(EngineError::compaction_cancelled());
    }
    let tokens_after = estimate_after(counter, &drafted);
    let id = append_compaction(&mut s, &leaf, &mut drafted)?;
    Ok(outcome(Some(id), drafted, tokens_after, false))
}

/// A compaction drafted on a snapshot of the branch and not yet written: what a background
/// (speculative) compaction holds until a reply crosses the threshold.
pub struct ArmedCompaction {
    /// The leaf of the branch it was drafted on (the snapshot itself is not kept: a huge one
    /// would be held for as long as the compaction stays armed).
    leaf: Option<String>,
    drafted: Drafted,
    reason: CompactReason,
}

impl std::fmt::Debug for ArmedCompaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArmedCompaction")
            .field("snapshot_leaf", &self.leaf)
            .field("first_kept_entry_id", &self.drafted.first_kept_entry_id)
            .finish_non_exhaustive()
    }
}

impl ArmedCompaction {
    /// Why it was drafted.
    pub fn reason(&self) -> CompactReason {
        self.reason
    }

    /// Whether the compaction can be written at the end of `path` (root → leaf): the snapshot's
    /// leaf is on it, and no compaction came after it. The entries after the snapshot then stay
    /// in the kept part, between the first kept entry and the compaction.
    pub fn fits(&self, path: &[&Entry]) -> Result<(), DiscardReason> {
        snapshot_fits(self.leaf.as_deref(), path)
    }

    /// Estimated context tokens right after writing it at the end of `path`: the summary, the
    /// kept part of the snapshot, and every message appended since.
    pub fn tokens_after_on(&self, path: &[&Entry], counter: &dyn TokenCounter) -> u64 {
        let since = match self.leaf.as_deref() {
            Some(snapshot) => path
                .iter()
                .position(|e| e.id == snapshot)
                .map_or(&[][..], |at| &path[at + 1..]),
            None => &[][..],
        };
        estimate_after(counter, &self.drafted)
            + since
                .iter()
                .filter_map(|e| e.to_agent_message(false))
                .map(|m| counter.count_message(&m))
                .sum::<u64>()
    }
}

impl ArmedCompaction {
    /// The compaction as a preview at the end of `path` (whose leaf is `leaf`), written by
    /// nobody yet: its result, and what `session/commitCompaction` would write.
    pub fn into_preview(
        self,
        leaf: Option<String>,
        path: &[&Entry],
        counter: &dyn TokenCounter,
    ) -> (CompactOutcome, PreviewedCompaction) {
        let tokens_after = self.tokens_after_on(path, counter);
        let kept = PreviewedCompaction {
            leaf,
            drafted: self.drafted.clone(),
        };
        (outcome(None, self.drafted, tokens_after, true), kept)
    }
}

/// Whether a compaction drafted on the branch that ended at `snapshot` can be written at the
/// end of `path`: `snapshot` is on it and no compaction follows it.
pub fn snapshot_fits(snapshot: Option<&str>, path: &[&Entry]) -> Result<(), DiscardReason> {
    let Some(snapshot) = snapshot else {
        return Err(DiscardReason::LeafLeftBranch);
    };
    let Some(at) = path.iter().position(|e| e.id == snapshot) else {
        return Err(DiscardReason::LeafLeftBranch);
    };
    if path[at + 1..]
        .iter()
        .any(|e| matches!(e.kind(), EntryKind::Compaction(_)))
    {
        return Err(DiscardReason::CompactedSince);
    }
    Ok(())
}

/// Drafts a compaction of `session`'s branch as it stands (prepare, hook, summaries), or of
/// the branch that ends at `leaf_id` (another writer's leaf), without writing it;
/// [`commit_armed`] writes it later, at a leaf further down the same branch.
pub async fn draft_armed(
    session: &SharedSession,
    env: &CompactEnv,
    reason: CompactReason,
    leaf_id: Option<String>,
    cancel: CancellationToken,
    observer: &dyn OperationObserver,
) -> Result<ArmedCompaction, EngineError> {
    let opts = CompactOptions {
        reason,
        // Planned like a preview at that leaf: nothing is appended there now.
        preview: leaf_id.is_some(),
        leaf_id,
        ..CompactOptions::manual()
    };
    observer.phase(Phase::Preparing, "Preparing compaction", None);
    let prepared = prepare(session, env, &opts).await?;
    let mut drafted = match run_before_compact(env, &opts, &prepared, &cancel).await? {
        Some(drafted) => drafted,
        None => draft(env, &opts, &prepared, &cancel, observer).await?,
    };
    record_reason(&mut drafted.details, reason);
    if cancel.is_cancelled() {
        return Err(EngineError::compaction_cancelled());
    }
    Ok(ArmedCompaction {
        leaf: prepared.into_leaf(),
        drafted,
        reason,
    })
}

/// Writes `armed` at `session`'s current leaf, which must still be on the snapshot's branch
/// with no compaction since ([`ArmedCompaction::fits`]; otherwise `LeafMoved` and nothing is
/// written). The entries appended since the snapshot stay in the kept part.
pub async fn commit_armed(
    session: &SharedSession,
    counter: &dyn TokenCounter,
    armed: ArmedCompaction,
    cancel: &CancellationToken,
) -> Result<CompactOutcome, EngineError> {
    let mut s = session.write().await;
    s.refresh()?;
    let leaf = s.leaf_id().map(str::to_owned);
    let path = s.path_to_leaf();
    if armed.fits(&path).is_err() {
        return Err(EngineError::LeafMoved {
            expected: armed.leaf.clone(),
            actual: leaf,
        });
    }
    let tokens_after = armed.tokens_after_on(&path, counter);
    drop(path);
    if cancel.is_cancelled() {
        return Err(EngineError::compaction_cancelled());
    }
    let mut d = armed.drafted;
    let id = append_compaction(&mut s, &leaf, &mut d)?;
    Ok(outcome(Some(id), d, tokens_after, false))
}

fn outcome(
    entry_id: Option<String>,
    d: Drafted,
    tokens_after: u64,
    preview: bool,
) -> CompactOutcome {
    CompactOutcome {
        entry_id,
        summary: d.summary,
        short_summary: d.short_summary,
        first_kept_entry_id: d.first_kept_entry_id,
        tokens_before: d.tokens_before,
        tokens_after,
        details: d.details,
        preserve_data: d.preserve_data,
        from_extension: d.from_extension,
        preview,
        summarizer: d.summarizer,
        reports: d.reports,
        warnings: Vec::new(),
        preview_id: None,
        target: d.target,
        background_operation_id: None,
    }
}

fn check_expected_leaf(
    expected: &Option<Option<String>>,
    actual: Option<&str>,
) -> Result<(), EngineError> {
    match expected {
        Some(expected) if expected.as_deref() != actual => Err(EngineError::LeafMoved {
            expected: expected.clone(),
            actual: actual.map(str::to_owned),
        }),
        _ => Ok(()),
    }
}

async fn prepare(
    session: &SharedSession,
    env: &CompactEnv,
    opts: &CompactOptions,
) -> Result<Prepared, EngineError> {
    {
        // The hook gets the whole branch; a preview at another leaf walks that leaf's path;
        // a chosen first kept entry is looked for on the branch. A partly loaded stored
        // session loads the rest when it holds too little for that.
        let mut s = session.write().await;
        if env.hooks.wants_branch_entries() {
            s.load_whole()?;
        }
        for id in opts.leaf_id.iter().chain(&opts.first_kept_entry_id) {
            s.ensure_path(id)?;
        }
    }
    // Planning walks (and counts) the whole path: on a blocking thread, under the read lock.
    let s = Arc::clone(session).read_owned().await;
    let counter = Arc::clone(&env.counter);
    let keep_recent_tokens = opts
        .keep_recent_tokens
        .unwrap_or(env.settings.compaction.keep_recent_tokens);
    let opts = opts.clone();
    super::off_runtime(move || plan(&s, counter.as_ref(), keep_recent_tokens, &opts)).await
}

/// The cut point and what to summarise, on the session as it is now.
fn plan(
    s: &Session,
    counter: &dyn TokenCounter,
    keep_recent_tokens: u64,
    opts: &CompactOptions,
) -> Result<Prepared, EngineError> {
    let leaf = s.leaf_id().map(str::to_owned);
    check_expected_leaf(&opts.expected_leaf_id, leaf.as_deref())?;
    let (leaf, path) = match &opts.leaf_id {
        None => (leaf, s.path_to_leaf()),
        Some(_) if !opts.preview => {
            return Err(EngineError::InvalidParams(
                "leafId needs preview: a compaction is only appended at the session's leaf".into(),
            ));
        }
        Some(id) => match s.get(id).filter(|e| !e.is_leaf_move()) {
            Some(_) => (Some(id.clone()), s.path_to(id)),
            None => return Err(EngineError::EntryNotFound(id.clone())),
        },
    };
    let params = CompactionParams {
        keep_recent_tokens,
        recompact: opts.keep_recent_tokens.is_some(),
        ..CompactionParams::default()
    };
    let path: Arc<[Entry]> = path.into_iter().cloned().collect();
    let prep = match &opts.first_kept_entry_id {
        Some(id) => prepare_compaction_at(&path, id, &params, counter).map_err(boundary_error)?,
        None => prepare_compaction_in(&path, &params, counter).ok_or_else(|| {
            match path.last().map(|e| e.kind()) {
                Some(EntryKind::Compaction(_)) => EngineError::AlreadyCompacted,
                _ => EngineError::NothingToCompact,
            }
        })?,
    };
    Ok(Prepared { prep, path, leaf })
}

fn boundary_error(e: BoundaryError) -> EngineError {
    match e {
        BoundaryError::AlreadyCompacted => EngineError::AlreadyCompacted,
        BoundaryError::NothingToCompact => EngineError::NothingToCompact,
        other => EngineError::InvalidParams(format!("Invalid firstKeptEntryId: {other}")),
    }
}

/// Runs `before_compact`. `Ok(Some)` is a hook-supplied compaction to persist as is.
async fn run_before_compact(
    env: &CompactEnv,
    opts: &CompactOptions,
    prepared: &Prepared,
    cancel: &CancellationToken,
) -> Result<Option<Drafted>, EngineError> {
    let prep = &prepared.prep;
    let req = BeforeCompactRequest {
        session_id: &env.session_id,
        operation_id: &env.operation_id,
        branch_entries: &prepared.path,
        messages_to_summarize: &prep.messages_to_summarize,
        turn_prefix_messages: &prep.turn_prefix_messages,
        recent_messages: &prep.recent_messages,
        file_ops: &prep.file_ops,
        first_kept_entry_id: &prep.first_kept_entry_id,
        is_split_turn: prep.is_split_turn,
        tokens_before: prep.tokens_before,
        previous_summary: prep.previous_summary.as_deref(),
        custom_instructions: opts.custom_instructions.as_deref(),
        reason: opts.reason,
        cancel: cancel.clone(),
    };
    let reply = tokio::select! {
        biased;
        _ = cancel.cancelled() => return Err(EngineError::compaction_cancelled()),
        reply = env.hooks.before_compact(req) => reply,
    };
    let Some(reply) = reply else {
        return Ok(None);
    };
    if reply.cancel {
        return Err(EngineError::compaction_cancelled());
    }
    let Some(hook) = reply.compaction else {
        return Ok(None);
    };
    let path: Vec<&Entry> = prepared.path.iter().collect();
    if let Err(e) = validate_boundary(&path, &hook.first_kept_entry_id) {
        tracing::warn!(
            first_kept_entry_id = hook.first_kept_entry_id,
            error = %e,
            "ignoring the compaction supplied by hooks/beforeCompact: invalid firstKeptEntryId"
        );
        return Ok(None);
    }
    let kept = kept_messages(&prepared.path, &hook.first_kept_entry_id);
    Ok(Some(Drafted {
        summary: hook.summary,
        short_summary: hook.short_summary,
        first_kept_entry_id: hook.first_kept_entry_id,
        tokens_before: hook.tokens_before.unwrap_or(prep.tokens_before),
        details: hook.details.unwrap_or_else(|| json!({})),
        preserve_data: hook.preserve_data,
        from_extension: true,
        summarizer: "hook".into(),
        reports: Vec::new(),
        kept,
        kit: None,
        target: None,
    }))
}

/// The messages the context keeps after a compaction that keeps from `first_kept` (path
/// entries from it on; compaction entries yield nothing).
fn kept_messages(path: &[Entry], first_kept: &str) -> Vec<AgentMessage> {
    let Some(start) = path.iter().position(|e| e.id == first_kept) else {
        return Vec::new();
    };
    path[start..]
        .iter()
        .filter_map(|e| e.to_agent_message(false))
        .collect()
}

/// Runs `compacting` and the summarizers, then assembles the summary.
async fn draft(
    env: &CompactEnv,
    opts: &CompactOptions,
    prepared: &Prepared,
    cancel: &CancellationToken,
    observer: &dyn OperationObserver,
) -> Result<Drafted, EngineError> {
    let prep = &prepared.prep;
    // Everything here reads the summarised messages from the path's entries as it needs them:
    // held at once, a million messages are about twice their file (issue 35 item 7).
    let span = &prep.summarized;
    let hook = run_compacting(env, span, cancel).await?;
    let mut span_ops = FileOps::default();
    span.messages().for_each(|m| span_ops.add_message(&m));
    let (_, span_modified) = compute_file_lists(&span_ops);
    let facts = retention::extract_facts_from(|| span.messages(), &span_modified);
    let has_history = !prep.messages_to_summarize.is_empty();
    let history = prep.messages_to_summarize.for_llm();

    observer.phase(Phase::Summarizing, "Summarizing the conversation", None);
    let scale = detail_scale(&env.settings.compaction, opts.target_tokens);
    let summaries = Summaries {
        scale,
        env,
        set: env.summarizers.for_operation(),
        prep,
        history,
        has_history,
        custom: opts.custom_instructions.as_deref(),
        hook: &hook,
        cancel,
        observer,
        reports: std::sync::Mutex::new(Vec::new()),
    };
    let (summary, history_output) = summaries.merged().await?;
    let short_summary = match history_output
        .as_ref()
        .and_then(|o| o.short_summary.clone())
    {
        Some(short) => Some(short),
        None => summaries.short(&summary).await?,
    };

    // Retention guard, then the file tags (deviation 6: a blank line before them).
    let (read_files, modified_files) = compute_file_lists(&prep.file_ops);
    let file_block = format_file_operations(&read_files, &modified_files);
    let (guarded, added) = retention::apply_guard(&summary, &file_block, &facts);
    let mut details = file_lists_details(&read_files, &modified_files);
    retention::record_in_details(&mut details, &added);
    let reports = summaries.take_reports();
    record_reports(&mut details, &reports);
    let ledger_block = ledger_block(env, prepared, &mut details, scale);
    let summary = format!("{guarded}{file_block}{ledger_block}");
    let target = opts.target_tokens.map(|target| {
        let parts = TargetParts {
            summary: &summary,
            blocks: &format!("{file_block}{ledger_block}"),
            retained: added.len(),
        };
        target_report(target, &parts, env.counter.as_ref())
    });

    Ok(Drafted {
        summary,
        target,
        short_summary,
        first_kept_entry_id: prep.first_kept_entry_id.clone(),
        tokens_before: prep.tokens_before,
        details,
        preserve_data: hook.preserve_data,
        from_extension: false,
        summarizer: history_output.map_or_else(|| "none".to_owned(), |o| o.model),
        reports,
        kept: prep.recent_messages.to_vec(),
        kit: Some(edit::EditKit {
            file_block: file_block.clone(),
            ledger_block: ledger_block.clone(),
            facts,
        }),
    })
}

/// The progress ledger of the path being compacted: stored in `details.ledger` for the next
/// compaction to extend, and rendered (with a blank line before it) for the summary's end,
/// within `compaction.ledgerBudgetPercent` of `keepRecentTokens`. Inside the summary, the
/// reference builds the same context from the file as compactd.
fn ledger_block(env: &CompactEnv, prepared: &Prepared, details: &mut Value, scale: f64) -> String {
    let path: Vec<&Entry> = prepared.path.iter().collect();
    let ledger = Ledger::derive(&path);
    record_ledger_in_details(details, &ledger);
    let budget = env.settings.compaction.ledger_budget_tokens();
    if budget == 0 {
        return String::new();
    }
    let budget = scale_budget(budget, scale);
    let block = render_ledger_block(&ledger, budget, env.counter.as_ref());
    if block.is_empty() {
        block
    } else {
        format!("\n\n{block}")
    }
}

async fn run_compacting(
    env: &CompactEnv,
    span: &EntrySpan,
    cancel: &CancellationToken,
) -> Result<CompactingReply, EngineError> {
    let req = CompactingRequest {
        session_id: &env.session_id,
        operation_id: &env.operation_id,
        messages: span,
        cancel: cancel.clone(),
    };
    let reply = tokio::select! {
        biased;
        _ = cancel.cancelled() => return Err(EngineError::compaction_cancelled()),
        reply = env.hooks.compacting(req) => reply,
    };
    Ok(reply.unwrap_or_default())
}

/// What a summary is made of, for its [`TargetReport`].
struct TargetParts<'a> {
    summary: &'a str,
    /// The file tags and the ledger block.
    blocks: &'a str,
    /// Facts the retention guard added.
    retained: usize,
}

fn target_report(target: u64, parts: &TargetParts<'_>, counter: &dyn TokenCounter) -> TargetReport {
    let summary_tokens = counter.count_text(parts.summary);
    let met = summary_tokens <= target;
    let reason = (!met).then(|| {
        let blocks = counter.count_text(parts.blocks);
        if blocks >= target {
            format!(
                "the file lists and the progress ledger alone take {blocks} tokens, more than \
                 the target of {target}"
            )
        } else if parts.retained > 0 {
            format!(
                "the summary is {summary_tokens} tokens: the retention guard added {} facts the \
                 summary must keep",
                parts.retained
            )
        } else {
            format!(
                "the summary is {summary_tokens} tokens: the summarizer's shortest summary of \
                 this span is longer than the target of {target}"
            )
        }
    });
    TargetReport {
        target_tokens: target,
        summary_tokens,
        met,
        reason,
    }
}

/// The summarizer calls of one compaction.
struct Summaries<'a> {
    /// The detail scale ([`detail_scale`]).
    scale: f64,
    env: &'a CompactEnv,
    /// The summarizers with this compaction's breaker and retry budget.
    set: SummarizerSet,
    prep: &'a CompactionPreparation,
    /// The history's messages, as the summarizers read them.
    history: LlmMessages,
    /// Whether there was any history to summarise before the conversion.
    has_history: bool,
    custom: Option<&'a str>,
    hook: &'a CompactingReply,
    cancel: &'a CancellationToken,
    observer: &'a dyn OperationObserver,
    reports: std::sync::Mutex<Vec<(Purpose, SummaryReport)>>,
}

impl Summaries<'_> {
    /// The reports of the parts summarised so far, history first.
    fn take_reports(&self) -> Vec<(Purpose, SummaryReport)> {
        let mut reports = std::mem::take(
            &mut *self
                .reports
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        reports.sort_by_key(|(part, _)| match part {
            Purpose::History => 0,
            Purpose::TurnPrefix => 1,
            Purpose::Short => 2,
            Purpose::Branch => 3,
        });
        reports
    }

    fn reserve(&self) -> u64 {
        self.env.settings.compaction.reserve_tokens
    }

    /// A usual output budget at this compaction's detail scale.
    fn budget(&self, usual: u32) -> u32 {
        u32::try_from(scale_budget(u64::from(usual), self.scale)).unwrap_or(u32::MAX)
    }

    /// The history summary, merged with the turn-prefix summary of a split turn (spec §4.9),
    /// and the history summarizer's output when one ran. A split turn with nothing before it
    /// is summarised as the history alone (docs/conformance.md, §4.9).
    async fn merged(&self) -> Result<(String, Option<SummaryOutput>), EngineError> {
        let prep = self.prep;
        let previous = prep.previous_summary.clone();
        if prep.is_split_turn && !prep.turn_prefix_messages.is_empty() {
            if !self.has_history && previous.is_none() {
                // Everything summarised is the start of the current turn and nothing came
                // before it: summarised as the history (one request, the usual headings), the
                // summary opens with the goal and the progress, not "No prior history.".
                let output = self.history_of(prep.turn_prefix_messages.for_llm()).await?;
                return Ok((output.text.clone(), Some(output)));
            }
            let (history, prefix) = futures::join!(self.history_or_previous(), self.turn_prefix());
            let (history_text, output) = history?;
            let prefix = prefix?;
            let model = output.or(Some(prefix.clone()));
            let merged = format!("{history_text}{TURN_CONTEXT_SEPARATOR}{}", prefix.text);
            return Ok((
                merged,
                model.map(|o| SummaryOutput {
                    short_summary: None,
                    ..o
                }),
            ));
        }
        if self.has_history {
            let output = self.history().await?;
            return Ok((output.text.clone(), Some(output)));
        }
        Ok((
            previous.unwrap_or_else(|| NO_PRIOR_HISTORY.to_owned()),
            None,
        ))
    }

    /// History of a split turn: summarised when there is any; otherwise the previous summary
    /// (deviation 2), or "No prior history.".
    async fn history_or_previous(&self) -> Result<(String, Option<SummaryOutput>), EngineError> {
        if !self.has_history {
            let text = self
                .prep
                .previous_summary
                .clone()
                .unwrap_or_else(|| NO_PRIOR_HISTORY.to_owned());
            return Ok((text, None));
        }
        let output = self.history().await?;
        Ok((output.text.clone(), Some(output)))
    }

    async fn history(&self) -> Result<SummaryOutput, EngineError> {
        self.history_of(self.history.clone()).await
    }

    async fn history_of(&self, messages: LlmMessages) -> Result<SummaryOutput, EngineError> {
        let prompts = &self.env.prompts;
        let build = |conversation: &str, previous: Option<&str>| {
            prompts.history_prompt(&HistoryPrompt {
                conversation,
                previous_summary: previous,
                additional_context: &self.hook.context,
                prompt_override: self.hook.prompt.as_deref(),
                custom_instructions: self.custom,
            })
        };
        let job = self.job(
            Purpose::History,
            messages,
            self.prep.previous_summary.clone(),
            &build,
            self.budget(history_max_tokens(self.reserve())),
        );
        self.run(&job)
            .await
            .map_err(|e| failed("Summarization failed", e))
    }

    async fn turn_prefix(&self) -> Result<SummaryOutput, EngineError> {
        let prompts = &self.env.prompts;
        let build = |conversation: &str, previous: Option<&str>| match previous {
            None => prompts.turn_prefix_prompt(conversation, self.custom),
            // A later chunk of a folded prefix: the same instructions, after the summary so far.
            Some(previous) => prompts.history_prompt(&HistoryPrompt {
                conversation,
                previous_summary: Some(previous),
                additional_context: &[],
                prompt_override: Some(&prompts.turn_prefix),
                custom_instructions: self.custom,
            }),
        };
        let job = self.job(
            Purpose::TurnPrefix,
            self.prep.turn_prefix_messages.for_llm(),
            None,
            &build,
            self.budget(turn_prefix_max_tokens(self.reserve())),
        );
        self.run(&job)
            .await
            .map_err(|e| failed("Turn prefix summarization failed", e))
    }

    /// The short summary, best-effort (deviation 7): a failure leaves it out; only a
    /// cancellation is an error.
    async fn short(&self, summary: &str) -> Result<Option<String>, EngineError> {
        let prompts = &self.env.prompts;
        let build = |conversation: &str, _previous: Option<&str>| {
            prompts.short_summary_prompt(conversation, summary, &self.hook.context)
        };
        let mut job = self.job(
            Purpose::Short,
            self.prep.recent_messages.for_llm(),
            Some(summary.to_owned()),
            &build,
            short_summary_max_tokens(self.reserve()),
        );
        job.reasoning = false;
        job.tail_only = true;
        match self.run(&job).await {
            Ok(output) => Ok(Some(output.text.trim().to_owned()).filter(|s| !s.is_empty())),
            Err(SummarizeError::Cancelled) => Err(EngineError::compaction_cancelled()),
            Err(e) => {
                tracing::warn!(error = %e, "short summary failed; compacting without it");
                Ok(None)
            }
        }
    }

    fn job<'b>(
        &self,
        purpose: Purpose,
        messages: LlmMessages,
        previous_summary: Option<String>,
        build: &'b PromptBuilder<'b>,
        max_tokens: u32,
    ) -> SummaryJob<'b>
    where
        Self: 'b,
    {
        let (read_files, modified_files) = compute_file_lists(&self.prep.file_ops);
        let mut job = SummaryJob::new(
            purpose,
            messages,
            &self.env.prompts.system,
            build,
            max_tokens,
        );
        job.previous_summary = previous_summary;
        job.reasoning = true;
        job.custom_instructions = self.custom.map(str::to_owned);
        job.read_files = read_files;
        job.modified_files = modified_files;
        job.detail_scale = self.scale;
        job
    }

    async fn run(&self, job: &SummaryJob<'_>) -> Result<SummaryOutput, SummarizeError> {
        let written = write_summary(
            job,
            &self.set,
            self.env.counter.as_ref(),
            self.cancel,
            self.observer,
        )
        .await?;
        self.reports
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((job.purpose, written.report));
        Ok(written.output)
    }
}

/// A summarizer error as the engine reports it, with the reference's prefix unless the message
/// already says what failed.
pub(crate) fn failed(prefix: &str, e: SummarizeError) -> EngineError {
    if matches!(e, SummarizeError::Cancelled) {
        return EngineError::compaction_cancelled();
    }
    let message = e.to_string();
    let self_describing = [
        "Summarization failed",
        "Remote compaction",
        "Compaction failed",
    ]
    .iter()
    .any(|p| message.starts_with(p));
    if self_describing {
        EngineError::SummarizationFailed(message)
    } else {
        EngineError::SummarizationFailed(format!("{prefix}: {message}"))
    }
}

/// Records why the compaction ran in its `details` (`reason`), so the auto-compaction rules
/// (one overflow recovery per overflow) still hold after a restart. Non-object details (from a
/// hook) are left alone.
fn record_reason(details: &mut Value, reason: CompactReason) {
    if let Value::Object(map) = details {
        map.insert("reason".to_owned(), Value::from(reason.name()));
    }
}

/// Estimated context tokens after the compaction: the summary as the LLM sees it plus the kept
/// messages.
fn estimate_after(counter: &dyn TokenCounter, d: &Drafted) -> u64 {
    counter.count_text(&compaction_summary_text(&d.summary))
        + d.kept.iter().map(|m| counter.count_message(m)).sum::<u64>()
}

async fn persist(
    session: &SharedSession,
    opts: &CompactOptions,
    leaf: &Option<String>,
    d: &mut Drafted,
    cancel: &CancellationToken,
) -> Result<String, EngineError> {
    let mut s = session.write().await;
    // Pick up other writers' appends before deciding the leaf is still ours.
    s.refresh()?;
    let actual = s.leaf_id().map(str::to_owned);
    if actual != *leaf {
        return Err(EngineError::LeafMoved {
            expected: leaf.clone(),
            actual,
        });
    }
    check_expected_leaf(&opts.expected_leaf_id, actual.as_deref())?;
    if cancel.is_cancelled() {
        return Err(EngineError::compaction_cancelled());
    }
    append_compaction(&mut s, leaf, d)
}

/// From this many bytes of line on, a written compaction entry stays in the session as its
/// line (see `Session::keep_as_line`).
const KEEP_AS_LINE_FROM: usize = 1 << 20;

/// Appends the compaction entry of `d` at `leaf` (the session's leaf, under the held write
/// lock).
fn append_compaction(
    s: &mut Session,
    leaf: &Option<String>,
    d: &mut Drafted,
) -> Result<String, EngineError> {
    // The leaf is checked again under the writers' lock: another daemon's append may land
    // between the refresh above and the write. The details (a huge session's ledger is
    // megabytes) move into the entry, and back once its line is written (see below).
    let details = std::mem::take(&mut d.details);
    let kind = EntryKind::Compaction(CompactionEntry {
        summary: d.summary.clone(),
        short_summary: d.short_summary.clone(),
        first_kept_entry_id: d.first_kept_entry_id.clone(),
        tokens_before: d.tokens_before,
        details: Some(details),
        preserve_data: d.preserve_data.clone(),
        from_extension: Some(d.from_extension),
        extra: Default::default(),
    });
    let written = s
        .append_expecting(vec![(kind, Default::default())], Some(leaf.clone()))
        .map_err(EngineError::from_write)?;
    let id = written[0].id.clone();
    // A large entry stays in the session as its line and its details move back; a small one
    // stays parsed and they are copied.
    d.details = match s.keep_as_line(&id, KEEP_AS_LINE_FROM) {
        Some(EntryKind::Compaction(c)) => c.details.unwrap_or_default(),
        _ => match s.get(&id).map(Entry::kind) {
            Some(EntryKind::Compaction(c)) => c.details.clone().unwrap_or_default(),
            _ => Value::Null,
        },
    };
    // Planning and summarising parsed the old history; the context from now on starts at the
    // first kept entry, so give that memory back.
    s.release_parsed_bodies();
    Ok(id)
}
