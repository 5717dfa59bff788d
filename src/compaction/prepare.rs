//! What a compaction summarises and what it keeps (spec §4.6), over the *effective context*.
//!
//! Deviations from the reference (DESIGN §3):
//! 1. The window is the effective context sequence: the previous compaction's kept region
//!    (path entries from its `firstKeptEntryId` up to it) followed by the entries after it. The
//!    reference starts after the previous compaction, so the kept region is neither summarised
//!    nor kept by the next compaction and vanishes (spec §13 #1).
//! 2. When the window is one split turn with no history before it, the preparation says so
//!    ([`CompactionPreparation::reuse_previous_summary`]): the history part is the previous
//!    summary, not the reference's "No prior history." (spec §13 #2).
//!
//! [`CutMode::Parity`] turns both off and reproduces the reference.

use std::borrow::Cow;
use std::sync::Arc;

use crate::session::entry::CompactionEntry;
use crate::session::{AgentMessage, Entry, EntryKind, EntrySpan, Usage};
use crate::tokens::{TokenCounter, is_chars4};

use super::cut_point::{CutMode, CutPoint, CutRejection, cut_point_at, find_cut_point};
use super::file_ops::FileOps;

/// The settings a preparation needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactionParams {
    /// Tokens of recent conversation to keep verbatim.
    pub keep_recent_tokens: u64,
    /// compactd's rules or the reference's.
    pub mode: CutMode,
    /// Plan even when the path ends with a compaction, cutting its kept region again: an
    /// automatic compaction that left the context over its target compacts once more keeping
    /// less. Otherwise (as in the reference) such a path has nothing to compact.
    pub recompact: bool,
}

impl Default for CompactionParams {
    fn default() -> Self {
        CompactionParams {
            keep_recent_tokens: 20_000,
            mode: CutMode::Fixed,
            recompact: false,
        }
    }
}

/// Everything a summarizer needs for one compaction. Indices are into the path. The messages
/// stay in the path's entries, read when they are needed (issue 35 item 7).
#[derive(Clone, Debug)]
pub struct CompactionPreparation {
    /// The entry the new compaction keeps from.
    pub first_kept_entry_id: String,
    pub first_kept_entry_index: usize,
    /// History to summarise (before the split turn, if any).
    pub messages_to_summarize: EntrySpan,
    /// The beginning of a turn cut in two; summarised separately. Empty unless split.
    pub turn_prefix_messages: EntrySpan,
    /// Messages kept verbatim, from the first kept entry to the leaf.
    pub recent_messages: EntrySpan,
    /// History and turn prefix together: everything summarised.
    pub summarized: EntrySpan,
    pub is_split_turn: bool,
    pub turn_start_index: Option<usize>,
    /// The context size before compaction, from the newest usable provider usage (0 if none).
    pub tokens_before: u64,
    /// The previous compaction's summary, to be updated rather than rewritten.
    pub previous_summary: Option<String>,
    /// The history part of a split turn is `previous_summary` as is (there is no other history
    /// to summarise); the reference would write "No prior history." and lose it.
    pub reuse_previous_summary: bool,
    /// Files read and modified, carried from the previous compaction.
    pub file_ops: FileOps,
    /// The keep-recent budget actually used (after the chars4 usage adjustment).
    pub keep_recent_tokens: u64,
}

impl CompactionPreparation {
    /// Whether there is nothing new to summarise: everything in the window is kept. The
    /// reference still compacts then (re-summarising the previous summary); later versions
    /// report "nothing to compact", which is the caller's choice.
    pub fn summarizes_nothing(&self) -> bool {
        self.summarized.is_empty()
    }
}

/// Why a caller-chosen `firstKeptEntryId` cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BoundaryError {
    #[error("Already compacted")]
    AlreadyCompacted,
    #[error("Nothing to compact (session too small)")]
    NothingToCompact,
    #[error("entry {0} is not on the current branch")]
    NotOnBranch(String),
    #[error(
        "entry {0} is outside the compaction window: an earlier compaction already summarised it"
    )]
    OutsideWindow(String),
    #[error("entry {id} cannot be the first kept entry: {reason}")]
    NotACutPoint { id: String, reason: &'static str },
}

/// The path indices of the compaction window and the previous compaction, if any.
struct Window<'a> {
    indices: Vec<usize>,
    previous: Option<&'a CompactionEntry>,
}

fn last_compaction<'a>(path: &[&'a Entry]) -> Option<(usize, &'a CompactionEntry)> {
    // The wire type is known without parsing the body; a line of that type whose body does
    // not parse is no compaction, hence the second look.
    path.iter()
        .enumerate()
        .rev()
        .filter(|(_, e)| e.type_name() == "compaction")
        .find_map(|(i, e)| match e.kind() {
            EntryKind::Compaction(c) => Some((i, c)),
            _ => None,
        })
}

