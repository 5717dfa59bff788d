//! Tree navigation with an optional summary of the branch being left (spec §6.4).
//!
//! The summary is attached at the new position (a child of the new leaf), as the reference's
//! code does. Deviations: "No content to summarize" is never persisted (spec §13 #12); the
//! summary gets the same candidates, retries and input bounds as a compaction (§13 #9), the
//! retention guard, and a proper separator after the preamble (deviation 6). A navigation
//! that appends nothing persists the new leaf with a leaf marker. Nothing is written when the
//! operation is cancelled or the leaf moved meanwhile (peers.md §3 #25).

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::compaction::{
    BranchCollection, collect_entries_for_branch_summary, compute_file_lists, file_lists_details,
    format_file_operations, prepare_branch_entries,
};
use crate::session::{AgentMessage, Entry, EntryKind, convert_to_llm};
use crate::settings::DEFAULT_CONTEXT_WINDOW;
use crate::summarize::prompts::{BRANCH_MAX_TOKENS, HistoryPrompt, branch_summary_text};
use crate::summarize::{
    Purpose, SummarizeError, SummaryJob, SummaryReport, record_reports, retention, write_summary,
};

use super::compact::failed;
use super::{BeforeTreeRequest, CompactEnv, EngineError, OperationObserver, Phase, SharedSession};

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
    /// Compute everything, write nothing and leave the leaf where it is: the outcome's
    /// `preview_summary` holds the summary a navigation would attach.
    pub preview: bool,
    /// Navigate from this entry instead of the session's leaf (only with `preview`): what
    /// another program whose leaf is that entry would get.
    pub from_leaf_id: Option<String>,
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
    /// Whether the summary came from a hook (`None` without a summary).
    pub from_extension: Option<bool>,
    /// Which summarizer wrote the branch summary and why earlier rungs gave up (`None`
    /// without a summary written by compactd); also in the entry's `details.summarizers`.
    pub report: Option<SummaryReport>,
    /// For a preview: the summary the navigation would attach (`None` when it would attach
    /// none).
    pub preview_summary: Option<BranchSummaryPreview>,
}

/// The branch summary a previewed navigation would attach.
#[derive(Debug, Clone, PartialEq)]
pub struct BranchSummaryPreview {
    /// The entry's `summary` text (preamble and file tags included).
    pub summary: String,
    /// `{readFiles, modifiedFiles, retainedFacts?}`, or what a hook supplied.
    pub details: Option<Value>,
    pub from_extension: bool,
    /// Which summarizer wrote it (`extractive`, `openai/gpt-4o`, `client`, `hook`, …).
    pub summarizer: String,
}

impl NavigateOutcome {
    fn cancelled(old_leaf: Option<String>, aborted: bool) -> Self {
        NavigateOutcome {
            cancelled: true,
            aborted,
            leaf_id: old_leaf.clone(),
            old_leaf_id: old_leaf,
            ..NavigateOutcome::default()
        }
    }
}

/// A summary ready to attach.
struct BranchSummary {
    text: String,
    details: Option<Value>,
    from_extension: bool,
    summarizer: String,
    report: Option<SummaryReport>,
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
    observer.phase(Phase::Preparing, "Preparing navigation", None);
    let (old_leaf, target, collection) = {
        let s = session.read().await;
        let old_leaf = match &opts.from_leaf_id {
            None => s.leaf_id().map(str::to_owned),
            Some(_) if !opts.preview => {
                return Err(EngineError::InvalidParams(
                    "leafId needs preview: only the session's own leaf can be moved".into(),
                ));
            }
            Some(id) if s.get(id).is_some_and(|e| !e.is_leaf_move()) => Some(id.clone()),
            Some(id) => return Err(EngineError::EntryNotFound(id.clone())),
        };
        if let Some(expected) = &opts.expected_leaf_id
            && expected != &old_leaf
        {
            return Err(EngineError::LeafMoved {
                expected: expected.clone(),
                actual: old_leaf,
            });
        }
        if old_leaf.as_deref() == Some(target_id) {
            return Ok(NavigateOutcome {
                leaf_id: old_leaf.clone(),
                old_leaf_id: old_leaf,
                ..NavigateOutcome::default()
            });
        }
        let target = s
            .get(target_id)
            .filter(|e| !e.is_leaf_move())
            .cloned()
            .ok_or_else(|| EngineError::EntryNotFound(target_id.to_owned()))?;
        let collection =
            collect_entries_for_branch_summary(|id| s.get(id), old_leaf.as_deref(), target_id);
        (old_leaf, target, collection)
    };

    let req = BeforeTreeRequest {
        session_id: &env.session_id,
        target_id,
        old_leaf_id: old_leaf.as_deref(),
        common_ancestor_id: collection.common_ancestor_id.as_deref(),
        entries_to_summarize: &collection.entries,
        user_wants_summary: opts.summarize,
        cancel: cancel.clone(),
    };
    let reply = tokio::select! {
        biased;
        _ = cancel.cancelled() => return Ok(NavigateOutcome::cancelled(old_leaf, true)),
        reply = env.hooks.before_tree(req) => reply.unwrap_or_default(),
    };
    if reply.cancel {
        return Ok(NavigateOutcome::cancelled(old_leaf, false));
    }

    let summary = match reply.summary.filter(|_| opts.summarize) {
        Some((text, details)) => Some(BranchSummary {
            text,
            details,
            from_extension: true,
            summarizer: "hook".into(),
            report: None,
        }),
        None if opts.summarize && !collection.entries.is_empty() => {
            observer.phase(Phase::Summarizing, "Summarizing the branch", None);
            match summarize_branch(env, &collection, &opts, &cancel, observer).await {
                Ok(summary) => summary,
                Err(SummarizeError::Cancelled) => {
                    return Ok(NavigateOutcome::cancelled(old_leaf, true));
                }
                Err(e) => return Err(failed("Summarization failed", e)),
            }
        }
        None => None,
    };

