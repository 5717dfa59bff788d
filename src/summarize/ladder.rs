//! The one loop that decides which summarizer writes a summary (spec §4.15, DESIGN §3
//! deviations 8 and 14, DESIGN §5): the engine hands [`write_summary`] a [`SummaryJob`] and a
//! [`SummarizerSet`] and gets one answer, the summary with its [`SummaryReport`].
//!
//! The rungs are the set's candidates in order, then its fallback (the extractive summarizer).
//! Each rung is planned for its own limits ([`super::fit`]): its window (as the server reports
//! it, where it does) minus its own output limit (`maxOutputTokens`, never the agent's
//! `reserveTokens`) and a margin, measured with the session's token counter scaled by what the
//! server's own counts have shown. The planned requests (one, or the chunks of an iterative
//! fold) go through [`try_summarizer`], which retries, checks answers and counts failures in
//! the operation's [`Breaker`]. If the server still refuses a prompt as too long (its tokenizer
//! is not ours, its window smaller than configured), the input is planned again smaller, to
//! the window and by the ratio the server's figures give (or half), and tried once more before
//! the next rung; that window and ratio hold for the rest of the operation, so its other
//! requests are not refused again. A rung that fails (after its retries, or with its breaker
//! open) hands the whole summary to the next rung; the report says which rung wrote it and why
//! the ones before did not.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::compaction::serialize_messages;
use crate::session::LlmMessages;
use crate::tokens::TokenCounter;

use super::breaker::Breaker;
use super::error::overflow_figures;
use super::fit::{input_budget, plan_chunks};
use super::job::SummaryJob;
use super::prompts::length_instruction;
use super::retry::{AttemptContext, AttemptEvent, AttemptOutcome, Rung, try_summarizer};
use super::{Purpose, RetryPolicy, SummarizeError, Summarizer, SummaryOutput, SummaryRequest};

/// The error when there is nothing to try (spec §9).
pub const NO_AVAILABLE_MODEL: &str = "Compaction failed: no available model";

/// A smaller plan after a refusal aims this far under what the server said fits.
const SHRINK_HEADROOM: f64 = 0.9;

/// The summarizers a session uses, in the order they are tried.
#[derive(Clone, Default)]
pub struct SummarizerSet {
    pub candidates: Vec<Arc<dyn Summarizer>>,
    /// The extractive summarizer, tried when every candidate failed.
    pub fallback: Option<Arc<dyn Summarizer>>,
    pub retry: RetryPolicy,
    /// The breaker and retry budget of the operation using this set; see
    /// [`SummarizerSet::for_operation`].
    pub breaker: Arc<Breaker>,
}

impl std::fmt::Debug for SummarizerSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SummarizerSet")
            .field(
                "candidates",
                &self.candidates.iter().map(|s| s.id()).collect::<Vec<_>>(),
            )
            .field("fallback", &self.fallback.as_ref().map(|s| s.id()))
            .finish_non_exhaustive()
    }
}

impl SummarizerSet {
    /// The same summarizers with a fresh breaker and retry budget: one per compaction or
    /// branch summary, shared by all its requests.
    pub fn for_operation(&self) -> Self {
        SummarizerSet {
            breaker: Arc::new(Breaker::new(self.retry.max_retries)),
            ..self.clone()
        }
    }

    /// Ids of the candidates then the fallback, in order.
    pub fn ids(&self) -> Vec<String> {
        self.rungs().map(|rung| rung.summarizer.id()).collect()
    }

    /// The rungs in the order they are tried: the candidates, whose answers are checked,
    /// then the fallback, whose answers are not.
    fn rungs(&self) -> impl ExactSizeIterator<Item = Rung<'_>> {
        let candidates = self.candidates.iter().map(|c| (c, true));
        let fallback = self.fallback.iter().map(|f| (f, false));
        let all: Vec<_> = candidates.chain(fallback).collect();
        let count = all.len();
        all.into_iter()
            .enumerate()
            .map(move |(index, (summarizer, checked))| Rung {
                summarizer: summarizer.as_ref(),
                has_next: index + 1 < count,
                checked,
            })
    }
}

/// What a summary reports while it is written: streamed text, restarts and where it stands.
/// The engine's operation observer is one; the daemon turns it into `$/progress` and
/// `session/compactionDelta`, the command line into a progress line on stderr.
pub trait SummaryObserver: Send + Sync {
    /// Streamed summary text. A retried attempt starts its part over (the observer receives
    /// the new attempt's text from the beginning, after [`SummaryObserver::restart`]).
    fn delta(&self, part: Purpose, text: &str);
    /// The text streamed so far for `part` is void: an attempt failed and another (a retry,
    /// the next summarizer, the next chunk of a long input) starts from the beginning.
    fn restart(&self, _part: Purpose) {}
    /// Where a summary stands: queued, waiting for the model, retrying; which chunk of how
    /// many.
    fn status(&self, _part: Purpose, _status: &SummaryStatus) {}
}

