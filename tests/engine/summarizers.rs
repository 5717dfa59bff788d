//! The summarizers against a fake LLM server on 127.0.0.1 (real HTTP/1.1 and SSE), the
//! ladder that decides which of them writes a summary (`write_summary`, as compactions and
//! branch summaries run it), and the extractive summarizer.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use compactd::session::AgentMessage;
use compactd::settings::SecretString;
use compactd::summarize::{
    self, BRANCH_MAX_TOKENS, HistoryPrompt, PromptBuilder, Prompts, Purpose, RetryPolicy,
    SummarizeError, Summarizer, SummarizerSet, SummaryJob, SummaryObserver, SummaryOutput,
    SummaryRequest, SummaryState, SummaryStatus, history_max_tokens, short_summary_max_tokens,
    turn_prefix_max_tokens, write_summary,
};
use compactd::testkit::{
    AnthropicConfig, AnthropicSummarizer, ExtractiveSummarizer, HttpOptions, OpenAiConfig,
    OpenAiSummarizer, RemoteConfig, RemoteSummarizer, Written, summarizers_with_env,
};
use compactd::tokens::Chars4;
use devtools::fake_llm::{FakeLlm, Reply, StreamEnd, anthropic_sse, openai_sse};
use serde_json::json;
use tokio_util::sync::CancellationToken;

pub(crate) fn msg(value: serde_json::Value) -> AgentMessage {
    AgentMessage::from_value(value).unwrap()
}

/// Upper bound on anything that could hang.
const TIMEOUT: Duration = Duration::from_secs(10);
const KEY: &str = "sk-test-SECRET-key-0123456789";
const RESERVE: u64 = 16_384;

fn http() -> HttpOptions {
    HttpOptions {
        connect_timeout: Duration::from_secs(5),
        first_token_timeout: Duration::from_secs(30),
        idle_timeout: Duration::from_secs(30),
        allow_insecure_http: false,
    }
}

fn openai(server: &FakeLlm) -> Arc<dyn Summarizer> {
    Arc::new(
        OpenAiSummarizer::new(OpenAiConfig {
            provider: "fake".into(),
            model: "gpt-test".into(),
            base_url: format!("{}/v1", server.url()),
            api_key: Some(SecretString::new(KEY)),
            context_window: 128_000,
            max_output_tokens: None,
            max_tokens_field: None,
            queue: None,
            discover_limits: false,
            http: http(),
        })
        .expect("loopback http is allowed"),
    )
}

fn anthropic(server: &FakeLlm) -> Arc<dyn Summarizer> {
    Arc::new(
        AnthropicSummarizer::new(AnthropicConfig {
            provider: "fakeant".into(),
            model: "claude-test".into(),
            base_url: server.url(),
            api_key: Some(SecretString::new(KEY)),
            context_window: 200_000,
            max_output_tokens: None,
            thinking: true,
            queue: None,
            http: http(),
        })
        .expect("loopback http is allowed"),
    )
}

fn remote(server: &FakeLlm, token: Option<&str>, timeout: Duration) -> RemoteSummarizer {
    RemoteSummarizer::new(RemoteConfig {
        endpoint: format!("{}/compact", server.url()),
        token: token.map(SecretString::new),
        timeout,
        context_window: 128_000,
        http: http(),
    })
    .expect("loopback http is allowed")
}

/// Retries fast: 10 ms base, sleeps capped at 20 ms whatever the server asks.
fn fast_policy(max_retries: u32) -> RetryPolicy {
    RetryPolicy {
        enabled: true,
        max_retries,
        base_delay: Duration::from_millis(10),
        move_on_after: Duration::from_secs(30),
        max_sleep: Some(Duration::from_millis(20)),
        ..RetryPolicy::default()
    }
}

fn history_request() -> SummaryRequest {
    let p = Prompts::embedded();
    let context = vec!["The user works on branch feature/x".to_owned()];
    let prompt = p.history_prompt(&HistoryPrompt {
        conversation: "[User]: fix the parser\n\n[Assistant]: done",
        previous_summary: Some("## Goal\n- Build the parser"),
        additional_context: &context,
        prompt_override: None,
        custom_instructions: Some("keep error messages"),
    });
    let mut req = SummaryRequest::new(
        Purpose::History,
        p.system.clone(),
        prompt,
        history_max_tokens(RESERVE),
    );
    req.reasoning = true;
    req
}

fn short_request() -> SummaryRequest {
    let p = Prompts::embedded();
    let mut req = SummaryRequest::new(
        Purpose::Short,
        p.system.clone(),
        p.short_summary_prompt("[User]: hi", "## Goal\n- g", &[]),
        short_summary_max_tokens(RESERVE),
    );
    req.reasoning = true;
    req
}

fn turn_prefix_request() -> SummaryRequest {
    let p = Prompts::embedded();
    SummaryRequest::new(
        Purpose::TurnPrefix,
        p.system.clone(),
        p.turn_prefix_prompt("[User]: big turn", Some("focus on SQL")),
        turn_prefix_max_tokens(RESERVE),
    )
}

