//! The ladder against scripted summarizers: fitting each rung's input to its window, folding,
//! shrinking after a refusal, falling back visibly, and the candidate loop's retries (spec
//! §4.15) as production runs them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::json;

use super::*;
use crate::session::AgentMessage;
use crate::summarize::extractive::ExtractiveSummarizer;
use crate::summarize::{DeltaSink, PromptBuilder};
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
    SummaryJob::new(Purpose::History, messages, "You summarize.", b, 100)
}

/// An observer that ignores everything.
struct Quiet;

impl SummaryObserver for Quiet {
    fn delta(&self, _part: Purpose, _text: &str) {}
}

#[tokio::test]
async fn small_input_is_one_request_unchanged() {
    let tiny = TinyWindow::new(2_000);
    let b: &PromptBuilder = &builder;
    let j = job(vec![user("hello"), tool_result("ok")], b);
    let out = write_summary(
        &j,
        &set_of(tiny.clone()),
        &Chars4,
        &CancellationToken::new(),
        &Quiet,
    )
    .await
    .unwrap();
    assert_eq!(out.output.text, "summary #1");
    let prompts = tiny.prompts.lock().unwrap();
    assert_eq!(prompts.len(), 1);
    assert!(prompts[0].contains("[User]: hello"));
}

/// A summarizer that reads the messages alone, as the extractive one does: what it was sent.
#[derive(Default)]
struct Blind {
    sent: Mutex<Vec<(String, usize)>>,
}

impl Summarizer for Blind {
    fn id(&self) -> String {
        "test/blind".into()
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
        _cancel: CancellationToken,
        _on_delta: DeltaSink<'a>,
    ) -> BoxFuture<'a, Result<SummaryOutput, SummarizeError>> {
        let sent = (req.prompt.clone(), req.messages.len());
        self.sent.lock().unwrap().push(sent);
        Box::pin(async { Ok(SummaryOutput::cut("read".to_owned(), "test/blind")) })
    }
}

#[tokio::test]
async fn a_summarizer_that_reads_no_prompt_gets_the_messages_without_a_transcript() {
    let blind = Arc::new(Blind::default());
    let set = SummarizerSet {
        candidates: vec![blind.clone()],
        ..set_of(TinyWindow::new(2_000))
    };
    let b: &PromptBuilder = &builder;
    let j = job(vec![user("hello"), tool_result("ok")], b);
    let out = write_summary(&j, &set, &Chars4, &CancellationToken::new(), &Quiet)
        .await
        .unwrap();
    assert_eq!(out.output.text, "read");
    let sent = blind.sent.lock().unwrap();
    assert_eq!(sent.len(), 1);
    let (prompt, messages) = &sent[0];
    assert_eq!(*messages, 2);
    // A candidate's request says the output limit; the transcript is not written.
    assert!(
        !prompt.contains("hello") && !prompt.contains("<conversation>"),
        "{prompt}"
    );
}