/// Where one summary stands, reported when it changes (not for every streamed token).
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryStatus {
    /// The summarizer working on it.
    pub summarizer: String,
    /// Which request of the summary (1-based) and how many there are: more than one when the
    /// input was split into chunks for a small window.
    pub chunk: usize,
    pub chunks: usize,
    pub state: SummaryState,
}

/// What a summary waits for.
#[derive(Debug, Clone, PartialEq)]
pub enum SummaryState {
    /// The server's slots are busy with other requests of compactd's; `ahead` wait before it.
    Queued { ahead: usize },
    /// The request is sent and the model has not answered yet (a local model may read the
    /// prompt for minutes); streamed text ends this state.
    WaitingForModel,
    /// The attempt failed; the next one starts after `after`.
    Retrying { after: Duration, error: String },
}

impl SummaryStatus {
    /// A line for people: `waiting for the model local/gemma (chunk 2 of 5)`.
    pub fn describe(&self) -> String {
        let what = match &self.state {
            SummaryState::Queued { ahead: 0 } => {
                format!("queued for {} while its server is busy", self.summarizer)
            }
            SummaryState::Queued { ahead } => format!(
                "queued for {} behind {ahead} other request{}",
                self.summarizer,
                if *ahead == 1 { "" } else { "s" }
            ),
            SummaryState::WaitingForModel => format!("waiting for the model {}", self.summarizer),
            SummaryState::Retrying { after, .. } => format!(
                "{} failed; retrying in {:.1} s",
                self.summarizer,
                after.as_secs_f64()
            ),
        };
        if self.chunks > 1 {
            format!("{what} (chunk {} of {})", self.chunk, self.chunks)
        } else {
            what
        }
    }
}

/// Which summarizer wrote a summary, and why the rungs before it did not.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SummaryReport {
    /// The summarizer's id (`local/qwen3-8b`, `extractive`, ...).
    pub summarizer: String,
    /// What the answer checks found (`checks passed`, `cut at the output limit; 2 complete
    /// sections kept, checks passed`); `None` for the extractive rung, which is not checked.
    pub checks: Option<String>,
    /// Requests the summary took on that rung (more than one when the input was folded).
    pub chunks: usize,
    /// The earlier rungs, in order, with the reason each gave up.
    pub failures: Vec<RungFailure>,
}

/// A rung that did not write the summary.
#[derive(Debug, Clone, PartialEq)]
pub struct RungFailure {
    pub summarizer: String,
    pub reason: String,
}

impl SummaryReport {
    /// The report as stored in `details.summarizers` and sent to clients:
    /// `{"part", "summarizer", "checks"?, "chunks", "failures": [{"summarizer", "reason"}]}`.
    pub fn details_json(&self, part: Purpose) -> Value {
        let mut value = serde_json::json!({
            "part": part.name(),
            "summarizer": self.summarizer,
            "chunks": self.chunks,
            "failures": self.failures.iter().map(|f| serde_json::json!({
                "summarizer": f.summarizer,
                "reason": f.reason,
            })).collect::<Vec<_>>(),
        });
        if let Some(checks) = &self.checks {
            value["checks"] = Value::from(checks.as_str());
        }
        value
    }
}

/// Records which summarizer wrote each part and why earlier rungs failed in `details` (an
/// object) as `summarizers`, see [`SummaryReport::details_json`].
pub fn record_reports(details: &mut Value, reports: &[(Purpose, SummaryReport)]) {
    if let Value::Object(map) = details
        && !reports.is_empty()
    {
        let list = reports
            .iter()
            .map(|(part, report)| report.details_json(*part))
            .collect();
        map.insert("summarizers".to_owned(), Value::Array(list));
    }
}

/// A summary and its report.
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    pub output: SummaryOutput,
    pub report: SummaryReport,
}

