//! The extractive summarizer: offline, deterministic, no network.
//!
//! It builds the same structured summary the prompts ask a model for (Goal, Constraints &
//! Preferences, Progress, Key Decisions, Next Steps, Critical Context) from the conversation
//! itself. Only four sources feed it, so that what it writes reads as a record of the work and
//! never as a dump of tool output:
//!
//! * the user's own words (requests and rule-like sentences),
//! * the assistant's own text (statements of completion, decisions, findings, plans, a pending
//!   question),
//! * tool calls, by name and target (path, command or search pattern), and whether they
//!   succeeded (with the pass count of a test run),
//! * the first error line of a failed tool result or command.
//!
//! The bodies of successful tool results (file contents, search hits, logs) are never copied.
//!
//! With a previous summary (ours or a model's) it parses that summary's sections and merges item
//! by item: old items stay, finished work moves from In Progress to Done, failures that have
//! since succeeded leave Blocked, a newer question or request replaces the older one, and every
//! section stays within its cap. It is compactd's default when no model is configured and the
//! last rung when every model fails, so it must never fail, always end quickly (linear in its
//! input) and stay bounded in size.
//!
//! What is kept exactly: a question the assistant left for the user and the latest user request
//! (both fenced and verbatim, up to [`MAX_VERBATIM_CHARS`]), file paths, commands and error
//! lines.

mod build;
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

/// Most items kept in one section.
pub const MAX_ITEMS: usize = 12;
/// Longest single-line item, in characters.
pub const MAX_ITEM_CHARS: usize = 300;
/// Longest verbatim block (pending question, latest request, carried-over item).
pub const MAX_VERBATIM_CHARS: usize = 2_000;
/// Most file paths listed per kind.
pub const MAX_FILES: usize = 30;
/// Most goal items: the original goal and the latest requests.
const MAX_GOALS: usize = 6;
/// Most exact error messages kept in Critical Context (the latest ones).
const MAX_ERRORS: usize = 4;
/// Most findings ("the cause is …") kept in Critical Context (the latest ones).
const MAX_FINDINGS: usize = 4;
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
const LATEST_REQUEST: &str = "Latest user request, verbatim:";
const FILES_MODIFIED: &str = "Files modified:";
const FILES_READ: &str = "Files read:";
const ERROR_FROM: &str = "Error from ";
const FINDING: &str = "Finding:";
const STARTED_NO_RESULT: &str = "(started, no result yet)";
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
