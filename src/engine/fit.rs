//! Bounding the summarizer's input (DESIGN §3 deviation 8, peers.md §4 #8).
//!
//! Before any request, the prompt is measured with the session's token counter against the
//! smallest window among the summarizers that may be tried, minus the output budget and a
//! margin. An input that does not fit is reduced, in order: tool results are clipped harder and
//! the middles of long texts are dropped (head and tail kept, the cut marked); if it still does
//! not fit, the conversation is split at message boundaries into chunks summarised one after
//! the other, each with the previous chunk's summary as `<previous-summary>` (an iterative
//! fold). A request that is bound to overflow is never sent. If a summarizer still reports an
//! overflow (the counter is not its tokenizer), the input is planned again with half the budget
//! and tried once more.

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::compaction::serialize::serialize_conversation;
use crate::session::{AgentMessage, Content, ContentBlock};
use crate::summarize::{
    DeltaSink, Purpose, SummarizeError, SummaryOutput, SummaryRequest, summarize_with_candidates,
};
use crate::tokens::TokenCounter;

use super::SummarizerSet;

/// Logs a summarizer attempt; a failed or retried model is a warning, so a silent fall back to
/// the next candidate (or to the extractive summarizer) is visible to the user.
fn log_attempt(event: crate::summarize::AttemptEvent) {
    use crate::summarize::AttemptOutcome;
    match &event.outcome {
        AttemptOutcome::Failed { error, .. } => {
            tracing::warn!(candidate = %event.candidate, "summarizer failed, trying the next: {error}")
        }
        AttemptOutcome::Retrying { error, sleep, .. } => tracing::warn!(
            candidate = %event.candidate,
            attempt = event.attempt,
            "summarizer attempt failed, retrying in {sleep:?}: {error}"
        ),
        _ => tracing::debug!(?event, "summarizer attempt"),
    }
}

/// Characters kept of each tool result once the input has to shrink.
pub const TIGHT_TOOL_RESULT_CHARS: usize = 500;
/// Texts longer than this lose their middle once the input has to shrink.
pub const LONG_TEXT_CHARS: usize = 4_000;
/// Characters kept (head + tail) of a long text.
pub const LONG_TEXT_KEEP_CHARS: usize = 2_000;

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
    pub max_tokens: u32,
    pub reasoning: bool,
    pub custom_instructions: Option<String>,
    pub read_files: Vec<String>,
    pub modified_files: Vec<String>,
    /// Only the most recent part is needed when it does not fit (the short summary): keep the
    /// last chunk instead of folding over all of them.
    pub tail_only: bool,
}

/// The input-token budget of a request to a summarizer with `window` tokens that may answer
/// with `max_output` tokens: what is left after the output and a 5 % margin (at least 256).
/// An unbounded window (the extractive summarizer) gives an unbounded budget.
pub fn input_budget(window: u64, max_output: u32) -> u64 {
    if window == u64::MAX {
        return u64::MAX;
    }
    let margin = (window / 20).max(256);
    window
        .saturating_sub(u64::from(max_output))
        .saturating_sub(margin)
}

/// Runs `job` on `set`'s summarizers with its input bounded (see the module doc).
pub async fn summarize_fitted(
    job: &SummaryJob<'_>,
    set: &SummarizerSet,
    counter: &dyn TokenCounter,
    cancel: &CancellationToken,
    on_delta: DeltaSink<'_>,
) -> Result<SummaryOutput, SummarizeError> {
    summarize_fitted_streaming(job, set, counter, cancel, on_delta, &|| {}).await
}

/// [`summarize_fitted`], calling `on_restart` whenever an attempt begins (a first attempt, a
/// retry, the next summarizer, the next chunk): whatever was streamed before is then void.
pub async fn summarize_fitted_streaming(
    job: &SummaryJob<'_>,
    set: &SummarizerSet,
    counter: &dyn TokenCounter,
    cancel: &CancellationToken,
    on_delta: DeltaSink<'_>,
    on_restart: &(dyn Fn() + Send + Sync),
) -> Result<SummaryOutput, SummarizeError> {
    let mut budget = input_budget(set.min_context_window(), job.max_tokens);
    let mut shrunk = false;
    let on_attempt = |event: crate::summarize::AttemptEvent| {
        if matches!(event.outcome, crate::summarize::AttemptOutcome::Started) {
            on_restart();
        }
        log_attempt(event);
    };
    loop {
        let chunks = plan_chunks(job, budget, counter)?;
        match run_chunks(job, &chunks, set, cancel, on_delta, &on_attempt).await {
            Err(e) if e.is_overflow() && !shrunk && budget != u64::MAX => {
                tracing::warn!(error = %e, budget, "summarizer overflowed; retrying with half the budget");
                budget /= 2;
                shrunk = true;
            }
            other => return other,
        }
    }
}

