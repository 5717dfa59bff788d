//! OpenAI-compatible chat completions (OpenAI, OpenRouter, Ollama, llama.cpp, vLLM, ...):
//! one streamed `POST {baseUrl}/chat/completions` per summary.
//!
//! An answer that stops at the output limit (`finish_reason: "length"`, or as many completion
//! tokens as were allowed whatever the reason says) is returned as
//! [`SummarizeError::Truncated`] with its text, for the answer checks to keep its complete
//! sections.

use std::sync::Arc;

use futures::StreamExt;
use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::discover::{self, ServedLimits};
use super::http::{self, Clock, HttpOptions};
use super::queue::RequestQueue;
use super::{
    DeltaSink, SummarizeError, Summarizer, SummaryOutput, SummaryRequest, cancellable,
    is_overflow_message,
};
use crate::session::Usage;
use crate::settings::SecretString;

/// Which request field carries the output budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxTokensField {
    /// `max_tokens`: understood by every compatible server.
    MaxTokens,
    /// `max_completion_tokens`: required by OpenAI's reasoning models, which reject
    /// `max_tokens`.
    MaxCompletionTokens,
}

/// Configuration of an [`OpenAiSummarizer`].
#[derive(Debug, Clone)]
pub struct OpenAiConfig {
    /// Provider name, the first half of the summarizer's id.
    pub provider: String,
    pub model: String,
    /// e.g. `https://api.openai.com/v1`; `/chat/completions` is appended.
    pub base_url: String,
    /// Sent as a bearer token; `None` for local servers that need none.
    pub api_key: Option<SecretString>,
    pub context_window: u64,
    /// The model's `maxOutputTokens`; `None`: a quarter of the window (see
    /// [`default_output_limit`]).
    pub max_output_tokens: Option<u32>,
    /// `None`: `max_completion_tokens` for api.openai.com, `max_tokens` elsewhere.
    pub max_tokens_field: Option<MaxTokensField>,
    pub http: HttpOptions,
    /// Requests to this server wait here for a free slot; `None`: no limit.
    pub queue: Option<Arc<RequestQueue>>,
    /// Read the window and output limit from the server before the first request
    /// (see [`discover`]).
    pub discover_limits: bool,
}

/// The output limit of a model with no `maxOutputTokens`: a quarter of its window, so the
/// answer never takes the room its input needs.
pub fn default_output_limit(context_window: u64) -> u32 {
    u32::try_from((context_window / 4).max(1)).unwrap_or(u32::MAX)
}

/// Summarises with a chat completions API, streaming.
#[derive(Debug)]
pub struct OpenAiSummarizer {
    config: OpenAiConfig,
    url: reqwest::Url,
    max_tokens_field: MaxTokensField,
    client: reqwest::Client,
    served: tokio::sync::OnceCell<ServedLimits>,
}

impl OpenAiSummarizer {
    /// Checks the URL (https, or http on loopback unless allowed) and builds the client.
    pub fn new(config: OpenAiConfig) -> Result<Self, SummarizeError> {
        let url = format!("{}/chat/completions", config.base_url.trim_end_matches('/'));
        let url = http::check_url(&url, config.http.allow_insecure_http)?;
        let max_tokens_field =
            config
                .max_tokens_field
                .unwrap_or(if url.host_str() == Some("api.openai.com") {
                    MaxTokensField::MaxCompletionTokens
                } else {
                    MaxTokensField::MaxTokens
                });
        let client = http::build_client(&config.http)?;
        Ok(OpenAiSummarizer {
            config,
            url,
            max_tokens_field,
            client,
            served: tokio::sync::OnceCell::new(),
        })
    }

    /// What the server said about its limits, once asked.
    fn served(&self) -> ServedLimits {
        self.served.get().copied().unwrap_or_default()
    }