fn branch_request() -> SummaryRequest {
    let p = Prompts::embedded();
    SummaryRequest::new(
        Purpose::Branch,
        p.system.clone(),
        p.branch_prompt("[User]: try another way", None, false),
        BRANCH_MAX_TOKENS,
    )
}

/// Runs one summarizer, collecting its deltas.
pub(crate) async fn run(
    summarizer: &dyn Summarizer,
    req: &SummaryRequest,
) -> (Result<SummaryOutput, SummarizeError>, Vec<String>) {
    let deltas = Mutex::new(Vec::new());
    let on_delta = |d: &str| deltas.lock().unwrap().push(d.to_owned());
    let out = tokio::time::timeout(
        TIMEOUT,
        summarizer.summarize(req, CancellationToken::new(), &on_delta),
    )
    .await
    .expect("summarizer finished in time");
    (out, deltas.into_inner().unwrap())
}

/// The summary statuses the ladder reported (queued, waiting, retrying), in order.
#[derive(Default)]
struct Statuses(Mutex<Vec<SummaryState>>);

impl SummaryObserver for Statuses {
    fn delta(&self, _part: Purpose, _text: &str) {}
    fn status(&self, _part: Purpose, status: &SummaryStatus) {
        self.0.lock().unwrap().push(status.state.clone());
    }
}

impl Statuses {
    /// Each retry's sleep and the error that caused it.
    fn retries(&self) -> Vec<(Duration, String)> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter_map(|s| match s {
                SummaryState::Retrying { after, error } => Some((*after, error.clone())),
                _ => None,
            })
            .collect()
    }
}

/// The history summary of `history_request`'s conversation, written down `candidates` then
/// `fallback` as a compaction writes it: one operation's breaker and retry budget, each
/// rung's input fitted to its window, its answers checked.
async fn run_candidates(
    candidates: &[Arc<dyn Summarizer>],
    fallback: Option<Arc<dyn Summarizer>>,
    policy: &RetryPolicy,
) -> (Result<Written, SummarizeError>, Statuses) {
    let set = SummarizerSet {
        candidates: candidates.to_vec(),
        fallback,
        retry: policy.clone(),
        breaker: Arc::default(),
    }
    .for_operation();
    let seen = Statuses::default();
    let out = tokio::time::timeout(
        TIMEOUT,
        write_summary(
            &history_job(&history_builder),
            &set,
            &Chars4,
            &CancellationToken::new(),
            &seen,
        ),
    )
    .await
    .expect("the ladder finished in time");
    (out, seen)
}

/// The prompt of [`history_request`], for any conversation and previous summary.
fn history_builder(conversation: &str, previous: Option<&str>) -> String {
    let context = vec!["The user works on branch feature/x".to_owned()];
    Prompts::embedded().history_prompt(&HistoryPrompt {
        conversation,
        previous_summary: previous,
        additional_context: &context,
        prompt_override: None,
        custom_instructions: Some("keep error messages"),
    })
}

/// The job whose one request is [`history_request`] (with the length the rung may write).
fn history_job<'a>(build: &'a PromptBuilder<'a>) -> SummaryJob<'a> {
    let messages = vec![
        msg(json!({"role": "user", "content": "fix the parser"})),
        msg(json!({"role": "assistant", "content": [{"type": "text", "text": "done"}]})),
    ];
    static SYSTEM: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let system = SYSTEM.get_or_init(|| Prompts::embedded().system.clone());
    let mut job = SummaryJob::new(
        Purpose::History,
        messages,
        system,
        build,
        history_max_tokens(RESERVE),
    );
    job.previous_summary = Some("## Goal\n- Build the parser".to_owned());
    job.reasoning = true;
    job
}

/// The parts of a history prompt every model-backed request must carry.
fn assert_history_prompt(prompt: &str) {
    assert!(
        prompt.starts_with("<conversation>\n[User]: fix the parser"),
        "{prompt}"
    );
    assert!(prompt.contains("\n</conversation>\n\n<previous-summary>\n## Goal\n- Build the parser\n</previous-summary>\n\n"));
    assert!(prompt.contains(
        "<additional-context>\n- The user works on branch feature/x\n</additional-context>\n\n"
    ));
    assert!(prompt.contains(&Prompts::embedded().update_summary));
    assert!(prompt.ends_with("\n\nAdditional focus: keep error messages"));
}

// ---------------------------------------------------------------------------------------------
// OpenAI