/// The path indices a compaction may summarise or keep, in order.
///
/// [`CutMode::Fixed`]: the effective context sequence, i.e. the previous compaction's kept
/// region (from its `firstKeptEntryId`, compaction entries skipped) then the entries after it.
/// A `firstKeptEntryId` not on the path keeps nothing, as context rebuilding does.
/// [`CutMode::Parity`]: the entries after the previous compaction. (Compaction plans with
/// the window itself; the tests look at its indices.)
#[cfg(test)]
pub(crate) fn effective_window(path: &[&Entry], mode: CutMode) -> Vec<usize> {
    window(path, mode).indices
}

fn window<'a>(path: &[&'a Entry], mode: CutMode) -> Window<'a> {
    let Some((at, previous)) = last_compaction(path) else {
        return Window {
            indices: (0..path.len()).collect(),
            previous: None,
        };
    };
    let kept_start = match mode {
        CutMode::Parity => None,
        CutMode::Fixed => path[..at]
            .iter()
            .position(|e| e.id == previous.first_kept_entry_id),
    };
    let kept = kept_start
        .map(|k| k..at)
        .into_iter()
        .flatten()
        .filter(|&i| {
            path[i].type_name() != "compaction"
                || !matches!(path[i].kind(), EntryKind::Compaction(_))
        });
    Window {
        indices: kept.chain(at + 1..path.len()).collect(),
        previous: Some(previous),
    }
}

/// Usage of the newest assistant message on the path that was neither aborted nor an error.
fn last_usage<'a>(path: &[&'a Entry]) -> Option<&'a Usage> {
    path.iter().rev().find_map(|e| match e.message() {
        Some(AgentMessage::Assistant(a)) if !a.is_aborted() && !a.is_error() => a.usage.as_ref(),
        _ => None,
    })
}

/// Spec §4.6 step 4: turn a budget in real tokens into chars/4 units by the ratio of the
/// measured prompt to the estimate. Only for chars4: an exact counter already counts tokens,
/// and the ratio also absorbs the system prompt and tool schemas, which over-shrinks the
/// budget (spec §13 #6).
fn adjusted_keep(
    keep: u64,
    usage: Option<&Usage>,
    window: &[&Entry],
    counter: &dyn TokenCounter,
) -> u64 {
    let Some(usage) = usage.filter(|_| is_chars4(counter)) else {
        return keep;
    };
    let estimated: u64 = window
        .iter()
        .filter_map(|e| e.peek_message(false))
        .map(|m| counter.count_message(&m))
        .sum();
    if estimated == 0 {
        return keep;
    }
    let ratio = usage.prompt_tokens() as f64 / estimated as f64;
    if ratio.is_finite() && ratio > 1.0 {
        ((keep as f64 / ratio).floor() as u64).max(1)
    } else {
        keep
    }
}

/// Plans a compaction of `path` (root to leaf). `None` when the path is empty or already ends
/// with a compaction. The preparation's messages are read from a copy of the path's entries;
/// [`prepare_compaction_in`] shares a copy the caller holds.
pub fn prepare_compaction(
    path: &[&Entry],
    params: &CompactionParams,
    counter: &dyn TokenCounter,
) -> Option<CompactionPreparation> {
    prepare_compaction_in(&owned(path), params, counter)
}

/// [`prepare_compaction`] of a path the caller owns; the preparation reads its messages from it.
pub fn prepare_compaction_in(
    path: &Arc<[Entry]>,
    params: &CompactionParams,
    counter: &dyn TokenCounter,
) -> Option<CompactionPreparation> {
    let refs: Vec<&Entry> = path.iter().collect();
    plan(&refs, params, counter).map(|plan| plan.into_preparation(path))
}

fn owned(path: &[&Entry]) -> Arc<[Entry]> {
    path.iter().map(|&e| e.clone()).collect()
}

/// [`prepare_compaction`] without copying a message: where the cut falls and how many messages
/// each part holds. For reporting a plan (`compactd plan`), where copying the window's
/// messages was a sixth of the run on a 50 MB session.
pub fn summarize_compaction(
    path: &[&Entry],
    params: &CompactionParams,
    counter: &dyn TokenCounter,
) -> Option<CompactionSummary> {
    plan(path, params, counter).map(|plan| plan.summary())
}

/// A [`CompactionPreparation`] with counts in place of its messages.
#[derive(Clone, Debug, PartialEq)]
pub struct CompactionSummary {
    pub first_kept_entry_id: String,
    /// Indices are into the path, as in [`CompactionPreparation`].
    pub first_kept_entry_index: usize,
    pub is_split_turn: bool,
    pub turn_start_index: Option<usize>,
    pub messages_to_summarize: usize,
    pub turn_prefix_messages: usize,
    pub recent_messages: usize,
    pub tokens_before: u64,
    pub has_previous_summary: bool,
    pub file_ops: FileOps,
    pub keep_recent_tokens: u64,
}

