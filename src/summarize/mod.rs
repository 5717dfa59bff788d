//! Prompts and summarizers: everything that turns a conversation into summary text.
//!
//! * [`write_summary`] ([`ladder`]): the one loop that decides which summarizer writes a
//!   summary. The engine gives it a [`SummaryJob`] and the operation's [`SummarizerSet`] and
//!   gets one answer: the summary and its [`SummaryReport`] (which rung wrote it, what its
//!   checks found, why the rungs before it gave up). Each rung's input is fitted to its window
//!   ([`fit`]), and its attempts are retried with back-off, queued to its server's parallelism
//!   ([`queue`]), checked ([`check`]) and counted by the operation's
//!   [`Breaker`](breaker::Breaker) ([`retry`]).
//! * [`candidates`]: the [`SummarizerSet`] built from settings (spec §4.15, DESIGN §5).
//! * [`retention`]: the facts a written summary must carry, appended when it does not.
//! * [`prompts`]: the prompt templates (embedded, overridable per file) and the pure builders
//!   that lay out each request's prompt text and output budget (spec §4.10, §4.12, §6.3).
//! * One [`Summarizer`] trait with several kinds: [`openai::OpenAiSummarizer`] (chat
//!   completions), [`anthropic::AnthropicSummarizer`] (Messages API),
//!   [`remote::RemoteSummarizer`] (`compaction.remoteEndpoint`, spec §4.14),
//!   [`client::ClientSummarizer`] (the RPC client answers) and
//!   [`extractive::ExtractiveSummarizer`] (offline and deterministic, the default and the last
//!   rung). [`discover`] reads the window, output limit and parallelism a local server reports.
//!
//! Every call is cancellable: when the token fires, the in-flight HTTP request is dropped (its
//! connection closed) and [`SummarizeError::Cancelled`] comes back at once.

pub(crate) mod anthropic;
pub(crate) mod breaker;
pub(crate) mod candidates;
pub(crate) mod check;
pub(crate) mod client;
pub(crate) mod discover;
mod error;
pub(crate) mod extractive;
pub(crate) mod fit;
mod grounded;
pub(crate) mod http;
pub(crate) mod job;
pub(crate) mod ladder;
pub(crate) mod openai;
mod overflow;
pub(crate) mod prompts;
pub(crate) mod queue;
pub(crate) mod remote;
pub(crate) mod retention;
pub(crate) mod retry;

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::session::{LlmMessages, Usage};
use queue::RequestQueue;

pub use candidates::{
    CandidateError, SummarizerChoice, summarizers_for_choice, summarizers_from_settings,
};
pub use error::SummarizeError;
pub use http::check_url;
pub use job::{PromptBuilder, SummaryJob};
pub use ladder::{
    SummarizerSet, SummaryObserver, SummaryReport, SummaryState, SummaryStatus, record_reports,
    write_summary,
};
pub use overflow::is_overflow_message;
pub use prompts::{
    BRANCH_MAX_TOKENS, HistoryPrompt, Prompts, branch_summary_text, history_max_tokens,
    short_summary_max_tokens, turn_prefix_max_tokens,
};
pub use retry::RetryPolicy;

/// Which summary a request asks for; it selects the prompt and the extractive layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Purpose {
    /// The history summary of a compaction (first or update).
    History,
    /// The summary of the kept-out prefix of a split turn.
    TurnPrefix,
    /// The 2-3 sentence display summary of a compaction.
    Short,
    /// The summary of a branch left by tree navigation.
    Branch,
}

impl Purpose {
    /// A stable lower-case name, for events and logs.
    pub fn name(self) -> &'static str {
        match self {
            Purpose::History => "history",
            Purpose::TurnPrefix => "turnPrefix",
            Purpose::Short => "short",
            Purpose::Branch => "branch",
        }
    }
}

/// One summarization request, already laid out: model-backed summarizers send
/// `system_prompt` + `prompt`; the extractive one reads `messages` and the structured fields.
#[derive(Debug, Clone)]
pub struct SummaryRequest {
    pub purpose: Purpose,
    pub system_prompt: String,
    /// The full user prompt (spec §4.10 layout), from the builders in [`prompts`].
    pub prompt: String,
    /// Output token budget of this call.
    pub max_tokens: u32,
    /// Whether the call may use extended reasoning if the model supports it and the budget
    /// leaves room; never forced.
    pub reasoning: bool,
    /// The LLM-ready messages being summarised, shared (a request is cloned per rung and per
    /// output limit, and a single chunk is the job's whole span: a copy of a million messages
    /// is about ten times their file).
    pub messages: LlmMessages,
    /// The previous summary (history update) or, for [`Purpose::Short`], the new summary.
    pub previous_summary: Option<String>,
    pub custom_instructions: Option<String>,
    pub read_files: Vec<String>,
    pub modified_files: Vec<String>,
    /// How much detail to keep, as a factor of the usual (`compaction.detail`: 0.5 brief,
    /// 2 thorough; or a request's `targetTokens` over the usual budget). Models get it through
    /// `max_tokens` and the prompt's length line; the extractive summarizer sizes its sections
    /// with it.
    pub detail_scale: f64,
}