#[tokio::test]
async fn openai_request_shape_streaming_and_usage() {
    let server = FakeLlm::start().await;
    server.push(openai_sse(&["## Goal\n", "- Fix the ", "parser"], "stop"));
    let summarizer = openai(&server);
    let (out, deltas) = run(summarizer.as_ref(), &history_request()).await;
    let out = out.unwrap();
    assert_eq!(out.text, "## Goal\n- Fix the parser");
    assert_eq!(deltas, ["## Goal\n", "- Fix the ", "parser"]);
    assert_eq!(out.model, "fake/gpt-test");
    let usage = out.usage.unwrap();
    assert_eq!(
        (
            usage.input,
            usage.cache_read,
            usage.output,
            usage.total_tokens
        ),
        (60, 40, 20, 120)
    );

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(
        request.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    let body = request.json();
    assert_eq!(body["model"], "gpt-test");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert_eq!(body["max_tokens"], 13_107);
    assert!(
        body.get("reasoning_effort").is_none(),
        "reasoning is never forced"
    );
    assert_eq!(body["messages"][0]["role"], "system");
    assert_eq!(body["messages"][0]["content"], Prompts::embedded().system);
    assert_eq!(body["messages"][1]["role"], "user");
    assert_history_prompt(body["messages"][1]["content"].as_str().unwrap());
}

#[tokio::test]
async fn openai_max_tokens_per_call() {
    let server = FakeLlm::start().await;
    server.set_default(openai_sse(&["ok"], "stop"));
    let summarizer = openai(&server);
    for req in [short_request(), turn_prefix_request(), branch_request()] {
        run(summarizer.as_ref(), &req).await.0.unwrap();
    }
    let budgets: Vec<_> = server
        .requests()
        .iter()
        .map(|r| r.json()["max_tokens"].clone())
        .collect();
    assert_eq!(budgets, [json!(512), json!(8_192), json!(2_048)]);
    let prefix = server.requests()[1].json()["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        prefix.ends_with("Additional focus: focus on SQL"),
        "{prefix}"
    );
}

#[tokio::test]
async fn openai_429_with_retry_after_then_success() {
    let server = FakeLlm::start().await;
    server.push(
        Reply::json(429, json!({"error": {"message": "Rate limit reached"}}))
            .header("retry-after", "1"),
    );
    server.push(openai_sse(&["summary"], "stop"));
    // No cap on the sleep: the server's one second is what the loop waits.
    let policy = RetryPolicy {
        max_sleep: None,
        ..fast_policy(3)
    };
    let (out, seen) = run_candidates(&[openai(&server)], None, &policy).await;
    assert_eq!(out.unwrap().output.text, "summary");
    assert_eq!(server.requests().len(), 2);
    let retries = seen.retries();
    let (after, error) = retries.first().expect("a retry happened");
    assert_eq!(
        *after,
        Duration::from_secs(1),
        "the 10 ms back-off is raised to retry-after"
    );
    assert!(error.contains("429"), "{error}");
    assert!(!error.contains(KEY));
}

#[tokio::test]
async fn openai_500s_open_the_breaker_then_the_next_candidate_answers() {
    let failing = FakeLlm::start().await;
    failing.set_default(Reply::json(
        500,
        json!({"error": {"message": "upstream exploded"}}),
    ));
    let healthy = FakeLlm::start().await;
    healthy.push(openai_sse(&["from the second"], "stop"));
    let candidates = [openai(&failing), anthropic_with_openai_stream(&healthy)];
    let (out, _) = run_candidates(&candidates, None, &fast_policy(2)).await;
    let out = out.unwrap();
    assert_eq!(out.output.text, "from the second");
    // The same 500 twice opens the breaker: one retry, not the whole budget of two.
    assert_eq!(failing.requests().len(), 2, "one attempt and one retry");
    assert_eq!(healthy.requests().len(), 1);
    let failed: Vec<_> = out
        .report
        .failures
        .iter()
        .map(|f| f.summarizer.as_str())
        .collect();
    assert_eq!(failed, ["fake/gpt-test"]);
    assert_eq!(out.report.summarizer, "second/m2");
}

/// A second OpenAI-compatible candidate with its own id.
fn anthropic_with_openai_stream(server: &FakeLlm) -> Arc<dyn Summarizer> {
    Arc::new(
        OpenAiSummarizer::new(OpenAiConfig {
            provider: "second".into(),
            model: "m2".into(),
            base_url: server.url(),
            api_key: None,
            context_window: 32_000,
            max_output_tokens: None,
            max_tokens_field: None,
            queue: None,
            discover_limits: false,
            http: http(),
        })
        .unwrap(),
    )
}

#[tokio::test]
async fn openai_stream_cut_midway_is_a_transient_error_and_is_retried() {
    let server = FakeLlm::start().await;
    server.push(
        openai_sse(&["## Goal\n", "- part"], "stop")
            .first_chunks(2)
            .ending(StreamEnd::Cut),
    );
    server.push(openai_sse(&["whole"], "stop"));
    let summarizer = openai(&server);
    let (out, deltas) = run(summarizer.as_ref(), &history_request()).await;
    let err = out.unwrap_err();
    assert!(matches!(err, SummarizeError::Network(_)), "{err:?}");
    assert_eq!(deltas, ["## Goal\n"], "only what arrived was streamed");

    server.push(
        openai_sse(&["## Goal\n"], "stop")
            .first_chunks(2)
            .ending(StreamEnd::Cut),
    );
    server.push(openai_sse(&["whole"], "stop"));
    let (out, _) = run_candidates(&[summarizer], None, &fast_policy(3)).await;
    assert_eq!(out.unwrap().output.text, "whole");
}

#[tokio::test]
async fn openai_hung_server_is_cancelled_and_the_connection_closed() {
    for reply in [
        Reply::hang(),
        openai_sse(&["partial"], "stop")
            .first_chunks(2)
            .ending(StreamEnd::Hang),
    ] {
        let server = FakeLlm::start().await;
        server.push(reply);
        let summarizer = openai(&server);
        assert_cancelled_promptly(&server, summarizer).await;
    }
}

async fn assert_cancelled_promptly(server: &FakeLlm, summarizer: Arc<dyn Summarizer>) {
    let cancel = CancellationToken::new();
    let task = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            let req = history_request();
            summarizer.summarize(&req, cancel, &|_| {}).await
        })
    };
    server.wait_for_requests(1, TIMEOUT).await;
    assert_eq!(server.client_closed(), 0);
    cancel.cancel();
    let out = tokio::time::timeout(Duration::from_secs(2), task)
        .await
        .expect("cancellation is prompt")
        .unwrap();
    assert_eq!(out, Err(SummarizeError::Cancelled));
    server.wait_client_closed(1, TIMEOUT).await;
}