/// The window of `path` and where to cut it; `None` when the path is empty or already ends
/// with a compaction.
fn plan<'a>(
    path: &[&'a Entry],
    params: &CompactionParams,
    counter: &dyn TokenCounter,
) -> Option<Plan<'a>> {
    let ends_compacted = matches!(path.last()?.kind(), EntryKind::Compaction(_));
    if ends_compacted && !(params.recompact && params.mode == CutMode::Fixed) {
        return None;
    }
    let window = window(path, params.mode);
    let entries: Vec<&Entry> = window.indices.iter().map(|&i| path[i]).collect();
    if entries.is_empty() {
        return None;
    }
    // Everything below reads every entry of the window: parsed at once when that stays a few
    // MB, else each parsed for each look and dropped (issue 35 item 7).
    if Entry::worth_keeping_parsed(&entries) {
        Entry::parse_all(&entries);
    }
    let usage = last_usage(path);
    let keep = adjusted_keep(params.keep_recent_tokens, usage, &entries, counter);
    let cut = find_cut_point(&entries, 0, entries.len(), keep, counter, params.mode);
    Plan::new(window, entries, cut, usage, keep, params.mode)
}

/// Checks that `first_kept_entry_id` can start the kept region of a compaction of `path`:
/// it is on the path, inside the effective window, and a valid cut point (not a tool result,
/// not between a tool call and its result), or metadata right before one.
pub fn validate_boundary(path: &[&Entry], first_kept_entry_id: &str) -> Result<(), BoundaryError> {
    boundary_cut(path, first_kept_entry_id).map(|_| ())
}

fn boundary_cut<'a>(
    path: &[&'a Entry],
    id: &str,
) -> Result<(Window<'a>, Vec<&'a Entry>, CutPoint), BoundaryError> {
    match path.last() {
        None => return Err(BoundaryError::NothingToCompact),
        Some(e) if matches!(e.kind(), EntryKind::Compaction(_)) => {
            return Err(BoundaryError::AlreadyCompacted);
        }
        Some(_) => {}
    }
    let Some(at) = path.iter().position(|e| e.id == id) else {
        return Err(BoundaryError::NotOnBranch(id.to_owned()));
    };
    let window = window(path, CutMode::Fixed);
    let Some(pos) = window.indices.iter().position(|&i| i == at) else {
        return Err(BoundaryError::OutsideWindow(id.to_owned()));
    };
    let entries: Vec<&Entry> = window.indices.iter().map(|&i| path[i]).collect();
    let cut = cut_point_at(&entries, 0, entries.len(), pos, CutMode::Fixed).map_err(|r| {
        let reason = match r {
            CutRejection::OutsideWindow => "it is outside the compaction window",
            CutRejection::NoMessageAfter => "no message follows it",
            CutRejection::ToolResult => {
                "it is a tool result, whose tool call would be summarised without it"
            }
            CutRejection::NotACutPoint => "its kind of entry cannot start the kept region",
            CutRejection::SplitsToolCall => {
                "a tool call before it has its result after it; cut before the tool call"
            }
        };
        BoundaryError::NotACutPoint {
            id: id.to_owned(),
            reason,
        }
    })?;
    Ok((window, entries, cut))
}

/// [`prepare_compaction_in`] with a caller-chosen first kept entry, checked by
/// [`validate_boundary`]. Always uses compactd's rules.
pub fn prepare_compaction_at(
    path: &Arc<[Entry]>,
    first_kept_entry_id: &str,
    params: &CompactionParams,
    counter: &dyn TokenCounter,
) -> Result<CompactionPreparation, BoundaryError> {
    let refs: Vec<&Entry> = path.iter().collect();
    let (window, entries, cut) = boundary_cut(&refs, first_kept_entry_id)?;
    if Entry::worth_keeping_parsed(&entries) {
        Entry::parse_all(&entries);
    }
    let usage = last_usage(&refs);
    // Not used for the cut, which the caller chose; reported for comparison.
    let keep = adjusted_keep(params.keep_recent_tokens, usage, &entries, counter);
    Plan::new(window, entries, cut, usage, keep, CutMode::Fixed)
        .map(|plan| plan.into_preparation(path))
        .ok_or(BoundaryError::NothingToCompact)
}

/// A cut of a window, its messages still in the entries.
struct Plan<'a> {
    window: Window<'a>,
    entries: Vec<&'a Entry>,
    cut: CutPoint,
    /// `entries[..history_end]` is summarised as history; `entries[prefix]` as the prefix of
    /// a split turn (empty unless split); `entries[first_kept..]` is kept.
    history_end: usize,
    prefix: std::ops::Range<usize>,
    usage: Option<&'a Usage>,
    keep: u64,
    mode: CutMode,
}