    let (new_leaf, editor_text) = new_leaf_for(&target);
    if opts.preview {
        if cancel.is_cancelled() {
            return Ok(NavigateOutcome::cancelled(old_leaf, true));
        }
        return Ok(preview(old_leaf, new_leaf, editor_text, summary));
    }
    observer.phase(Phase::Persisting, "Moving to the new position", None);
    let mut s = session.write().await;
    s.refresh()?;
    let actual = s.leaf_id().map(str::to_owned);
    if actual != old_leaf {
        return Err(EngineError::LeafMoved {
            expected: old_leaf,
            actual,
        });
    }
    if cancel.is_cancelled() {
        return Ok(NavigateOutcome::cancelled(old_leaf, true));
    }
    let report = summary.as_ref().and_then(|s| s.report.clone());
    let (summary_entry, from_extension) = match summary {
        Some(summary) => {
            let entry = s
                .branch_with_summary(
                    new_leaf.as_deref(),
                    summary.text,
                    summary.details,
                    Some(summary.from_extension),
                )?
                .clone();
            (Some(entry), Some(summary.from_extension))
        }
        None => {
            s.move_leaf(new_leaf.as_deref())?;
            (None, None)
        }
    };
    Ok(NavigateOutcome {
        editor_text,
        cancelled: false,
        aborted: false,
        summary_entry,
        leaf_id: s.leaf_id().map(str::to_owned),
        old_leaf_id: old_leaf,
        from_extension,
        report,
        preview_summary: None,
    })
}

/// The outcome of a previewed navigation: `leaf_id` is where the leaf would go.
fn preview(
    old_leaf: Option<String>,
    new_leaf: Option<String>,
    editor_text: Option<String>,
    summary: Option<BranchSummary>,
) -> NavigateOutcome {
    NavigateOutcome {
        editor_text,
        leaf_id: new_leaf,
        old_leaf_id: old_leaf,
        from_extension: summary.as_ref().map(|s| s.from_extension),
        report: summary.as_ref().and_then(|s| s.report.clone()),
        preview_summary: summary.map(|s| BranchSummaryPreview {
            summary: s.text,
            details: s.details,
            from_extension: s.from_extension,
            summarizer: s.summarizer,
        }),
        ..NavigateOutcome::default()
    }
}

/// The new leaf and editor text for a target (spec §6.4 step 6): a user message or custom
/// message is re-opened for editing (the leaf goes to its parent); anything else becomes the
/// leaf.
fn new_leaf_for(target: &Entry) -> (Option<String>, Option<String>) {
    match target.kind() {
        EntryKind::Message(AgentMessage::User(u)) => {
            (target.parent_id.clone(), Some(u.content.joined_text("")))
        }
        EntryKind::CustomMessage(c) => (target.parent_id.clone(), Some(c.content.joined_text(""))),
        _ => (Some(target.id.clone()), None),
    }
}

/// The default branch summary (spec §6.3). `None` when the branch has no content to
/// summarise: then nothing is persisted.
async fn summarize_branch(
    env: &CompactEnv,
    collection: &BranchCollection,
    opts: &NavigateOptions,
    cancel: &CancellationToken,
    observer: &dyn OperationObserver,
) -> Result<Option<BranchSummary>, SummarizeError> {
    let window = if env.context_window > 0 {
        env.context_window
    } else {
        DEFAULT_CONTEXT_WINDOW
    };
    let budget = window.saturating_sub(env.settings.branch_summary.reserve_tokens);
    let prepared = prepare_branch_entries(&collection.entries, budget, env.counter.as_ref());
    if prepared.messages.is_empty() {
        return Ok(None);
    }
    let prompts = &env.prompts;
    let custom = opts
        .custom_instructions
        .as_deref()
        .filter(|c| !c.trim().is_empty());
    let replace = opts.replace_instructions;
    let build = |conversation: &str, previous: Option<&str>| match previous {
        None => prompts.branch_prompt(conversation, custom, replace),
        // A later chunk of a folded branch: the same instructions after the summary so far.
        Some(previous) => prompts.history_prompt(&HistoryPrompt {
            conversation,
            previous_summary: Some(previous),
            additional_context: &[],
            prompt_override: Some(match custom {
                Some(c) if replace => c,
                _ => &prompts.branch_summary,
            }),
            custom_instructions: custom.filter(|_| !replace),
        }),
    };
    let (read_files, modified_files) = compute_file_lists(&prepared.file_ops);
    let mut job = SummaryJob::new(
        Purpose::Branch,
        convert_to_llm(&prepared.messages),
        &prompts.system,
        &build,
        BRANCH_MAX_TOKENS,
    );
    job.custom_instructions = custom.map(str::to_owned);
    job.read_files = read_files.clone();
    job.modified_files = modified_files.clone();
    let written = write_summary(
        &job,
        &env.summarizers.for_operation(),
        env.counter.as_ref(),
        cancel,
        observer,
    )
    .await?;
    let (output, report) = (written.output, written.report);

    let file_block = format_file_operations(&read_files, &modified_files);
    let (guarded, added) = retention::guard(
        output.text.trim(),
        &prepared.messages,
        &modified_files,
        &file_block,
    );
    let mut details = file_lists_details(&read_files, &modified_files);
    retention::record_in_details(&mut details, &added);
    record_reports(&mut details, &[(Purpose::Branch, report.clone())]);
    Ok(Some(BranchSummary {
        text: branch_summary_text(&prompts.branch_preamble, &guarded, &file_block),
        details: Some(details),
        from_extension: false,
        summarizer: output.model,
        report: Some(report),
    }))
}