#[tokio::test]
async fn a_silent_server_hits_the_idle_timeout_not_a_total_one() {
    let server = FakeLlm::start().await;
    // Slow but steady: 14 events 100 ms apart outlast the 1 s idle limit as a whole.
    let letters = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"];
    server.push(openai_sse(&letters, "stop").chunk_delay(Duration::from_millis(100)));
    server.push(Reply::hang());
    server.push(
        openai_sse(&["x"], "stop")
            .first_chunks(2)
            .ending(StreamEnd::Hang),
    );
    let summarizer = OpenAiSummarizer::new(OpenAiConfig {
        provider: "fake".into(),
        model: "m".into(),
        base_url: server.url(),
        api_key: None,
        context_window: 1_000,
        max_output_tokens: None,
        max_tokens_field: None,
        queue: None,
        discover_limits: false,
        http: HttpOptions {
            first_token_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(1),
            ..http()
        },
    })
    .unwrap();
    let (out, deltas) = run(&summarizer, &history_request()).await;
    assert_eq!(out.unwrap().text, "abcdefghij");
    assert_eq!(deltas.len(), 10);
    for _ in 0..2 {
        let out = run(&summarizer, &history_request()).await.0;
        assert!(matches!(out, Err(SummarizeError::Timeout(_))), "{out:?}");
    }
}

#[tokio::test]
async fn the_first_token_may_take_longer_than_the_idle_timeout() {
    let server = FakeLlm::start().await;
    // A local model reading its prompt: 1.2 s before anything, then a steady stream.
    server.push(
        openai_sse(&["## Goal\n", "- slow start"], "stop").delayed(Duration::from_millis(1_200)),
    );
    // Headers at once, then chunks 400 ms apart: the role chunk is no token, so the first token
    // comes after 800 ms, longer than the idle timeout.
    server.push(openai_sse(&["late", " but fine"], "stop").chunk_delay(Duration::from_millis(400)));
    // Never a first token.
    server.push(Reply::hang());
    let summarizer = OpenAiSummarizer::new(OpenAiConfig {
        provider: "local".into(),
        model: "m".into(),
        base_url: server.url(),
        api_key: None,
        context_window: 4_096,
        max_output_tokens: None,
        max_tokens_field: None,
        http: HttpOptions {
            first_token_timeout: Duration::from_secs(3),
            idle_timeout: Duration::from_millis(500),
            ..http()
        },
        queue: None,
        discover_limits: false,
    })
    .unwrap();
    let (out, _) = run(&summarizer, &history_request()).await;
    assert_eq!(out.unwrap().text, "## Goal\n- slow start");
    let (out, _) = run(&summarizer, &history_request()).await;
    assert_eq!(out.unwrap().text, "late but fine");
    let started = std::time::Instant::now();
    let (out, _) = run(&summarizer, &history_request()).await;
    let Err(SummarizeError::Timeout(message)) = out else {
        panic!("expected a timeout, got {out:?}");
    };
    assert!(message.contains("first-token timeout"), "{message}");
    assert!(started.elapsed() >= Duration::from_secs(3));
}

#[tokio::test]
async fn openai_length_truncation_and_empty_output_are_rejected() {
    let server = FakeLlm::start().await;
    server.push(openai_sse(&["## Goal\n- half"], "length"));
    server.push(openai_sse(&[], "stop"));
    server.push(openai_sse(&["  \n "], "stop"));
    let summarizer = openai(&server);
    assert_eq!(
        run(summarizer.as_ref(), &history_request()).await.0,
        Err(SummarizeError::Truncated {
            text: "## Goal\n- half".into()
        })
    );
    assert_eq!(
        run(summarizer.as_ref(), &history_request()).await.0,
        Err(SummarizeError::Empty)
    );
    assert_eq!(
        run(summarizer.as_ref(), &history_request()).await.0,
        Err(SummarizeError::Empty)
    );
}