#[tokio::test]
async fn long_tool_output_is_clipped_to_fit_one_request() {
    // The transcript's own 2000-character clip would not fit: the tighter clip must.
    let tiny = TinyWindow::new(700);
    let b: &PromptBuilder = &builder;
    let big = format!("HEAD{}TAIL", "x".repeat(8_000));
    let j = job(vec![user("run it"), tool_result(&big)], b);
    write_summary(
        &j,
        &set_of(tiny.clone()),
        &Chars4,
        &CancellationToken::new(),
        &Quiet,
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
    let out = write_summary(
        &j,
        &set_of(tiny.clone()),
        &Chars4,
        &CancellationToken::new(),
        &Quiet,
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
    let out = write_summary(
        &j,
        &set_of(tiny.clone()),
        &Chars4,
        &CancellationToken::new(),
        &Quiet,
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
    let err = write_summary(
        &j,
        &set_of(stubborn.clone()),
        &Chars4,
        &CancellationToken::new(),
        &Quiet,
    )
    .await
    .unwrap_err();
    assert!(err.is_overflow());
    assert_eq!(stubborn.prompts.lock().unwrap().len(), 2);
}

fn ladder(candidate: Arc<TinyWindow>) -> SummarizerSet {
    SummarizerSet {
        fallback: Some(Arc::new(ExtractiveSummarizer::new())),
        retry: RetryPolicy {
            base_delay: Duration::from_millis(1),
            max_sleep: Some(Duration::from_millis(2)),
            ..RetryPolicy::default()
        },
        ..set_of(candidate)
    }
}

async fn written(j: &SummaryJob<'_>, set: &SummarizerSet) -> Result<Written, SummarizeError> {
    write_summary(j, set, &Chars4, &CancellationToken::new(), &Quiet).await
}

#[tokio::test]
async fn a_4k_model_gets_its_own_output_limit_not_the_reserve() {
    // The history budget of the default reserve is 13,107 tokens: more than the window.
    let small = TinyWindow::with(4_096, 1.0, Some(512), None);
    let b: &PromptBuilder = &builder;
    let mut j = job(vec![user(&"word ".repeat(3_000))], b);
    j.max_tokens = 13_107;
    let out = written(&j, &set_of(small.clone())).await.unwrap();
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
    let out = written(&j, &set).await.unwrap();
    assert_eq!(out.report.summarizer, "test/tiny", "{:?}", out.report);
    let prompts = server.prompts.lock().unwrap().clone();
    assert!(prompts.len() >= 2);
    assert!(prompts[1].len() < prompts[0].len());
    // The ratio is kept for the rest of the operation: the next summary fits at once.
    assert!(set.breaker.token_ratio("test/tiny") > 1.4);
    let before = server.calls();
    let again = written(&j, &set).await.unwrap();
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
    let out = written(&j, &set).await.unwrap();
    assert_eq!(out.report.summarizer, "extractive");
    assert_eq!(out.report.checks, None);
    assert_eq!(down.calls(), 2, "one retry, then the breaker opened");
    assert_eq!(out.report.failures.len(), 1);
    assert_eq!(out.report.failures[0].summarizer, "test/tiny");
    assert!(out.report.failures[0].reason.contains("connection refused"));
    // The next part of the same operation does not ask it again, and says why.
    let next = written(&j, &set).await.unwrap();
    assert_eq!(down.calls(), 2);
    assert_eq!(next.report.summarizer, "extractive");
    assert!(
        next.report.failures[0].reason.contains("not asked again"),
        "{:?}",
        next.report
    );
    // A new operation starts closed.
    let fresh = set.for_operation();
    written(&j, &fresh).await.unwrap();
    assert_eq!(down.calls(), 4);
    let json = next.report.details_json(Purpose::History);
    assert_eq!(json["part"], "history");
    assert_eq!(json["summarizer"], "extractive");
    assert_eq!(json["failures"][0]["summarizer"], "test/tiny");
}

// ---------------------------------------------------------------------------------------------
// The candidate loop: retries, back-off and moving on (spec §4.15).

/// A summarizer that answers from a script and counts its calls.
struct Scripted {
    id: &'static str,
    script: Mutex<Vec<Result<&'static str, SummarizeError>>>,
    calls: std::sync::atomic::AtomicUsize,
}

impl Scripted {
    fn new(id: &'static str, mut script: Vec<Result<&'static str, SummarizeError>>) -> Arc<Self> {
        script.reverse();
        Arc::new(Scripted {
            id,
            script: Mutex::new(script),
            calls: Default::default(),
        })
    }

    fn calls(&self) -> usize {
        self.calls.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Summarizer for Scripted {
    fn id(&self) -> String {
        self.id.to_owned()
    }

    fn context_window(&self) -> u64 {
        1_000
    }

    fn summarize<'a>(
        &'a self,
        _req: &'a SummaryRequest,
        _cancel: CancellationToken,
        _on_delta: DeltaSink<'a>,
    ) -> BoxFuture<'a, Result<SummaryOutput, SummarizeError>> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let next = self
            .script
            .lock()
            .unwrap()
            .pop()
            .unwrap_or(Err(SummarizeError::Empty));
        Box::pin(async move { next.map(|text| SummaryOutput::cut(text.to_owned(), self.id)) })
    }
}

fn http(status: u16, retry_after: Option<Duration>) -> SummarizeError {
    SummarizeError::Http {
        status,
        message: format!("HTTP {status}"),
        body_excerpt: String::new(),
        retry_after,
    }
}

fn fast() -> RetryPolicy {
    RetryPolicy {
        base_delay: Duration::from_millis(1),
        max_sleep: Some(Duration::from_millis(5)),
        ..RetryPolicy::default()
    }
}

/// What the loop reported: attempts started (each restarts the part) and statuses.
#[derive(Default)]
struct Recorder {
    restarts: Mutex<usize>,
    statuses: Mutex<Vec<SummaryState>>,
}

impl SummaryObserver for Recorder {
    fn delta(&self, _part: Purpose, _text: &str) {}
    fn restart(&self, _part: Purpose) {
        *self.restarts.lock().unwrap() += 1;
    }
    fn status(&self, _part: Purpose, status: &SummaryStatus) {
        self.statuses.lock().unwrap().push(status.state.clone());
    }
}

impl Recorder {
    fn restarts(&self) -> usize {
        *self.restarts.lock().unwrap()
    }

    /// The sleeps before each retry.
    fn retries(&self) -> Vec<Duration> {
        self.statuses
            .lock()
            .unwrap()
            .iter()
            .filter_map(|s| match s {
                SummaryState::Retrying { after, .. } => Some(*after),
                _ => None,
            })
            .collect()
    }
}

/// Writes one small history summary down `candidates` (then `fallback`) with `policy`.
async fn down(
    candidates: Vec<Arc<Scripted>>,
    fallback: Option<Arc<dyn Summarizer>>,
    policy: &RetryPolicy,
    seen: &Recorder,
) -> Result<Written, SummarizeError> {
    let set = SummarizerSet {
        candidates: candidates
            .into_iter()
            .map(|c| c as Arc<dyn Summarizer>)
            .collect(),
        fallback,
        retry: policy.clone(),
        breaker: Arc::default(),
    }
    .for_operation();
    let b: &PromptBuilder = &builder;
    let j = job(vec![user("fix the parser")], b);
    let cancel = CancellationToken::new();
    let run = write_summary(&j, &set, &Chars4, &cancel, seen);
    tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("finishes")
}

#[tokio::test]
async fn permanent_errors_move_on_without_retrying() {
    let a = Scripted::new("a", vec![Err(http(401, None))]);
    let b = Scripted::new("b", vec![Ok("fine")]);
    let out = down(
        vec![a.clone(), b.clone()],
        None,
        &fast(),
        &Recorder::default(),
    )
    .await
    .unwrap();
    assert_eq!(out.output.model, "b");
    assert_eq!((a.calls(), b.calls()), (1, 1));
    assert_eq!(out.report.summarizer, "b");
    assert_eq!(out.report.failures[0].summarizer, "a");
    assert_eq!(out.report.failures[0].reason, "HTTP 401");
}

#[tokio::test]
async fn retries_stop_at_the_limit_and_the_last_error_is_returned() {
    // Different transient errors: the retry budget (3) is the limit.
    let varied = [500, 502, 503, 504, 500, 502]
        .map(|s| Err(http(s, None)))
        .to_vec();
    let a = Scripted::new("a", varied);
    let seen = Recorder::default();
    let out = down(vec![a.clone()], None, &fast(), &seen).await;
    assert_eq!(out.unwrap_err(), http(504, None));
    assert_eq!(a.calls(), 4, "one attempt and three retries");
    assert_eq!(seen.restarts(), 4, "each attempt starts the part over");
    assert_eq!(seen.retries().len(), 3);

    // The same error twice opens the breaker before the budget is spent; the next rung says
    // why it was not asked.
    let a = Scripted::new("a", vec![Err(http(503, None)); 10]);
    let extractive: Arc<dyn Summarizer> = Arc::new(ExtractiveSummarizer::new());
    let out = down(
        vec![a.clone()],
        Some(extractive),
        &fast(),
        &Recorder::default(),
    )
    .await
    .unwrap();
    assert_eq!(a.calls(), 2, "the breaker opened on the second 503");
    assert_eq!(out.report.summarizer, "extractive");
    assert_eq!(out.report.failures[0].reason, "HTTP 503");

    let disabled = RetryPolicy {
        enabled: false,
        ..fast()
    };
    let a = Scripted::new("a", vec![Err(http(503, None)); 10]);
    down(vec![a.clone()], None, &disabled, &Recorder::default())
        .await
        .unwrap_err();
    assert_eq!(a.calls(), 1);
}

#[tokio::test]
async fn a_known_retry_after_makes_any_error_retryable() {
    let a = Scripted::new(
        "a",
        vec![Err(http(418, Some(Duration::from_millis(1)))), Ok("ok")],
    );
    let out = down(vec![a.clone()], None, &fast(), &Recorder::default()).await;
    assert_eq!(out.unwrap().output.text, "ok");
    assert_eq!(a.calls(), 2);
}

#[tokio::test]
async fn long_delays_move_on_only_when_another_candidate_remains() {
    let long = Some(Duration::from_secs(45));
    let a = Scripted::new("a", vec![Err(http(429, long)), Ok("a")]);
    let b = Scripted::new("b", vec![Ok("b")]);
    let seen = Recorder::default();
    let out = down(vec![a.clone(), b], None, &fast(), &seen).await;
    assert_eq!(out.unwrap().output.text, "b");
    assert_eq!(a.calls(), 1);
    assert!(seen.retries().is_empty(), "no 45 s wait");
    // Alone, it waits (the sleep is capped in tests) and retries.
    let a = Scripted::new("a", vec![Err(http(429, long)), Ok("a")]);
    let seen = Recorder::default();
    let out = down(vec![a.clone()], None, &fast(), &seen).await;
    assert_eq!(out.unwrap().output.text, "a");
    assert_eq!(seen.retries(), [Duration::from_millis(5)]);
}

#[tokio::test]
async fn an_overflow_is_never_retried_and_wins_as_the_final_error() {
    let a = Scripted::new(
        "a",
        vec![Err(SummarizeError::Other(
            "prompt is too long: 300000 tokens".into(),
        ))],
    );
    let b = Scripted::new("b", vec![Err(http(401, None))]);
    let seen = Recorder::default();
    let out = down(vec![a.clone(), b], None, &fast(), &seen).await;
    assert!(out.unwrap_err().is_overflow());
    // Not retried as is: planned again at half the size, which this small window cannot
    // hold with the prompt's own instructions, so nothing more is sent.
    assert_eq!(a.calls(), 1);
    assert!(seen.retries().is_empty());
}

#[tokio::test]
async fn nothing_to_try_is_the_reference_error() {
    let seen = Recorder::default();
    let out = down(vec![], None, &fast(), &seen).await;
    assert_eq!(
        out.unwrap_err().to_string(),
        "Compaction failed: no available model"
    );
    assert_eq!(seen.restarts(), 0);
}

#[tokio::test]
async fn cancelling_ends_the_loop_during_a_backoff() {
    struct CancelOnRetry(CancellationToken);
    impl SummaryObserver for CancelOnRetry {
        fn delta(&self, _part: Purpose, _text: &str) {}
        fn status(&self, _part: Purpose, status: &SummaryStatus) {
            if matches!(status.state, SummaryState::Retrying { .. }) {
                self.0.cancel();
            }
        }
    }
    let a: Arc<dyn Summarizer> = Scripted::new("a", vec![Err(http(503, None)); 3]);
    let set = SummarizerSet {
        candidates: vec![a],
        retry: RetryPolicy {
            base_delay: Duration::from_secs(3_600),
            ..RetryPolicy::default()
        },
        ..SummarizerSet::default()
    }
    .for_operation();
    let cancel = CancellationToken::new();
    let b: &PromptBuilder = &builder;
    let j = job(vec![user("fix the parser")], b);
    let observer = CancelOnRetry(cancel.clone());
    let run = write_summary(&j, &set, &Chars4, &cancel, &observer);
    let out = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("no hour-long sleep");
    assert_eq!(out, Err(SummarizeError::Cancelled));
}
