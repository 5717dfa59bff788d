//! Bounding the summarizer's input (DESIGN §3 deviation 8, peers.md §4 #8) and walking the
//! summarizer ladder for one summary.
//!
//! Each rung is planned for its own limits: its window (as the server reports it, where it
//! does) minus its own output limit (`maxOutputTokens`, never the agent's `reserveTokens`) and
//! a margin, measured with the session's token counter scaled by what the server's own counts
//! have shown. An input that does not fit is reduced, in order: tool results are clipped harder
//! and the middles of long texts are dropped (head and tail kept, the cut marked); if it still
//! does not fit, the conversation is split at message boundaries into chunks summarised one
//! after the other, each with the previous chunk's summary as `<previous-summary>` (an
//! iterative fold). A request that is bound to overflow is never sent. If the server still
//! refuses the prompt as too long (its tokenizer is not ours, its window smaller than
//! configured), the input is planned again smaller, to the window and by the ratio the server's
//! figures give (or half), and tried once more before the next rung; that window and ratio hold
//! for the rest of the operation, so its other requests are not refused again. A rung that fails (after its retries, or with its breaker open) hands the whole
//! summary to the next rung; the [`SummaryReport`] says which rung wrote it and why the ones
//! before did not.

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::compaction::serialize::serialize_conversation;
use crate::session::{AgentMessage, Content, ContentBlock};
use crate::summarize::prompts::length_instruction;
use crate::summarize::{
    AttemptContext, AttemptEvent, AttemptOutcome, Purpose, Rung, SummarizeError, Summarizer,
    SummaryOutput, SummaryRequest, overflow_figures, try_summarizer,
};
use crate::tokens::TokenCounter;

use super::events::{RungFailure, SummaryReport, SummaryState, SummaryStatus};
use super::{OperationObserver, SummarizerSet};

/// Characters kept of each tool result once the input has to shrink.
pub const TIGHT_TOOL_RESULT_CHARS: usize = 500;
/// Texts longer than this lose their middle once the input has to shrink.
pub const LONG_TEXT_CHARS: usize = 4_000;
/// Characters kept (head + tail) of a long text.
pub const LONG_TEXT_KEEP_CHARS: usize = 2_000;
/// A smaller plan after a refusal aims this far under what the server said fits.
const SHRINK_HEADROOM: f64 = 0.9;

/// Builds the prompt text from the serialised conversation and the previous summary (the
/// caller's, for the first chunk; the previous chunk's, for the others).
pub type PromptBuilder<'a> = dyn Fn(&str, Option<&str>) -> String + Send + Sync + 'a;

/// One summary to produce.
pub struct SummaryJob<'a> {
    pub purpose: Purpose,
    /// The messages to summarise, as `convert_to_llm` returns them.
    pub messages: Vec<AgentMessage>,
    pub previous_summary: Option<String>,
    pub system_prompt: &'a str,
    pub build_prompt: &'a PromptBuilder<'a>,
    /// The output budget of this kind of summary; each rung lowers it to its own limit.
    pub max_tokens: u32,
    pub reasoning: bool,
    pub custom_instructions: Option<String>,
    pub read_files: Vec<String>,
    pub modified_files: Vec<String>,
    /// Only the most recent part is needed when it does not fit (the short summary): keep the
    /// last chunk instead of folding over all of them.
    pub tail_only: bool,
}

/// A summary and its report.
#[derive(Debug, Clone, PartialEq)]
pub struct Fitted {
    pub output: SummaryOutput,
    pub report: SummaryReport,
}

/// A report as stored in `details.summarizers` and sent to clients:
/// `{"part", "summarizer", "checks"?, "chunks", "failures": [{"summarizer", "reason"}]}`.
pub fn report_json(part: Purpose, report: &SummaryReport) -> Value {
    let mut value = serde_json::json!({
        "part": part.name(),
        "summarizer": report.summarizer,
        "chunks": report.chunks,
        "failures": report.failures.iter().map(|f| serde_json::json!({
            "summarizer": f.summarizer,
            "reason": f.reason,
        })).collect::<Vec<_>>(),
    });
    if let Some(checks) = &report.checks {
        value["checks"] = Value::from(checks.as_str());
    }
    value
}