#[tokio::test]
async fn openai_overflow_is_not_retried_and_is_reported() {
    let overflowing = FakeLlm::start().await;
    overflowing.set_default(Reply::json(
        400,
        json!({"error": {"message": "This model's maximum context length is 8192 tokens", "code": "context_length_exceeded"}}),
    ));
    let (out, seen) = run_candidates(
        &[openai(&overflowing)],
        Some(Arc::new(ExtractiveSummarizer)),
        &fast_policy(3),
    )
    .await;
    let out = out.unwrap();
    assert_eq!(out.output.model, "extractive", "the fallback answers");
    assert_eq!(
        overflowing.requests().len(),
        1,
        "an overflow is never retried as is"
    );
    assert!(seen.retries().is_empty());
    let failure = &out.report.failures[0];
    assert_eq!(failure.summarizer, "fake/gpt-test");
    assert!(
        failure.reason.starts_with("context overflow"),
        "{failure:?}"
    );

    let (out, _) = run_candidates(&[openai(&overflowing)], None, &fast_policy(3)).await;
    assert!(out.unwrap_err().is_overflow());
}

#[tokio::test]
async fn api_keys_never_appear_in_errors_or_debug() {
    let server = FakeLlm::start().await;
    server.set_default(Reply::json(
        401,
        json!({"error": {"message": format!("Incorrect API key provided: {KEY}")}}),
    ));
    let summarizer = openai(&server);
    let err = run(summarizer.as_ref(), &history_request())
        .await
        .0
        .unwrap_err();
    assert!(
        matches!(err, SummarizeError::Http { status: 401, .. }),
        "{err:?}"
    );
    for text in [err.to_string(), format!("{err:?}")] {
        assert!(!text.contains(KEY), "{text}");
        assert!(text.contains("Incorrect API key provided: ***"), "{text}");
    }
    let ant = anthropic(&server);
    let err = run(ant.as_ref(), &history_request()).await.0.unwrap_err();
    assert!(!format!("{err} {err:?}").contains(KEY));

    let debug_openai = format!(
        "{:?}",
        OpenAiSummarizer::new(OpenAiConfig {
            provider: "p".into(),
            model: "m".into(),
            base_url: "https://api.example.com".into(),
            api_key: Some(SecretString::new(KEY)),
            context_window: 1,
            max_output_tokens: None,
            max_tokens_field: None,
            queue: None,
            discover_limits: false,
            http: http(),
        })
        .unwrap()
    );
    assert!(
        !debug_openai.contains(KEY) && debug_openai.contains("***"),
        "{debug_openai}"
    );
    let debug_remote = format!("{:?}", remote(&server, Some(KEY), TIMEOUT));
    assert!(!debug_remote.contains(KEY), "{debug_remote}");
    let remote_err = remote(&server, Some(KEY), TIMEOUT)
        .summarize(&history_request(), CancellationToken::new(), &|_| {})
        .await
        .unwrap_err();
    assert!(!format!("{remote_err} {remote_err:?}").contains(KEY));
}

// ---------------------------------------------------------------------------------------------
// Anthropic

#[tokio::test]
async fn anthropic_request_shape_streaming_and_usage() {
    let server = FakeLlm::start().await;
    server.push(anthropic_sse(&["## Goal\n", "- Fix it"], "end_turn"));
    let summarizer = anthropic(&server);
    let (out, deltas) = run(summarizer.as_ref(), &history_request()).await;
    let out = out.unwrap();
    assert_eq!(out.text, "## Goal\n- Fix it");
    assert_eq!(deltas, ["## Goal\n", "- Fix it"]);
    assert_eq!(out.model, "fakeant/claude-test");
    let usage = out.usage.unwrap();
    assert_eq!(
        (
            usage.input,
            usage.cache_read,
            usage.output,
            usage.total_tokens
        ),
        (100, 40, 20, 160)
    );

    let request = &server.requests()[0];
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(request.header("x-api-key"), Some(KEY));
    assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(request.header("authorization"), None);
    let body = request.json();
    assert_eq!(body["model"], "claude-test");
    assert_eq!(body["stream"], true);
    assert_eq!(body["max_tokens"], 13_107);
    assert_eq!(body["system"], Prompts::embedded().system);
    assert_eq!(body["messages"][0]["role"], "user");
    assert_history_prompt(body["messages"][0]["content"].as_str().unwrap());
    // Reasoning asked for, with room: a thinking budget below max_tokens.
    let budget = body["thinking"]["budget_tokens"].as_u64().unwrap();
    assert!((1_024..13_107).contains(&budget), "{budget}");
}

#[tokio::test]
async fn anthropic_thinking_stays_off_without_room_or_request() {
    let server = FakeLlm::start().await;
    server.set_default(anthropic_sse(&["ok"], "end_turn"));
    let summarizer = anthropic(&server);
    for req in [short_request(), turn_prefix_request(), branch_request()] {
        run(summarizer.as_ref(), &req).await.0.unwrap();
    }
    let requests = server.requests();
    let budgets: Vec<_> = requests
        .iter()
        .map(|r| r.json()["max_tokens"].clone())
        .collect();
    assert_eq!(budgets, [json!(512), json!(8_192), json!(2_048)]);
    for request in &requests {
        assert!(request.json().get("thinking").is_none(), "{}", request.body);
    }
}