/// Writes `job`'s summary with the first rung of `set` that succeeds (see the module doc);
/// streamed text, restarts and statuses go to `observer` under the job's purpose. The breaker
/// and retry budget are `set`'s: one per operation ([`SummarizerSet::for_operation`]).
///
/// Errors: [`SummarizeError::Cancelled`] as soon as `cancel` fires; otherwise, when every rung
/// failed, an overflow if any rung overflowed (the input must shrink), else the last error;
/// `Compaction failed: no available model` when there was nothing to try.
pub async fn write_summary(
    job: &SummaryJob<'_>,
    set: &SummarizerSet,
    counter: &dyn TokenCounter,
    cancel: &CancellationToken,
    observer: &dyn SummaryObserver,
) -> Result<Written, SummarizeError> {
    let run = RungRun {
        job,
        set,
        counter,
        cancel,
        observer,
    };
    let mut failures = Vec::new();
    let mut overflow = None;
    let mut last_error = None;
    for rung in set.rungs() {
        let id = rung.summarizer.id();
        match run.summarize(rung).await {
            Ok((output, checks, chunks)) => {
                let report = SummaryReport {
                    summarizer: id,
                    checks,
                    chunks,
                    failures,
                };
                return Ok(Written { output, report });
            }
            Err(SummarizeError::Cancelled) => return Err(SummarizeError::Cancelled),
            Err(error) => {
                tracing::warn!(summarizer = %id, "summarizer gave up: {error}");
                failures.push(RungFailure {
                    summarizer: id,
                    reason: error.reason(),
                });
                if error.is_overflow() {
                    overflow = Some(error.clone());
                }
                last_error = Some(error);
            }
        }
    }
    Err(overflow
        .or(last_error)
        .unwrap_or_else(|| SummarizeError::Other(NO_AVAILABLE_MODEL.to_owned())))
}

/// One summary on the rungs of one set.
struct RungRun<'r, 'a> {
    job: &'r SummaryJob<'a>,
    set: &'r SummarizerSet,
    counter: &'r dyn TokenCounter,
    cancel: &'r CancellationToken,
    observer: &'r dyn SummaryObserver,
}

impl RungRun<'_, '_> {
    /// The summary written by `rung`, with its checks and the number of requests; a refusal as
    /// too long is planned again smaller and tried once more.
    async fn summarize(
        &self,
        rung: Rung<'_>,
    ) -> Result<(SummaryOutput, Option<String>, usize), SummarizeError> {
        let summarizer = rung.summarizer;
        let id = summarizer.id();
        let breaker = &self.set.breaker;
        if let Some(reason) = breaker.open_reason(&id) {
            return Err(SummarizeError::Skipped(reason));
        }
        summarizer.discover_limits(self.cancel).await;
        if self.cancel.is_cancelled() {
            return Err(SummarizeError::Cancelled);
        }
        let max_output = if rung.checked {
            summarizer
                .max_output_tokens()
                .map_or(self.job.max_tokens, |l| l.min(self.job.max_tokens))
        } else {
            self.job.max_tokens
        };
        // A window a refusal said earlier in this operation holds for every later request.
        let window = breaker
            .window(&id)
            .map_or(summarizer.context_window(), |w| {
                w.min(summarizer.context_window())
            });
        let mut budget = input_budget(window, max_output);
        let mut shrunk = false;
        loop {
            // Planned in the server's tokens: ours scaled by the ratio its refusals showed.
            let ratio = breaker.token_ratio(&id);
            let planned = if budget == u64::MAX {
                budget
            } else {
                (budget as f64 / ratio) as u64
            };
            let chunks = plan_chunks(self.job, planned, max_output, self.counter)?;
            match self.run_chunks(rung, &chunks).await {
                Err(e) if e.is_overflow() && !shrunk && budget != u64::MAX => {
                    shrunk = true;
                    budget = self.smaller_budget(&id, &e, budget, max_output, &chunks);
                    tracing::warn!(summarizer = %id, error = %e, budget,
                        served_window = ?breaker.window(&id), token_ratio = breaker.token_ratio(&id),
                        "the server refused the prompt as too long; planning it smaller");
                }
                Err(e) => return Err(e),
                Ok((output, checks)) => return Ok((output, checks, chunks.len())),
            }
        }
    }