/// The input-token budget of a request to a summarizer with `window` tokens that may answer
/// with `max_output` tokens: what is left after the output and a 5 % margin (at least 256, but
/// never more than a tenth of a small window). An unbounded window (the extractive summarizer)
/// gives an unbounded budget.
pub fn input_budget(window: u64, max_output: u32) -> u64 {
    if window == u64::MAX {
        return u64::MAX;
    }
    let margin = (window / 20).max(256.min(window / 10));
    window
        .saturating_sub(u64::from(max_output))
        .saturating_sub(margin)
}

/// Runs `job` down `set`'s ladder with its input bounded for each rung (see the module doc);
/// streamed text, restarts and statuses go to `observer` under the job's purpose.
pub async fn summarize_fitted(
    job: &SummaryJob<'_>,
    set: &SummarizerSet,
    counter: &dyn TokenCounter,
    cancel: &CancellationToken,
    observer: &dyn OperationObserver,
) -> Result<Fitted, SummarizeError> {
    let part = job.purpose;
    let rungs: Vec<(&dyn Summarizer, bool)> = set
        .candidates
        .iter()
        .map(|c| (c.as_ref(), true))
        .chain(set.fallback.iter().map(|f| (f.as_ref(), false)))
        .collect();
    let mut failures = Vec::new();
    let mut overflow = None;
    let mut last_error = None;
    for (index, &(summarizer, checked)) in rungs.iter().enumerate() {
        let rung = Rung {
            summarizer,
            has_next: index + 1 < rungs.len(),
            checked,
        };
        let run = RungRun {
            job,
            set,
            counter,
            cancel,
            observer,
            part,
        };
        match run.summarize(rung).await {
            Ok((output, checks, chunks)) => {
                return Ok(Fitted {
                    output,
                    report: SummaryReport {
                        summarizer: summarizer.id(),
                        checks,
                        chunks,
                        failures,
                    },
                });
            }
            Err(SummarizeError::Cancelled) => return Err(SummarizeError::Cancelled),
            Err(error) => {
                tracing::warn!(summarizer = %summarizer.id(), "summarizer gave up: {error}");
                failures.push(RungFailure {
                    summarizer: summarizer.id(),
                    reason: error.reason(),
                });
                if error.is_overflow() {
                    overflow = Some(error.clone());
                }
                last_error = Some(error);
            }
        }
    }
    Err(overflow.or(last_error).unwrap_or_else(|| {
        SummarizeError::Other(crate::summarize::retry::NO_AVAILABLE_MODEL.to_owned())
    }))
}