#[tokio::test]
async fn anthropic_429_then_success_and_overloaded_event_retried() {
    let server = FakeLlm::start().await;
    server.push(
        Reply::json(
            429,
            json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}),
        )
        .header("retry-after-ms", "15"),
    );
    server.push(Reply::sse(&["event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}"]));
    server.push(anthropic_sse(&["fine"], "end_turn"));
    let (out, seen) = run_candidates(&[anthropic(&server)], None, &fast_policy(3)).await;
    assert_eq!(out.unwrap().output.text, "fine");
    assert_eq!(server.requests().len(), 3);
    let sleeps: Vec<Duration> = seen.retries().into_iter().map(|(after, _)| after).collect();
    // The server's 15 ms over the first back-off of 10 ms; then the back-off doubled.
    assert_eq!(
        sleeps,
        [Duration::from_millis(15), Duration::from_millis(20)]
    );
}

#[tokio::test]
async fn anthropic_500s_exhaust_retries_then_the_next_candidate() {
    let failing = FakeLlm::start().await;
    failing.set_default(Reply::json(
        503,
        json!({"type": "error", "error": {"type": "api_error", "message": "busy"}}),
    ));
    let healthy = FakeLlm::start().await;
    healthy.push(anthropic_sse(&["second"], "end_turn"));
    let second: Arc<dyn Summarizer> = Arc::new(
        AnthropicSummarizer::new(AnthropicConfig {
            provider: "other".into(),
            model: "claude-2nd".into(),
            base_url: healthy.url(),
            api_key: Some(SecretString::new(KEY)),
            context_window: 200_000,
            max_output_tokens: None,
            thinking: false,
            queue: None,
            http: http(),
        })
        .unwrap(),
    );
    let (out, _) = run_candidates(&[anthropic(&failing), second], None, &fast_policy(1)).await;
    let out = out.unwrap().output;
    assert_eq!(
        (out.text.as_str(), out.model.as_str()),
        ("second", "other/claude-2nd")
    );
    assert_eq!(failing.requests().len(), 2);
}

#[tokio::test]
async fn anthropic_cut_stream_truncation_and_empty_output() {
    let server = FakeLlm::start().await;
    server.push(
        anthropic_sse(&["a", "b"], "end_turn")
            .first_chunks(4)
            .ending(StreamEnd::Cut),
    );
    server.push(anthropic_sse(&["## Goal\n- cut off"], "max_tokens"));
    server.push(anthropic_sse(&[], "end_turn"));
    let summarizer = anthropic(&server);
    let (out, deltas) = run(summarizer.as_ref(), &history_request()).await;
    assert!(matches!(out, Err(SummarizeError::Network(_))), "{out:?}");
    assert_eq!(deltas, ["a"]);
    assert_eq!(
        run(summarizer.as_ref(), &history_request()).await.0,
        Err(SummarizeError::Truncated {
            text: "## Goal\n- cut off".into()
        })
    );
    assert_eq!(
        run(summarizer.as_ref(), &history_request()).await.0,
        Err(SummarizeError::Empty)
    );
}

#[tokio::test]
async fn anthropic_hung_server_is_cancelled_and_the_connection_closed() {
    let server = FakeLlm::start().await;
    server.push(
        anthropic_sse(&["x"], "end_turn")
            .first_chunks(3)
            .ending(StreamEnd::Hang),
    );
    assert_cancelled_promptly(&server, anthropic(&server)).await;
}

#[tokio::test]
async fn cancelling_the_ladder_ends_it_during_a_backoff() {
    /// Cancels the summary when its first retry is announced.
    struct CancelOnRetry(CancellationToken);
    impl SummaryObserver for CancelOnRetry {
        fn delta(&self, _part: Purpose, _text: &str) {}
        fn status(&self, _part: Purpose, status: &SummaryStatus) {
            if matches!(status.state, SummaryState::Retrying { .. }) {
                self.0.cancel();
            }
        }
    }
    let server = FakeLlm::start().await;
    server.set_default(Reply::json(503, json!({"error": "busy"})));
    let set = SummarizerSet {
        candidates: vec![openai(&server)],
        retry: RetryPolicy {
            base_delay: Duration::from_secs(3_600),
            max_sleep: None,
            ..fast_policy(3)
        },
        ..SummarizerSet::default()
    }
    .for_operation();
    let cancel = CancellationToken::new();
    let observer = CancelOnRetry(cancel.clone());
    let job = history_job(&history_builder);
    let run = write_summary(&job, &set, &Chars4, &cancel, &observer);
    let out = tokio::time::timeout(TIMEOUT, run)
        .await
        .expect("no hour-long sleep");
    assert_eq!(out, Err(SummarizeError::Cancelled));
}

// ---------------------------------------------------------------------------------------------
// Remote endpoint