    /// The budget (in the server's tokens) after a refusal, always below the size of the
    /// refused prompt: when the server said its prompt count and window, the ratio of its count
    /// to ours and its window are learned for the rest of the operation and the budget is what
    /// its window leaves after the answer, with headroom (the prompt's instructions are part of
    /// the budget: [`plan_chunks`] gives the conversation what they leave); otherwise half.
    fn smaller_budget(
        &self,
        id: &str,
        error: &SummarizeError,
        budget: u64,
        max_output: u32,
        chunks: &[LlmMessages],
    ) -> u64 {
        // Our count of the largest request sent, as it was sent (the length line included),
        // to compare with the server's.
        let instructions = self.counter.count_text(self.job.system_prompt)
            + self
                .counter
                .count_text(&length_instruction(self.job.purpose, max_output));
        let ours = chunks
            .iter()
            .map(|chunk| {
                let conversation = serialize_messages(chunk.iter());
                instructions
                    + self.counter.count_text(&(self.job.build_prompt)(
                        &conversation,
                        self.job.previous_summary.as_deref(),
                    ))
            })
            .max()
            .unwrap_or(0);
        let breaker = &self.set.breaker;
        let Some((served_prompt, served_window)) = overflow_figures(&error.to_string()) else {
            let sent = (ours as f64 * breaker.token_ratio(id)) as u64;
            return (budget.min(sent) / 2).max(1);
        };
        if ours > 0 {
            breaker.learn_token_ratio(id, served_prompt as f64 / ours as f64);
        }
        breaker.learn_window(id, served_window);
        let room = input_budget(served_window, max_output)
            .min(budget)
            .min(served_prompt);
        ((room as f64 * SHRINK_HEADROOM) as u64).max(1)
    }

    /// The chunks, folded, each through [`try_summarizer`]; the last chunk's answer and its
    /// checks.
    async fn run_chunks(
        &self,
        rung: Rung<'_>,
        chunks: &[LlmMessages],
    ) -> Result<(SummaryOutput, Option<String>), SummarizeError> {
        let part = self.job.purpose;
        let id = rung.summarizer.id();
        let mut previous = self.job.previous_summary.clone();
        let mut last = None;
        for (index, chunk) in chunks.iter().enumerate() {
            let status = |state| {
                self.observer.status(
                    part,
                    &SummaryStatus {
                        summarizer: id.clone(),
                        chunk: index + 1,
                        chunks: chunks.len(),
                        state,
                    },
                )
            };
            let on_attempt = |event: AttemptEvent| {
                log_attempt(&event);
                match event.outcome {
                    AttemptOutcome::Started => {
                        self.observer.restart(part);
                        // The extractive rung writes at once: there is no model to wait for.
                        if rung.checked {
                            status(SummaryState::WaitingForModel);
                        }
                    }
                    AttemptOutcome::Queued { ahead } => status(SummaryState::Queued { ahead }),
                    AttemptOutcome::Retrying { sleep, error, .. } => {
                        status(SummaryState::Retrying {
                            after: sleep,
                            error,
                        })
                    }
                    _ => {}
                }
            };
            let on_delta = |text: &str| self.observer.delta(part, text);
            let ctx = AttemptContext {
                policy: &self.set.retry,
                breaker: &self.set.breaker,
                cancel: self.cancel,
                on_delta: &on_delta,
                on_attempt: &on_attempt,
            };
            let req = self.request(chunk, previous.clone(), rung.summarizer.reads_prompt());
            let kept = try_summarizer(rung, &req, &ctx).await?;
            previous = Some(kept.output.text.clone());
            last = Some(kept);
        }
        let kept = last.ok_or_else(|| {
            SummarizeError::Other("Summarization failed: nothing to summarize".into())
        })?;
        let checks = kept.verdict.map(|v| v.describe(part));
        Ok((kept.output, checks))
    }

    /// The request for `chunk`; its prompt (the transcript in the instructions) only for a
    /// summarizer that reads it.
    fn request(
        &self,
        chunk: &LlmMessages,
        previous: Option<String>,
        with_prompt: bool,
    ) -> SummaryRequest {
        let job = self.job;
        let prompt = if with_prompt {
            (job.build_prompt)(&serialize_messages(chunk.iter()), previous.as_deref())
        } else {
            String::new()
        };
        let mut req = SummaryRequest::new(job.purpose, job.system_prompt, prompt, job.max_tokens);
        req.reasoning = job.reasoning;
        req.messages = chunk.clone();
        req.previous_summary = previous;
        req.custom_instructions = job.custom_instructions.clone();
        req.read_files = job.read_files.clone();
        req.modified_files = job.modified_files.clone();
        req.detail_scale = job.detail_scale;
        req
    }
}

/// Logs a summarizer attempt; a failed or retried model is a warning.
fn log_attempt(event: &AttemptEvent) {
    match &event.outcome {
        AttemptOutcome::Failed { error, .. } => {
            tracing::warn!(candidate = %event.candidate, "summarizer attempt failed: {error}")
        }
        AttemptOutcome::Retrying { error, sleep, .. } => tracing::warn!(
            candidate = %event.candidate,
            attempt = event.attempt,
            "summarizer attempt failed, retrying in {sleep:?}: {error}"
        ),
        _ => tracing::debug!(?event, "summarizer attempt"),
    }
}

#[cfg(test)]
mod tests;
