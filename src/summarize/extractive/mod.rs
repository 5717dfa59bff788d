//! The extractive summarizer: offline, deterministic, no network.
//!
//! It builds the same structured summary the prompts ask a model for (Goal, Constraints &
//! Preferences, Progress, Key Decisions, Next Steps, Critical Context) from the conversation
//! itself, and it should read like a colleague's handover note. Only four sources feed it, so
//! that what it writes reads as a record of the work and never as a dump of tool output:
//!
//! * the user's own words: the tasks they asked for (the first, the latest, and changes of
//!   direction; never a slash command or an "ok") and their standing instructions ("must",
//!   "never", "always", an imperative "don't"; never a question or narration),
//! * the assistant's own plain statements of completion, decisions, findings and plans (no
//!   hedging, no narration, no table row, no lead-in without its list), and a pending question,
//! * tool calls, by name and target (path, command or search pattern), and what came of them:
//!   files changed per task, checks passed (with the test count), commits, tags and pushes,
//! * the error line of a call that really failed (a search with no match or an aborted command
//!   did not; `compaction::facts` decides, as for the retention guard).
//!
//! The bodies of successful tool results (file contents, search hits, logs) are never copied.
//! Every section is short and holds what the next turn needs first (the question to answer
//! leads Next Steps); no item is cut inside a sentence or inline code.
//!
//! With a previous summary (ours or a model's, whose own headings such as "Completed Work" or
//! "User Preferences" are mapped) it parses that summary's sections and merges item by item:
//! old items stay, finished work moves from In Progress to Done, failures that have since
//! succeeded leave Blocked, a newer question or request replaces the older one, and every
//! section stays within its cap. It is compactd's default when no model is configured and the
//! last rung when every model fails, so it must never fail, always end quickly (linear in its
//! input) and stay bounded in size.
//!
//! What is kept exactly: a question the assistant left for the user and the latest user message
//! (both fenced and verbatim, up to [`MAX_VERBATIM_CHARS`]), file paths, commands and error
//! lines; so the retention guard, which checks for these, has nothing to add.

mod build;
mod cues;
mod facts;
mod render;
mod sections;
#[cfg(test)]
mod tests;
mod text;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::{DeltaSink, Purpose, SummarizeError, Summarizer, SummaryOutput, SummaryRequest};
use facts::Facts;
use render::{branch, history, short, turn_prefix};

/// Longest single-line item, in characters.
pub const MAX_ITEM_CHARS: usize = 300;
/// Longest verbatim block (pending question, latest user message, carried-over item).
pub const MAX_VERBATIM_CHARS: usize = 2_000;
/// Most file paths listed per kind.
pub const MAX_FILES: usize = 30;

// Each section is short, and holds what the next turn needs first.
/// Goals: the original goal, the latest changes of direction, the current request.
const MAX_GOALS: usize = 4;
/// Constraints: the first three rules and the latest five (as many as the retention guard
/// checks for).
const MAX_CONSTRAINTS: usize = 8;
const MAX_DONE: usize = 8;
const MAX_IN_PROGRESS: usize = 3;
const MAX_BLOCKED: usize = 3;
const MAX_DECISIONS: usize = 6;
const MAX_NEXT_STEPS: usize = 5;
/// Findings ("the cause is …") kept in Critical Context (the latest ones).
const MAX_FINDINGS: usize = 3;
/// Exact errors kept in Critical Context: as many as the retention guard keeps of the last
/// turn.
const MAX_ERRORS: usize = crate::compaction::facts::LATEST_KEPT;
/// Notes, and Critical Context items of other kinds.
const MAX_NOTES: usize = 8;
/// Most targets listed for one grouped read-only action (`read a, b, c`).
const MAX_ACTION_TARGETS: usize = 8;
/// Most actions listed in a turn prefix: the first few and the latest.
const MAX_ACTIONS_HEAD: usize = 4;
const MAX_ACTIONS_TAIL: usize = 10;
/// Longest condensed request (Goal, In Progress), in characters.
const MAX_GOAL_CHARS: usize = 240;
/// Longest sentence of the short summary, in characters.
const MAX_SHORT_SENTENCE_CHARS: usize = 240;

/// The note that tells a reader this summary was not written by a model.
const EXTRACTIVE_NOTE: &str = "This summary was extracted mechanically from the conversation; no summarization model was used.";

const PENDING_QUESTION: &str = "Question awaiting the user's answer, verbatim:";
const LATEST_MESSAGE: &str = "Latest user message, verbatim:";
/// Follows a latest message that is only a short reply ("ok", "yes, do it"): what it answers.
const REPLY_TO: &str = "It replies to the assistant's message, which ended:";
/// How summaries written before this version labelled the latest message.
const LATEST_REQUEST_V1: &str = "Latest user request, verbatim:";
const CURRENT_REQUEST: &str = "Current request:";
const CHANGED_DIRECTION: &str = "Changed direction:";
/// The goal when no user message reads as a request for work: the first one, marked.
const NO_TASK_RECOGNISED: &str = "No request for work was recognised; the user's first message:";
/// Marks the first task of a later span, after the goals of the summary so far.
const THEN: &str = "Then:";
/// Marks work an older summary had in progress whose outcome later messages do not tell.
const EARLIER_WORK: &str = "Earlier in progress, outcome not recorded since:";
/// Longest code block of a model's summary carried into the notes, in lines.
const MAX_CARRIED_BLOCK_LINES: usize = 12;
const FILES_MODIFIED: &str = "Files modified:";
const FILES_READ: &str = "Files read:";
const ERROR_FROM: &str = "Error from ";
const FINDING: &str = "Finding:";
const ANSWER_QUESTION: &str = "Get the user's answer to:";
/// Marks a turn prefix's action that created a file, so a later short summary knows it.
const NEW_FILE: &str = " (new file)";
/// The failure key of a model request that ended in an error.
const MODEL_KEY: &str = "(model)";

/// The offline summarizer. Stateless; see the module docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExtractiveSummarizer;

impl ExtractiveSummarizer {
    pub fn new() -> Self {
        ExtractiveSummarizer
    }

    /// The summary text for `req`, by purpose. Pure and deterministic.
    pub fn summarize_text(&self, req: &SummaryRequest) -> String {
        let facts = Facts::extract(&req.messages);
        match req.purpose {
            Purpose::History => history(req, &facts),
            Purpose::Branch => branch(req, &facts),
            Purpose::TurnPrefix => turn_prefix(req, &facts),
            Purpose::Short => short(req, &facts),
        }
    }
}

impl Summarizer for ExtractiveSummarizer {
    fn id(&self) -> String {
        "extractive".to_owned()
    }

    fn context_window(&self) -> u64 {
        u64::MAX
    }

    fn reads_prompt(&self) -> bool {
        false
    }

    fn summarize<'a>(
        &'a self,
        req: &'a SummaryRequest,
        cancel: CancellationToken,
        on_delta: DeltaSink<'a>,
    ) -> BoxFuture<'a, Result<SummaryOutput, SummarizeError>> {
        Box::pin(async move {
            if cancel.is_cancelled() {
                return Err(SummarizeError::Cancelled);
            }
            let text = self.summarize_text(req);
            on_delta(&text);
            Ok(SummaryOutput {
                text,
                short_summary: None,
                usage: None,
                model: self.id(),
            })
        })
    }
}