#[tokio::test]
async fn remote_success_with_and_without_short_summary() {
    let server = FakeLlm::start().await;
    server.push(Reply::json(200, json!({"summary": "## Goal\n- g"})));
    server.push(Reply::json(
        200,
        json!({"summary": "## Goal\n- g", "shortSummary": "I fixed it."}),
    ));
    let summarizer = remote(&server, None, TIMEOUT);
    let first = run(&summarizer, &history_request()).await.0.unwrap();
    assert_eq!(
        (first.text.as_str(), first.short_summary.as_deref()),
        ("## Goal\n- g", None)
    );
    let second = run(&summarizer, &history_request()).await.0.unwrap();
    assert_eq!(second.short_summary.as_deref(), Some("I fixed it."));

    let request = &server.requests()[0];
    assert_eq!(
        (request.method.as_str(), request.path.as_str()),
        ("POST", "/compact")
    );
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert_eq!(request.header("authorization"), None);
    let body = request.json();
    assert_eq!(body["systemPrompt"], Prompts::embedded().system);
    assert_history_prompt(body["prompt"].as_str().unwrap());
    assert_eq!(
        body.as_object().unwrap().len(),
        2,
        "only systemPrompt and prompt are sent"
    );
}

#[tokio::test]
async fn remote_sends_the_bearer_token() {
    let server = FakeLlm::start().await;
    server.push(Reply::json(200, json!({"summary": "s"})));
    run(
        &remote(&server, Some("tok-123"), TIMEOUT),
        &history_request(),
    )
    .await
    .0
    .unwrap();
    assert_eq!(
        server.requests()[0].header("authorization"),
        Some("Bearer tok-123")
    );
}

#[tokio::test]
async fn remote_errors_use_the_reference_strings() {
    let server = FakeLlm::start().await;
    server.push(Reply::text(503, "maintenance"));
    server.push(Reply::text(200, "not json"));
    server.push(Reply::json(200, json!({"summary": 42})));
    server.push(Reply::json(200, json!({"text": "s"})));
    let summarizer = remote(&server, None, TIMEOUT);
    let err = run(&summarizer, &history_request()).await.0.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Remote compaction failed (503 Service Unavailable)"
    );
    assert!(matches!(err, SummarizeError::Http { status: 503, .. }));
    let err = run(&summarizer, &history_request()).await.0.unwrap_err();
    let parse_error = serde_json::from_str::<serde_json::Value>("not json")
        .unwrap_err()
        .to_string();
    assert_eq!(err.to_string(), parse_error);
    for _ in 0..2 {
        let err = run(&summarizer, &history_request()).await.0.unwrap_err();
        assert_eq!(
            err.to_string(),
            "Remote compaction response missing summary"
        );
    }
}

#[tokio::test]
async fn remote_times_out_and_can_be_cancelled() {
    let server = FakeLlm::start().await;
    server.push(Reply::hang());
    let out = run(
        &remote(&server, None, Duration::from_millis(200)),
        &history_request(),
    )
    .await
    .0;
    assert!(matches!(out, Err(SummarizeError::Timeout(_))), "{out:?}");
    server.wait_client_closed(1, TIMEOUT).await;

    let server = FakeLlm::start().await;
    server.push(Reply::hang());
    assert_cancelled_promptly(
        &server,
        Arc::new(remote(&server, None, Duration::from_secs(600))),
    )
    .await;
}

#[tokio::test]
async fn plain_http_to_other_hosts_is_refused() {
    let refused = RemoteSummarizer::new(RemoteConfig {
        endpoint: "http://summaries.example.com/compact".into(),
        token: None,
        timeout: TIMEOUT,
        context_window: 1,
        http: http(),
    })
    .unwrap_err();
    assert!(refused.to_string().contains("http://"), "{refused}");
    let openai = OpenAiSummarizer::new(OpenAiConfig {
        provider: "p".into(),
        model: "m".into(),
        base_url: "http://llm.example.com/v1".into(),
        api_key: None,
        context_window: 1,
        max_output_tokens: None,
        max_tokens_field: None,
        queue: None,
        discover_limits: false,
        http: http(),
    });
    assert!(openai.is_err());
    let allowed = RemoteSummarizer::new(RemoteConfig {
        endpoint: "http://summaries.example.com/compact".into(),
        token: None,
        timeout: TIMEOUT,
        context_window: 1,
        http: HttpOptions {
            allow_insecure_http: true,
            ..http()
        },
    });
    assert!(allowed.is_ok());
}

// ---------------------------------------------------------------------------------------------
// Candidates

#[tokio::test]
async fn no_candidates_and_no_fallback_is_the_reference_error() {
    let (out, seen) = run_candidates(&[], None, &fast_policy(3)).await;
    assert_eq!(
        out.unwrap_err().to_string(),
        "Compaction failed: no available model"
    );
    assert!(seen.0.lock().unwrap().is_empty());
    let (out, _) = run_candidates(&[], Some(Arc::new(ExtractiveSummarizer)), &fast_policy(3)).await;
    let out = out.unwrap();
    assert_eq!(out.output.model, "extractive");
    assert!(out.report.failures.is_empty());
}