/// One summary on one rung.
struct RungRun<'r, 'a> {
    job: &'r SummaryJob<'a>,
    set: &'r SummarizerSet,
    counter: &'r dyn TokenCounter,
    cancel: &'r CancellationToken,
    observer: &'r dyn OperationObserver,
    part: Purpose,
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
        chunks: &[Vec<AgentMessage>],
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
                let conversation = serialize_conversation(chunk);
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
        chunks: &[Vec<AgentMessage>],
    ) -> Result<(SummaryOutput, Option<String>), SummarizeError> {
        let job = self.job;
        let id = rung.summarizer.id();
        let mut previous = job.previous_summary.clone();
        let mut last = None;
        for (index, chunk) in chunks.iter().enumerate() {
            let status = |state| {
                self.observer.status(
                    self.part,
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
                        self.observer.restart(self.part);
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
            let on_delta = |text: &str| self.observer.delta(self.part, text);
            let ctx = AttemptContext {
                policy: &self.set.retry,
                breaker: &self.set.breaker,
                cancel: self.cancel,
                on_delta: &on_delta,
                on_attempt: &on_attempt,
            };
            let req = self.request(chunk, previous.clone());
            let kept = try_summarizer(rung, &req, &ctx).await?;
            previous = Some(kept.output.text.clone());
            last = Some(kept);
        }
        let kept = last.ok_or_else(|| {
            SummarizeError::Other("Summarization failed: nothing to summarize".into())
        })?;
        let checks = kept.verdict.map(|v| v.describe(job.purpose));
        Ok((kept.output, checks))
    }

    fn request(&self, chunk: &[AgentMessage], previous: Option<String>) -> SummaryRequest {
        let job = self.job;
        let conversation = serialize_conversation(chunk);
        let mut req = SummaryRequest::new(
            job.purpose,
            job.system_prompt,
            (job.build_prompt)(&conversation, previous.as_deref()),
            job.max_tokens,
        );
        req.reasoning = job.reasoning;
        req.messages = chunk.to_vec();
        req.previous_summary = previous;
        req.custom_instructions = job.custom_instructions.clone();
        req.read_files = job.read_files.clone();
        req.modified_files = job.modified_files.clone();
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

/// Splits (and if needed reduces) the job's messages so every request to a summarizer that
/// answers with at most `max_output` tokens fits `budget` input tokens. One chunk when
/// everything fits.
pub fn plan_chunks(
    job: &SummaryJob<'_>,
    budget: u64,
    max_output: u32,
    counter: &dyn TokenCounter,
) -> Result<Vec<Vec<AgentMessage>>, SummarizeError> {
    if budget == u64::MAX {
        return Ok(vec![job.messages.clone()]);
    }
    let system = counter.count_text(job.system_prompt)
        + counter.count_text(&length_instruction(job.purpose, max_output));
    let overhead_first =
        system + counter.count_text(&(job.build_prompt)("", job.previous_summary.as_deref()));
    // Later chunks carry the previous chunk's summary, at most `max_output` long.
    let overhead_rest =
        system + counter.count_text(&(job.build_prompt)("", Some("…"))) + u64::from(max_output);
    let room_first = budget.saturating_sub(overhead_first);
    let room_rest = budget.saturating_sub(overhead_rest);
    let measure = |msgs: &[AgentMessage]| counter.count_text(&serialize_conversation(msgs));

    if measure(&job.messages) <= room_first {
        return Ok(vec![job.messages.clone()]);
    }
    let reduced: Vec<AgentMessage> = job.messages.iter().map(reduce_message).collect();
    if measure(&reduced) <= room_first {
        return Ok(vec![reduced]);
    }
    if room_first == 0 || room_rest == 0 {
        return Err(SummarizeError::Overflow(format!(
            "the summarizer's window leaves no room for the conversation: the prompt's \
             instructions alone take {overhead_first} of its {budget} input tokens"
        )));
    }
    if job.tail_only {
        return Ok(vec![tail_that_fits(&reduced, room_first, &measure)]);
    }
    Ok(split_into_chunks(reduced, room_first, room_rest, &measure))
}

/// The most recent messages that fit `room` (at least one, shrunk to fit).
fn tail_that_fits(
    messages: &[AgentMessage],
    room: u64,
    measure: &dyn Fn(&[AgentMessage]) -> u64,
) -> Vec<AgentMessage> {
    let mut kept: Vec<AgentMessage> = Vec::new();
    for m in messages.iter().rev() {
        let mut candidate = vec![m.clone()];
        candidate.extend(kept.iter().cloned());
        if measure(&candidate) > room {
            break;
        }
        kept = candidate;
    }
    if kept.is_empty()
        && let Some(last) = messages.last()
    {
        kept.push(shrink_to_fit(last, room, measure));
    }
    kept
}

/// Greedy split at message boundaries; a single message larger than a chunk is shrunk.
fn split_into_chunks(
    messages: Vec<AgentMessage>,
    room_first: u64,
    room_rest: u64,
    measure: &dyn Fn(&[AgentMessage]) -> u64,
) -> Vec<Vec<AgentMessage>> {
    let mut chunks: Vec<Vec<AgentMessage>> = Vec::new();
    let mut current: Vec<AgentMessage> = Vec::new();
    let mut current_tokens = 0u64;
    for m in messages {
        let room = if chunks.is_empty() {
            room_first
        } else {
            room_rest
        };
        let mut tokens = measure(std::slice::from_ref(&m));
        let m = if tokens > room {
            let shrunk = shrink_to_fit(&m, room, measure);
            tokens = measure(std::slice::from_ref(&shrunk));
            shrunk
        } else {
            m
        };
        // The blank line between parts costs about a token.
        if !current.is_empty() && current_tokens + tokens + 1 > room {
            chunks.push(std::mem::take(&mut current));
            current_tokens = 0;
        }
        current_tokens += tokens + 1;
        current.push(m);
    }
    if !current.is_empty() {
        chunks.push(current);
    }
    chunks
}

/// `m` with its texts cut (middle dropped) until it measures at most `room`.
fn shrink_to_fit(
    m: &AgentMessage,
    room: u64,
    measure: &dyn Fn(&[AgentMessage]) -> u64,
) -> AgentMessage {
    // Start from a generous guess (4 characters a token) and halve until it fits.
    let mut keep = usize::try_from(room.saturating_mul(4)).unwrap_or(usize::MAX);
    loop {
        let shrunk = map_texts(m, &|t| drop_middle(t, keep), Some(keep));
        if keep <= 64 || measure(std::slice::from_ref(&shrunk)) <= room {
            return shrunk;
        }
        keep /= 2;
    }
}

/// The first reduction: tool results clipped to [`TIGHT_TOOL_RESULT_CHARS`], texts longer than
/// [`LONG_TEXT_CHARS`] cut to [`LONG_TEXT_KEEP_CHARS`] (head and tail).
pub fn reduce_message(m: &AgentMessage) -> AgentMessage {
    match m {
        AgentMessage::ToolResult(_) => {
            map_texts(m, &|t| drop_middle(t, TIGHT_TOOL_RESULT_CHARS), None)
        }
        _ => map_texts(
            m,
            &|t| {
                if t.chars().count() > LONG_TEXT_CHARS {
                    drop_middle(t, LONG_TEXT_KEEP_CHARS)
                } else {
                    t.to_owned()
                }
            },
            Some(LONG_TEXT_KEEP_CHARS),
        ),
    }
}

/// `m` with `f` applied to each text (user/assistant/tool-result text and thinking blocks) and,
/// when `args_keep` is set, to string arguments of tool calls longer than that.
fn map_texts(
    m: &AgentMessage,
    f: &dyn Fn(&str) -> String,
    args_keep: Option<usize>,
) -> AgentMessage {
    let blocks = |blocks: &[ContentBlock]| -> Vec<ContentBlock> {
        blocks
            .iter()
            .map(|b| match b {
                ContentBlock::Text(t) => {
                    let mut t = t.clone();
                    t.text = f(&t.text);
                    ContentBlock::Text(t)
                }
                ContentBlock::Thinking(t) => {
                    let mut t = t.clone();
                    t.thinking = f(&t.thinking);
                    ContentBlock::Thinking(t)
                }
                ContentBlock::ToolCall(c) => {
                    let mut c = c.clone();
                    if let Some(keep) = args_keep {
                        shrink_json_strings(&mut c.arguments, keep);
                    }
                    ContentBlock::ToolCall(c)
                }
                other => other.clone(),
            })
            .collect()
    };
    let mut out = m.clone();
    match &mut out {
        AgentMessage::User(u) => {
            u.content = match &u.content {
                Content::Text(t) => Content::Text(f(t)),
                Content::Blocks(b) => Content::Blocks(blocks(b)),
            }
        }
        AgentMessage::Assistant(a) => a.content = blocks(&a.content),
        AgentMessage::ToolResult(t) => t.content = blocks(&t.content),
        _ => {}
    }
    out
}

fn shrink_json_strings(value: &mut Value, keep: usize) {
    match value {
        Value::String(s) if s.chars().count() > keep => *s = drop_middle(s, keep),
        Value::Array(items) => items.iter_mut().for_each(|v| shrink_json_strings(v, keep)),
        Value::Object(map) => map.values_mut().for_each(|v| shrink_json_strings(v, keep)),
        _ => {}
    }
}

/// `text` with its middle replaced by a note when it is longer than `keep` characters: the
/// first and last `keep / 2` characters stay.
pub fn drop_middle(text: &str, keep: usize) -> String {
    let total = text.chars().count();
    if total <= keep {
        return text.to_owned();
    }
    let head_chars = keep / 2;
    let tail_chars = keep - head_chars;
    let head_end = text
        .char_indices()
        .nth(head_chars)
        .map_or(text.len(), |(i, _)| i);
    let tail_start = text
        .char_indices()
        .nth(total - tail_chars)
        .map_or(text.len(), |(i, _)| i);
    let omitted = total - head_chars - tail_chars;
    format!(
        "{}\n[… {omitted} characters omitted …]\n{}",
        &text[..head_end],
        &text[tail_start..]
    )
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use futures::future::BoxFuture;
    use serde_json::json;

    use super::*;
    use crate::engine::NoopObserver;
    use crate::summarize::{DeltaSink, RetryPolicy, Summarizer};
    use crate::tokens::Chars4;

    /// A summarizer with a tiny window that records the prompts it gets, refuses (as an
    /// overflow) any prompt larger than its window, and answers with a short fixed text.
    struct TinyWindow {
        window: u64,
        /// Overflow every request while this is > 0 (counts down).
        force_overflows: Mutex<u32>,
        prompts: Mutex<Vec<String>>,
        max_tokens: Mutex<Vec<u32>>,
        /// Its tokenizer counts this many times what chars4 counts (a real server's differs).
        scale: f64,
        /// Its output limit (`maxOutputTokens`).
        max_output: Option<u32>,
        /// Fail every request with this error instead of answering.
        failing: Option<SummarizeError>,
    }

    impl TinyWindow {
        fn new(window: u64) -> Arc<Self> {
            Self::with(window, 1.0, None, None)
        }

        fn with(
            window: u64,
            scale: f64,
            max_output: Option<u32>,
            failing: Option<SummarizeError>,
        ) -> Arc<Self> {
            Arc::new(TinyWindow {
                window,
                force_overflows: Mutex::new(0),
                prompts: Mutex::new(Vec::new()),
                max_tokens: Mutex::new(Vec::new()),
                scale,
                max_output,
                failing,
            })
        }

        fn calls(&self) -> usize {
            self.prompts.lock().unwrap().len()
        }
    }

    impl Summarizer for TinyWindow {
        fn id(&self) -> String {
            "test/tiny".into()
        }
        fn context_window(&self) -> u64 {
            self.window
        }
        fn max_output_tokens(&self) -> Option<u32> {
            self.max_output
        }
        fn summarize<'a>(
            &'a self,
            req: &'a SummaryRequest,
            _cancel: CancellationToken,
            _on_delta: DeltaSink<'a>,
        ) -> BoxFuture<'a, Result<SummaryOutput, SummarizeError>> {
            Box::pin(async move {
                let prompt = Chars4.count_text(&req.system_prompt) + Chars4.count_text(&req.prompt);
                let prompt = (prompt as f64 * self.scale) as u64;
                let tokens = prompt + u64::from(req.max_tokens);
                self.prompts.lock().unwrap().push(req.prompt.clone());
                self.max_tokens.lock().unwrap().push(req.max_tokens);
                if let Some(error) = &self.failing {
                    return Err(error.clone());
                }
                let mut forced = self.force_overflows.lock().unwrap();
                if *forced > 0 || tokens > self.window {
                    *forced = forced.saturating_sub(1);
                    // As llama.cpp says it.
                    return Err(SummarizeError::Overflow(format!(
                        r#"HTTP 400: {{"error":{{"message":"the request exceeds the available context size","n_prompt_tokens":{prompt},"n_ctx":{}}}}}"#,
                        self.window
                    )));
                }
                let n = self.prompts.lock().unwrap().len();
                Ok(SummaryOutput {
                    text: format!("summary #{n}"),
                    short_summary: None,
                    usage: None,
                    model: self.id(),
                })
            })
        }
    }

    fn set_of(s: Arc<TinyWindow>) -> SummarizerSet {
        SummarizerSet {
            candidates: vec![s],
            fallback: None,
            retry: RetryPolicy {
                enabled: false,
                ..RetryPolicy::default()
            },
            breaker: Default::default(),
        }
    }

    fn user(text: &str) -> AgentMessage {
        AgentMessage::from_value(json!({"role": "user", "content": text})).unwrap()
    }

    fn tool_result(text: &str) -> AgentMessage {
        AgentMessage::from_value(
            json!({"role": "toolResult", "toolCallId": "c", "toolName": "bash",
            "content": [{"type": "text", "text": text}]}),
        )
        .unwrap()
    }

    fn builder(conv: &str, prev: Option<&str>) -> String {
        match prev {
            Some(p) => format!(
                "<conversation>\n{conv}\n</conversation>\n\n<previous-summary>\n{p}\n</previous-summary>\n\nSummarize."
            ),
            None => format!("<conversation>\n{conv}\n</conversation>\n\nSummarize."),
        }
    }

    fn job<'a>(messages: Vec<AgentMessage>, b: &'a PromptBuilder<'a>) -> SummaryJob<'a> {
        SummaryJob {
            purpose: Purpose::History,
            messages,
            previous_summary: None,
            system_prompt: "You summarize.",
            build_prompt: b,
            max_tokens: 100,
            reasoning: false,
            custom_instructions: None,
            read_files: Vec::new(),
            modified_files: Vec::new(),
            tail_only: false,
        }
    }

    #[test]
    fn drop_middle_keeps_head_and_tail_and_marks_the_cut() {
        let text = format!("{}{}{}", "a".repeat(100), "b".repeat(1000), "c".repeat(100));
        let out = drop_middle(&text, 200);
        assert!(out.starts_with(&"a".repeat(100)));
        assert!(out.ends_with(&"c".repeat(100)));
        assert!(out.contains("[… 1000 characters omitted …]"));
        assert_eq!(drop_middle("short", 10), "short");
        // Multi-byte characters are cut on character boundaries.
        assert!(drop_middle(&"é".repeat(50), 10).contains("[… 40 characters omitted …]"));
    }

    #[tokio::test]
    async fn small_input_is_one_request_unchanged() {
        let tiny = TinyWindow::new(2_000);
        let b: &PromptBuilder = &builder;
        let j = job(vec![user("hello"), tool_result("ok")], b);
        let out = summarize_fitted(
            &j,
            &set_of(tiny.clone()),
            &Chars4,
            &CancellationToken::new(),
            &NoopObserver,
        )
        .await
        .unwrap();
        assert_eq!(out.output.text, "summary #1");
        let prompts = tiny.prompts.lock().unwrap();
        assert_eq!(prompts.len(), 1);
        assert!(prompts[0].contains("[User]: hello"));
    }

    #[tokio::test]
    async fn long_tool_output_is_clipped_to_fit_one_request() {
        // The transcript's own 2000-character clip would not fit: the tighter clip must.
        let tiny = TinyWindow::new(700);
        let b: &PromptBuilder = &builder;
        let big = format!("HEAD{}TAIL", "x".repeat(8_000));
        let j = job(vec![user("run it"), tool_result(&big)], b);
        summarize_fitted(
            &j,
            &set_of(tiny.clone()),
            &Chars4,
            &CancellationToken::new(),
            &NoopObserver,
        )
        .await
        .unwrap();
        let prompts = tiny.prompts.lock().unwrap();
        assert_eq!(prompts.len(), 1, "one request after clipping");
        assert!(prompts[0].contains("HEAD") && prompts[0].contains("TAIL"));
        assert!(prompts[0].contains("characters omitted"));
    }

    #[tokio::test]
    async fn too_large_input_is_folded_in_chunks_that_each_fit() {
        let tiny = TinyWindow::new(600);
        let b: &PromptBuilder = &builder;
        let messages: Vec<AgentMessage> = (0..30)
            .map(|i| user(&format!("message {i}: {}", "word ".repeat(40))))
            .collect();
        let j = job(messages, b);
        let out = summarize_fitted(
            &j,
            &set_of(tiny.clone()),
            &Chars4,
            &CancellationToken::new(),
            &NoopObserver,
        )
        .await
        .unwrap();
        let prompts = tiny.prompts.lock().unwrap();
        assert!(
            prompts.len() > 2,
            "split into chunks, got {}",
            prompts.len()
        );
        // Every request fitted (the fake refuses any that does not) and each chunk after the
        // first carries the previous chunk's summary.
        for (i, p) in prompts.iter().enumerate().skip(1) {
            assert!(
                p.contains(&format!("<previous-summary>\nsummary #{i}\n")),
                "{p}"
            );
        }
        assert_eq!(out.output.text, format!("summary #{}", prompts.len()));
        // Nothing was lost between chunks: every message appears in some request.
        for i in 0..30 {
            assert!(prompts.iter().any(|p| p.contains(&format!("message {i}:"))));
        }
    }

    #[tokio::test]
    async fn an_overflow_from_the_summarizer_shrinks_and_retries_once() {
        let tiny = TinyWindow::new(5_000);
        *tiny.force_overflows.lock().unwrap() = 1;
        let b: &PromptBuilder = &builder;
        let j = job(vec![user(&"word ".repeat(2_400))], b);
        let out = summarize_fitted(
            &j,
            &set_of(tiny.clone()),
            &Chars4,
            &CancellationToken::new(),
            &NoopObserver,
        )
        .await
        .unwrap();
        assert!(out.output.text.starts_with("summary"));
        {
            let prompts = tiny.prompts.lock().unwrap();
            // First the full input, then a smaller plan after the overflow.
            assert!(prompts.len() >= 2);
            assert!(prompts[1].len() < prompts[0].len());
        }

        // Two overflows in a row: the second is reported, not retried blindly.
        let stubborn = TinyWindow::new(5_000);
        *stubborn.force_overflows.lock().unwrap() = 100;
        let err = summarize_fitted(
            &j,
            &set_of(stubborn.clone()),
            &Chars4,
            &CancellationToken::new(),
            &NoopObserver,
        )
        .await
        .unwrap_err();
        assert!(err.is_overflow());
        assert_eq!(stubborn.prompts.lock().unwrap().len(), 2);
    }

    fn ladder(candidate: Arc<TinyWindow>) -> SummarizerSet {
        SummarizerSet {
            fallback: Some(Arc::new(
                crate::summarize::extractive::ExtractiveSummarizer::new(),
            )),
            retry: RetryPolicy {
                base_delay: std::time::Duration::from_millis(1),
                max_sleep: Some(std::time::Duration::from_millis(2)),
                ..RetryPolicy::default()
            },
            ..set_of(candidate)
        }
    }

    async fn fitted(j: &SummaryJob<'_>, set: &SummarizerSet) -> Result<Fitted, SummarizeError> {
        summarize_fitted(j, set, &Chars4, &CancellationToken::new(), &NoopObserver).await
    }

    #[tokio::test]
    async fn a_4k_model_gets_its_own_output_limit_not_the_reserve() {
        // The history budget of the default reserve is 13,107 tokens: more than the window.
        let small = TinyWindow::with(4_096, 1.0, Some(512), None);
        let b: &PromptBuilder = &builder;
        let mut j = job(vec![user(&"word ".repeat(3_000))], b);
        j.max_tokens = 13_107;
        let out = fitted(&j, &set_of(small.clone())).await.unwrap();
        assert_eq!(out.report.summarizer, "test/tiny");
        assert!(out.report.failures.is_empty());
        assert!(small.max_tokens.lock().unwrap().iter().all(|n| *n == 512));
        // Every request fitted the 4k window (the fake refuses any that does not).
        assert!(small.calls() >= 1);
    }

    #[tokio::test]
    async fn a_refusal_with_the_servers_figures_is_retried_smaller_by_its_ratio() {
        // The server counts 1.5 times what we count: our plan overflows it once.
        let server = TinyWindow::with(3_000, 1.5, Some(200), None);
        let b: &PromptBuilder = &builder;
        let j = job(vec![user(&"word ".repeat(1_800))], b);
        let set = set_of(server.clone());
        let out = fitted(&j, &set).await.unwrap();
        assert_eq!(out.report.summarizer, "test/tiny", "{:?}", out.report);
        let prompts = server.prompts.lock().unwrap().clone();
        assert!(prompts.len() >= 2);
        assert!(prompts[1].len() < prompts[0].len());
        // The ratio is kept for the rest of the operation: the next summary fits at once.
        assert!(set.breaker.token_ratio("test/tiny") > 1.4);
        let before = server.calls();
        let again = fitted(&j, &set).await.unwrap();
        assert_eq!(again.report.summarizer, "test/tiny");
        assert_eq!(
            server.calls() - before,
            again.report.chunks,
            "no refusal this time"
        );
    }

    #[tokio::test]
    async fn a_failing_model_falls_back_visibly_and_its_breaker_holds_for_the_operation() {
        let down = TinyWindow::with(
            100_000,
            1.0,
            None,
            Some(SummarizeError::Network("connection refused".into())),
        );
        let b: &PromptBuilder = &builder;
        let j = job(vec![user("fix the parser")], b);
        let set = ladder(down.clone());
        let out = fitted(&j, &set).await.unwrap();
        assert_eq!(out.report.summarizer, "extractive");
        assert_eq!(out.report.checks, None);
        assert_eq!(down.calls(), 2, "one retry, then the breaker opened");
        assert_eq!(out.report.failures.len(), 1);
        assert_eq!(out.report.failures[0].summarizer, "test/tiny");
        assert!(out.report.failures[0].reason.contains("connection refused"));
        // The next part of the same operation does not ask it again, and says why.
        let next = fitted(&j, &set).await.unwrap();
        assert_eq!(down.calls(), 2);
        assert_eq!(next.report.summarizer, "extractive");
        assert!(
            next.report.failures[0].reason.contains("not asked again"),
            "{:?}",
            next.report
        );
        // A new operation starts closed.
        let fresh = set.for_operation();
        fitted(&j, &fresh).await.unwrap();
        assert_eq!(down.calls(), 4);
        let json = report_json(Purpose::History, &next.report);
        assert_eq!(json["part"], "history");
        assert_eq!(json["summarizer"], "extractive");
        assert_eq!(json["failures"][0]["summarizer"], "test/tiny");
    }

    #[test]
    fn a_window_too_small_for_the_prompt_itself_is_refused_before_sending() {
        let b: &PromptBuilder = &builder;
        let j = job(vec![user(&"word ".repeat(1_000))], b);
        let err = plan_chunks(&j, 10, 100, &Chars4).unwrap_err();
        assert!(err.is_overflow());
    }

    #[test]
    fn tail_only_keeps_the_most_recent_messages() {
        let b: &PromptBuilder = &builder;
        let mut j = job(
            (0..40)
                .map(|i| user(&format!("m{i} {}", "w ".repeat(50))))
                .collect(),
            b,
        );
        j.tail_only = true;
        let chunks = plan_chunks(&j, 400, 100, &Chars4).unwrap();
        assert_eq!(chunks.len(), 1);
        let text = serialize_conversation(&chunks[0]);
        assert!(text.contains("m39 "));
        assert!(!text.contains("m0 "));
    }
}