impl<'a> Plan<'a> {
    fn new(
        window: Window<'a>,
        entries: Vec<&'a Entry>,
        cut: CutPoint,
        usage: Option<&'a Usage>,
        keep: u64,
        mode: CutMode,
    ) -> Option<Self> {
        let first_kept = entries.get(cut.first_kept_entry_index)?;
        if first_kept.id.is_empty() {
            return None;
        }
        let split_start = cut.turn_start_index.filter(|_| cut.is_split_turn);
        let history_end = split_start.unwrap_or(cut.first_kept_entry_index);
        let prefix = split_start.map_or(0..0, |s| s..cut.first_kept_entry_index);
        Some(Plan {
            window,
            entries,
            cut,
            history_end,
            prefix,
            usage,
            keep,
            mode,
        })
    }

    fn first_kept(&self) -> &'a Entry {
        self.entries[self.cut.first_kept_entry_index]
    }

    /// The messages of `entries[range]`, borrowed where the entry holds one, with their ids.
    fn messages(
        &self,
        range: std::ops::Range<usize>,
    ) -> impl Iterator<Item = (Cow<'a, AgentMessage>, &'a Entry)> {
        self.entries[range]
            .iter()
            .filter_map(|&e| e.peek_message(false).map(|m| (m, e)))
    }

    /// What `summarized` (the history and the turn prefix) read and modified, carried on
    /// from the previous compaction.
    fn file_ops<M: std::ops::Deref<Target = AgentMessage>>(
        &self,
        summarized: impl Iterator<Item = M>,
    ) -> FileOps {
        let mut file_ops = FileOps::default();
        if let Some(previous) = self.window.previous {
            file_ops.add_compaction(previous);
        }
        for m in summarized {
            file_ops.add_message(&m);
        }
        file_ops
    }

    fn summary(&self) -> CompactionSummary {
        let count = |range| self.messages(range).count();
        CompactionSummary {
            first_kept_entry_id: self.first_kept().id.clone(),
            first_kept_entry_index: self.window.indices[self.cut.first_kept_entry_index],
            is_split_turn: self.cut.is_split_turn,
            turn_start_index: self.cut.turn_start_index.map(|i| self.window.indices[i]),
            messages_to_summarize: count(0..self.history_end),
            turn_prefix_messages: count(self.prefix.clone()),
            recent_messages: count(self.cut.first_kept_entry_index..self.entries.len()),
            tokens_before: self.usage.map_or(0, Usage::context_tokens),
            has_previous_summary: self.window.previous.is_some(),
            file_ops: self.file_ops(
                self.messages(0..self.history_end)
                    .chain(self.messages(self.prefix.clone()))
                    .map(|(m, _)| m),
            ),
            keep_recent_tokens: self.keep,
        }
    }

    /// The messages of `entries[range]` as a span of `path`, the path the window indexes:
    /// between two window entries the path holds only compaction entries, which yield none.
    fn span(&self, path: &Arc<[Entry]>, range: std::ops::Range<usize>) -> EntrySpan {
        let indices = &self.window.indices[range];
        match (indices.first(), indices.last()) {
            (Some(&first), Some(&last)) => EntrySpan::new(Arc::clone(path), first..last + 1),
            _ => EntrySpan::empty(),
        }
    }

    fn into_preparation(self, path: &Arc<[Entry]>) -> CompactionPreparation {
        let first_kept = self.cut.first_kept_entry_index;
        let file_ops = self.file_ops(self.messages(0..first_kept).map(|(m, _)| m));
        // The ledger block is re-rendered by each compaction; the summarizer gets the prose.
        let previous_summary = self
            .window
            .previous
            .map(|c| super::ledger::strip_block(&c.summary));
        let messages_to_summarize = self.span(path, 0..self.history_end);
        let reuse_previous_summary = self.mode == CutMode::Fixed
            && self.cut.is_split_turn
            && messages_to_summarize.is_empty()
            && previous_summary.is_some();
        CompactionPreparation {
            first_kept_entry_id: self.first_kept().id.clone(),
            first_kept_entry_index: self.window.indices[first_kept],
            file_ops,
            messages_to_summarize,
            turn_prefix_messages: self.span(path, self.prefix.clone()),
            recent_messages: self.span(path, first_kept..self.entries.len()),
            summarized: self.span(path, 0..first_kept),
            is_split_turn: self.cut.is_split_turn,
            turn_start_index: self.cut.turn_start_index.map(|i| self.window.indices[i]),
            tokens_before: self.usage.map_or(0, Usage::context_tokens),
            previous_summary,
            reuse_previous_summary,
            keep_recent_tokens: self.keep,
        }
    }
}

#[cfg(test)]
mod tests;