async fn run_chunks(
    job: &SummaryJob<'_>,
    chunks: &[Vec<AgentMessage>],
    set: &SummarizerSet,
    cancel: &CancellationToken,
    on_delta: DeltaSink<'_>,
    on_attempt: &(dyn Fn(crate::summarize::AttemptEvent) + Send + Sync),
) -> Result<SummaryOutput, SummarizeError> {
    let mut previous = job.previous_summary.clone();
    let mut last = None;
    for chunk in chunks {
        let conversation = serialize_conversation(chunk);
        let mut req = SummaryRequest::new(
            job.purpose,
            job.system_prompt,
            (job.build_prompt)(&conversation, previous.as_deref()),
            job.max_tokens,
        );
        req.reasoning = job.reasoning;
        req.messages = chunk.clone();
        req.previous_summary = previous.clone();
        req.custom_instructions = job.custom_instructions.clone();
        req.read_files = job.read_files.clone();
        req.modified_files = job.modified_files.clone();
        let output = summarize_with_candidates(
            &set.candidates,
            set.fallback.clone(),
            &req,
            &set.retry,
            cancel,
            on_delta,
            on_attempt,
        )
        .await?;
        previous = Some(output.text.clone());
        last = Some(output);
    }
    last.ok_or_else(|| SummarizeError::Other("Summarization failed: nothing to summarize".into()))
}

/// Splits (and if needed reduces) the job's messages so every request fits `budget` input
/// tokens. One chunk when everything fits.
pub fn plan_chunks(
    job: &SummaryJob<'_>,
    budget: u64,
    counter: &dyn TokenCounter,
) -> Result<Vec<Vec<AgentMessage>>, SummarizeError> {
    if budget == u64::MAX {
        return Ok(vec![job.messages.clone()]);
    }
    let system = counter.count_text(job.system_prompt);
    let overhead_first =
        system + counter.count_text(&(job.build_prompt)("", job.previous_summary.as_deref()));
    // Later chunks carry the previous chunk's summary, at most `max_tokens` long.
    let overhead_rest =
        system + counter.count_text(&(job.build_prompt)("", Some("…"))) + u64::from(job.max_tokens);
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
            "the summarizer's window leaves no room for the conversation (input budget {budget} \
             tokens, prompt overhead {overhead_first} tokens)"
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
    use crate::summarize::{RetryPolicy, Summarizer};
    use crate::tokens::Chars4;

    /// A summarizer with a tiny window that records the prompts it gets, refuses (as an
    /// overflow) any prompt larger than its window, and answers with a short fixed text.
    struct TinyWindow {
        window: u64,
        /// Overflow every request while this is > 0 (counts down).
        force_overflows: Mutex<u32>,
        prompts: Mutex<Vec<String>>,
    }

    impl TinyWindow {
        fn new(window: u64) -> Arc<Self> {
            Arc::new(TinyWindow {
                window,
                force_overflows: Mutex::new(0),
                prompts: Mutex::new(Vec::new()),
            })
        }
    }

    impl Summarizer for TinyWindow {
        fn id(&self) -> String {
            "test/tiny".into()
        }
        fn context_window(&self) -> u64 {
            self.window
        }
        fn summarize<'a>(
            &'a self,
            req: &'a SummaryRequest,
            _cancel: CancellationToken,
            _on_delta: DeltaSink<'a>,
        ) -> BoxFuture<'a, Result<SummaryOutput, SummarizeError>> {
            Box::pin(async move {
                let tokens = Chars4.count_text(&req.system_prompt)
                    + Chars4.count_text(&req.prompt)
                    + u64::from(req.max_tokens);
                self.prompts.lock().unwrap().push(req.prompt.clone());
                let mut forced = self.force_overflows.lock().unwrap();
                if *forced > 0 || tokens > self.window {
                    *forced = forced.saturating_sub(1);
                    return Err(SummarizeError::Overflow(format!(
                        "prompt is too long: {tokens} tokens > {}",
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
            &|_| {},
        )
        .await
        .unwrap();
        assert_eq!(out.text, "summary #1");
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
            &|_| {},
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
            &|_| {},
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
        assert_eq!(out.text, format!("summary #{}", prompts.len()));
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
            &|_| {},
        )
        .await
        .unwrap();
        assert!(out.text.starts_with("summary"));
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
            &|_| {},
        )
        .await
        .unwrap_err();
        assert!(err.is_overflow());
        assert_eq!(stubborn.prompts.lock().unwrap().len(), 2);
    }

    #[test]
    fn a_window_too_small_for_the_prompt_itself_is_refused_before_sending() {
        let b: &PromptBuilder = &builder;
        let j = job(vec![user(&"word ".repeat(1_000))], b);
        let err = plan_chunks(&j, 10, &Chars4).unwrap_err();
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
        let chunks = plan_chunks(&j, 400, &Chars4).unwrap();
        assert_eq!(chunks.len(), 1);
        let text = serialize_conversation(&chunks[0]);
        assert!(text.contains("m39 "));
        assert!(!text.contains("m0 "));
    }
}