#[tokio::test]
async fn a_long_retry_after_moves_on_to_the_next_candidate() {
    let slow = FakeLlm::start().await;
    slow.set_default(Reply::json(429, json!({"error": "later"})).header("retry-after", "120"));
    let (out, seen) = run_candidates(
        &[openai(&slow)],
        Some(Arc::new(ExtractiveSummarizer)),
        &fast_policy(3),
    )
    .await;
    assert_eq!(out.unwrap().output.model, "extractive");
    assert_eq!(
        slow.requests().len(),
        1,
        "no 2-minute wait when another candidate remains"
    );
    assert!(seen.retries().is_empty());
}

#[test]
fn prompt_builders_are_reexported_for_the_engine() {
    // The engine composes requests from these; keep the public paths stable.
    let p = Prompts::embedded();
    let text = summarize::branch_summary_text(&p.branch_preamble, "## Goal\n- x", "");
    assert!(text.contains(":\n\n## Goal"), "{text}");
}

#[tokio::test]
async fn endless_streams_are_cut_at_the_size_caps_and_not_retried_as_transient() {
    let delta =
        json!({"choices":[{"index":0,"delta":{"content":"y".repeat(4000)},"finish_reason":null}]});
    let block = json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"y".repeat(4000)}});
    let openai_stream = Reply::endless(&delta.to_string(), Duration::ZERO);
    let anthropic_stream = Reply::endless(
        &format!("event: content_block_delta\ndata: {block}"),
        Duration::ZERO,
    );
    let cases: [(Arc<dyn Summarizer>, FakeLlm, Reply); 2] = {
        let a = FakeLlm::start().await;
        let b = FakeLlm::start().await;
        [
            (openai(&a), a, openai_stream),
            (anthropic(&b), b, anthropic_stream),
        ]
    };
    for (summarizer, server, stream) in cases {
        server.push(stream.clone());
        let (out, deltas) = run(summarizer.as_ref(), &short_request()).await;
        let err = out.expect_err("an endless stream cannot succeed");
        assert!(
            matches!(err, SummarizeError::Protocol(_)),
            "{}: {err:?}",
            summarizer.id()
        );
        let text: usize = deltas.iter().map(String::len).sum();
        assert!(text < 1 << 20, "{text} bytes of text before the cut");
        server.wait_client_closed(1, TIMEOUT).await;
        // Down the ladder, the cut is a failure of the rung, not a transient one: no retry.
        server.push(stream);
        let (out, seen) = run_candidates(&[summarizer], None, &fast_policy(3)).await;
        assert!(out.is_err());
        assert!(seen.retries().is_empty());
        assert_eq!(server.requests().len(), 2, "one request of the ladder's");
    }
}

/// Spec §4.15's last model rung: every configured model fails, and the available model with the
/// largest context window (here a keyless server on this machine that no setting names as a
/// summarizer) answers before the extractive fallback is needed.
#[tokio::test]
async fn the_largest_window_model_answers_when_every_configured_model_fails() {
    let failing = FakeLlm::start().await;
    failing.set_default(Reply::json(
        400,
        json!({"error": {"message": "model not loaded"}}),
    ));
    let wide = FakeLlm::start().await;
    wide.push(openai_sse(&["from the widest"], "stop"));
    let settings = json!({
        "summarizer": {"model": "small/a", "candidates": ["small/b"]},
        "modelRoles": {"smol": "small/c"},
        "providers": {
            "small": {"kind": "openai", "baseUrl": format!("{}/v1", failing.url()),
                      "discoverLimits": false,
                      "models": {"a": {"contextWindow": 32000}, "b": {"contextWindow": 64000},
                                 "c": {"contextWindow": 128000}}},
            "wide": {"kind": "openai", "baseUrl": format!("{}/v1", wide.url()),
                     "discoverLimits": false,
                     "models": {"long": {"contextWindow": 1_000_000}}}
        }
    });
    let mut stack = compactd::settings::SettingsStack::new();
    stack.set_initialize(&settings).expect("valid settings");
    let settings = stack.effective().expect("effective settings");
    let set = summarizers_with_env(&settings, None, &|_| None).expect("summarizers");
    assert_eq!(
        set.ids(),
        ["small/a", "small/b", "small/c", "wide/long", "extractive"]
    );

    let (out, _) = run_candidates(&set.candidates, set.fallback.clone(), &fast_policy(2)).await;
    let out = out.expect("the widest model answers");
    assert_eq!(out.output.text, "from the widest");
    // The three configured models were each tried once (a 400 is not retried), in order.
    let asked: Vec<String> = failing
        .requests()
        .iter()
        .map(|r| r.json()["model"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(asked, ["a", "b", "c"]);
    assert_eq!(wide.requests().len(), 1);
    assert_eq!(wide.requests()[0].json()["model"], "long");
    let failed: Vec<_> = out
        .report
        .failures
        .iter()
        .map(|f| f.summarizer.as_str())
        .collect();
    assert_eq!(failed, ["small/a", "small/b", "small/c"]);
    assert_eq!(out.report.summarizer, "wide/long");
}