    fn body(&self, req: &SummaryRequest) -> Value {
        let budget_field = match self.max_tokens_field {
            MaxTokensField::MaxTokens => "max_tokens",
            MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
        };
        let mut body = json!({
            "model": self.config.model,
            "messages": [
                {"role": "system", "content": req.system_prompt},
                {"role": "user", "content": req.prompt},
            ],
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        body[budget_field] = json!(req.max_tokens);
        body
    }

    async fn run(
        &self,
        req: &SummaryRequest,
        on_delta: DeltaSink<'_>,
    ) -> Result<SummaryOutput, SummarizeError> {
        let mut request = self.client.post(self.url.clone()).json(&self.body(req));
        if let Some(key) = &self.config.api_key {
            request = request.bearer_auth(key.expose());
        }
        let mut clock = Clock::start(&self.config.http);
        let response = clock
            .within(request.send())
            .await?
            .map_err(http::transport_error)?;
        if !response.status().is_success() {
            let key = self.config.api_key.as_ref();
            return Err(clock
                .within(http::error_from_response(response, key))
                .await?);
        }
        let mut events = Box::pin(http::sse_events(response, req.max_tokens));
        let mut stream = StreamState::default();
        while let Some(event) = clock.within(events.next()).await? {
            let data = event?.data;
            let data = data.trim();
            if data == "[DONE]" {
                stream.done = true;
                break;
            }
            if !data.is_empty() {
                stream.apply(data, on_delta)?;
                if stream.started {
                    clock.token();
                }
                http::check_text_len(stream.text.len(), req.max_tokens)?;
            }
        }
        stream.finish(self.id(), req.max_tokens)
    }
}

/// What the stream has produced so far.
#[derive(Default)]
struct StreamState {
    text: String,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    done: bool,
    /// Any token arrived (text or reasoning).
    started: bool,
}

impl StreamState {
    fn apply(&mut self, data: &str, on_delta: DeltaSink<'_>) -> Result<(), SummarizeError> {
        let chunk: Value = serde_json::from_str(data).map_err(|e| {
            SummarizeError::Protocol(format!("Invalid JSON in chat completion stream: {e}"))
        })?;
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            return Err(stream_error(error));
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(parse_usage(usage));
        }
        for choice in chunk["choices"].as_array().into_iter().flatten() {
            let delta = &choice["delta"];
            if let Some(text) = delta["content"].as_str()
                && !text.is_empty()
            {
                self.started = true;
                self.text.push_str(text);
                on_delta(text);
            }
            // Reasoning models think before they answer: that is the answer starting too.
            if ["reasoning_content", "reasoning"]
                .iter()
                .any(|k| delta[*k].as_str().is_some_and(|t| !t.is_empty()))
            {
                self.started = true;
            }
            if let Some(reason) = choice["finish_reason"].as_str() {
                self.finish_reason = Some(reason.to_owned());
            }
        }
        Ok(())
    }

    fn finish(self, model: String, max_tokens: u32) -> Result<SummaryOutput, SummarizeError> {
        if !self.done && self.finish_reason.is_none() {
            return Err(http::incomplete_stream());
        }
        // Some servers say "stop" when they stopped at the limit: the count tells.
        let at_limit = self
            .usage
            .as_ref()
            .is_some_and(|u| u.output >= u64::from(max_tokens));
        match self.finish_reason.as_deref() {
            Some("length") => return Err(SummarizeError::Truncated { text: self.text }),
            _ if at_limit && !self.text.trim().is_empty() => {
                return Err(SummarizeError::Truncated { text: self.text });
            }
            Some("content_filter") => {
                return Err(SummarizeError::Other(
                    "Summarization failed: the provider's content filter stopped the output"
                        .to_owned(),
                ));
            }
            _ => {}
        }
        let text = self.text.trim();
        if text.is_empty() {
            return Err(SummarizeError::Empty);
        }
        Ok(SummaryOutput {
            text: text.to_owned(),
            short_summary: None,
            usage: self.usage,
            model,
        })
    }
}

/// An `{"error": ...}` object inside the stream.
fn stream_error(error: &Value) -> SummarizeError {
    let message = error["message"]
        .as_str()
        .map_or_else(|| error.to_string(), str::to_owned);
    let code = error["code"].as_str().unwrap_or("");
    if is_overflow_message(&message) || is_overflow_message(code) {
        SummarizeError::Overflow(message)
    } else {
        SummarizeError::Other(format!("Summarization failed: {message}"))
    }
}

fn parse_usage(usage: &Value) -> Usage {
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    let prompt = n(&usage["prompt_tokens"]);
    let cached = n(&usage["prompt_tokens_details"]["cached_tokens"]).min(prompt);
    let output = n(&usage["completion_tokens"]);
    Usage {
        input: prompt - cached,
        output,
        cache_read: cached,
        total_tokens: usage["total_tokens"].as_u64().unwrap_or(prompt + output),
        ..Usage::default()
    }
}

impl Summarizer for OpenAiSummarizer {
    fn id(&self) -> String {
        format!("{}/{}", self.config.provider, self.config.model)
    }

    fn context_window(&self) -> u64 {
        let served = self.served().context_window.unwrap_or(u64::MAX);
        self.config.context_window.min(served)
    }

    fn max_output_tokens(&self) -> Option<u32> {
        let configured = self
            .config
            .max_output_tokens
            .unwrap_or_else(|| default_output_limit(self.context_window()));
        let served = self
            .served()
            .max_output_tokens
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(u32::MAX);
        Some(configured.min(served))
    }

    fn queue(&self) -> Option<Arc<RequestQueue>> {
        self.config.queue.clone()
    }

    fn discover_limits<'a>(&'a self, cancel: &'a CancellationToken) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if !self.config.discover_limits {
                return;
            }
            let probe = self.served.get_or_init(|| async {
                let limits = discover::openai_compatible(
                    &self.client,
                    &self.config.base_url,
                    &self.config.model,
                    self.config.api_key.as_ref(),
                )
                .await;
                tracing::debug!(model = %self.id(), ?limits, "limits the server reports");
                limits
            });
            tokio::select! {
                biased;
                _ = cancel.cancelled() => {}
                _ = probe => {}
            }
        })
    }

    fn summarize<'a>(
        &'a self,
        req: &'a SummaryRequest,
        cancel: CancellationToken,
        on_delta: DeltaSink<'a>,
    ) -> BoxFuture<'a, Result<SummaryOutput, SummarizeError>> {
        Box::pin(async move { cancellable(&cancel, self.run(req, on_delta)).await })
    }
}