impl SummaryRequest {
    /// A request with the given purpose and prompts and nothing else set.
    pub fn new(
        purpose: Purpose,
        system_prompt: impl Into<String>,
        prompt: impl Into<String>,
        max_tokens: u32,
    ) -> Self {
        SummaryRequest {
            purpose,
            system_prompt: system_prompt.into(),
            prompt: prompt.into(),
            max_tokens,
            reasoning: false,
            messages: LlmMessages::default(),
            previous_summary: None,
            custom_instructions: None,
            read_files: Vec::new(),
            modified_files: Vec::new(),
            detail_scale: 1.0,
        }
    }

    /// This request for a summarizer that answers with at most `limit` tokens: the output
    /// budget lowered to it, and the length the answer may have said in the prompt, so a model
    /// plans an answer that ends instead of being cut.
    pub fn for_output_limit(&self, limit: Option<u32>) -> SummaryRequest {
        let max_tokens = limit
            .map_or(self.max_tokens, |l| l.min(self.max_tokens))
            .max(1);
        let mut req = self.clone();
        req.max_tokens = max_tokens;
        req.prompt
            .push_str(&prompts::length_instruction(self.purpose, max_tokens));
        req
    }
}

/// What a summarizer produced.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryOutput {
    /// The summary text, non-empty and complete.
    pub text: String,
    /// A short summary the summarizer produced alongside (the remote endpoint's
    /// `shortSummary`), which spares the separate short-summary call.
    pub short_summary: Option<String>,
    pub usage: Option<Usage>,
    /// The summarizer's id (e.g. `openai/gpt-4o`, `extractive`).
    pub model: String,
}

impl SummaryOutput {
    /// The text of an answer cut at the output limit, from `model`, before its checks.
    pub fn cut(text: String, model: &str) -> Self {
        SummaryOutput {
            text,
            short_summary: None,
            usage: None,
            model: model.to_owned(),
        }
    }
}

/// Streamed text deltas go here as they arrive; a retried attempt starts over (see
/// [`SummaryObserver::restart`]).
pub type DeltaSink<'a> = &'a (dyn Fn(&str) + Send + Sync);

/// A way to turn a [`SummaryRequest`] into summary text.
pub trait Summarizer: Send + Sync {
    /// `provider/model` for model-backed kinds, or the kind's name (`extractive`, `remote`,
    /// `client`).
    fn id(&self) -> String;

    /// The summarizer's input window in tokens, used to bound its input (deviation 8).
    fn context_window(&self) -> u64;

    /// The most tokens one answer may have (`maxOutputTokens`, or what the server reports);
    /// `None` when the summarizer has no limit of its own (it then writes what it is asked).
    fn max_output_tokens(&self) -> Option<u32> {
        None
    }

    /// The queue of requests to this summarizer's server, when requests to it are limited to
    /// its parallelism.
    fn queue(&self) -> Option<Arc<RequestQueue>> {
        None
    }

    /// Reads the window and output limit from the server, where it says them, before the
    /// first request of an operation; afterwards [`Summarizer::context_window`] and
    /// [`Summarizer::max_output_tokens`] include what it said. Failures are ignored: the
    /// configured values stay.
    fn discover_limits<'a>(&'a self, _cancel: &'a CancellationToken) -> BoxFuture<'a, ()> {
        Box::pin(std::future::ready(()))
    }

    /// Whether it reads [`SummaryRequest::prompt`]. The extractive summarizer reads the
    /// messages alone: the transcript of a huge span is not written for it (issue 35 item 7).
    fn reads_prompt(&self) -> bool {
        true
    }

    /// Produces the summary. When `cancel` fires, the work stops, any HTTP request is dropped
    /// and the result is [`SummarizeError::Cancelled`].
    fn summarize<'a>(
        &'a self,
        req: &'a SummaryRequest,
        cancel: CancellationToken,
        on_delta: DeltaSink<'a>,
    ) -> BoxFuture<'a, Result<SummaryOutput, SummarizeError>>;
}

/// Runs `fut` unless `cancel` fires first; on cancellation `fut` is dropped, which closes any
/// connection it holds.
pub(crate) async fn cancellable<T>(
    cancel: &CancellationToken,
    fut: impl Future<Output = Result<T, SummarizeError>>,
) -> Result<T, SummarizeError> {
    tokio::select! {
        biased;
        _ = cancel.cancelled() => Err(SummarizeError::Cancelled),
        result = fut => result,
    }
}
