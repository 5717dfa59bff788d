//! The Anthropic Messages API: one streamed `POST {baseUrl}/v1/messages` per summary.
//!
//! Extended thinking stays off unless the request asks for reasoning, the model is configured
//! as thinking-capable, and the output budget leaves room for both a thinking budget and the
//! answer (the reference sends a 16k thinking budget with a 512-token limit, spec §4.10).

use std::sync::Arc;

use futures::StreamExt;
use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::http::{self, Clock, HttpOptions};
use super::openai::default_output_limit;
use super::queue::RequestQueue;
use super::{
    DeltaSink, SummarizeError, Summarizer, SummaryOutput, SummaryRequest, cancellable,
    is_overflow_message,
};
use crate::session::Usage;
use crate::settings::SecretString;

/// The API version header value.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// Anthropic's smallest thinking budget.
const MIN_THINKING_BUDGET: u32 = 1024;

/// Configuration of an [`AnthropicSummarizer`].
#[derive(Debug, Clone)]
pub struct AnthropicConfig {
    /// Provider name, the first half of the summarizer's id.
    pub provider: String,
    pub model: String,
    /// e.g. `https://api.anthropic.com`; `/v1/messages` is appended.
    pub base_url: String,
    pub api_key: Option<SecretString>,
    pub context_window: u64,
    /// The model's `maxOutputTokens`; `None`: a quarter of the window.
    pub max_output_tokens: Option<u32>,
    /// The model supports extended thinking; without it, thinking is never requested.
    pub thinking: bool,
    pub http: HttpOptions,
    /// Requests to this server wait here for a free slot; `None`: no limit.
    pub queue: Option<Arc<RequestQueue>>,
}

/// Summarises with the Messages API, streaming.
#[derive(Debug)]
pub struct AnthropicSummarizer {
    config: AnthropicConfig,
    url: reqwest::Url,
    client: reqwest::Client,
}

impl AnthropicSummarizer {
    /// Checks the URL (https, or http on loopback unless allowed) and builds the client.
    pub fn new(config: AnthropicConfig) -> Result<Self, SummarizeError> {
        let url = format!("{}/v1/messages", config.base_url.trim_end_matches('/'));
        let url = http::check_url(&url, config.http.allow_insecure_http)?;
        let client = http::build_client(&config.http)?;
        Ok(AnthropicSummarizer {
            config,
            url,
            client,
        })
    }

    /// The thinking budget for a call, if thinking is allowed: half the output budget, at least
    /// Anthropic's minimum, and always leaving at least as much for the answer.
    pub fn thinking_budget(&self, req: &SummaryRequest) -> Option<u32> {
        let budget = req.max_tokens / 2;
        (self.config.thinking && req.reasoning && budget >= MIN_THINKING_BUDGET).then_some(budget)
    }

    fn body(&self, req: &SummaryRequest) -> Value {
        let mut body = json!({
            "model": self.config.model,
            "max_tokens": req.max_tokens,
            "system": req.system_prompt,
            "messages": [{"role": "user", "content": req.prompt}],
            "stream": true,
        });
        if let Some(budget) = self.thinking_budget(req) {
            body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
        }
        body
    }

    async fn run(
        &self,
        req: &SummaryRequest,
        on_delta: DeltaSink<'_>,
    ) -> Result<SummaryOutput, SummarizeError> {
        let mut request = self
            .client
            .post(self.url.clone())
            .header("anthropic-version", ANTHROPIC_VERSION)
            .json(&self.body(req));
        if let Some(key) = &self.config.api_key {
            request = request.header("x-api-key", key.expose());
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
            let event = event?;
            if event.data.trim().is_empty() {
                continue;
            }
            stream.apply(&event.event, &event.data, on_delta)?;
            if stream.started {
                clock.token();
            }
            http::check_text_len(stream.text.len(), req.max_tokens)?;
            if stream.stopped {
                break;
            }
        }
        stream.finish(self.id())
    }
}

#[derive(Default)]
struct StreamState {
    text: String,
    usage: Usage,
    stop_reason: Option<String>,
    stopped: bool,
    /// A content block (text or thinking) has started.
    started: bool,
}

impl StreamState {
    fn apply(
        &mut self,
        name: &str,
        data: &str,
        on_delta: DeltaSink<'_>,
    ) -> Result<(), SummarizeError> {
        let payload: Value = serde_json::from_str(data).map_err(|e| {
            SummarizeError::Protocol(format!("Invalid JSON in message stream: {e}"))
        })?;
        let kind = if name.is_empty() || name == "message" {
            payload["type"].as_str().unwrap_or("")
        } else {
            name
        };
        let n = |v: &Value| v.as_u64();
        match kind {
            "message_start" => {
                let usage = &payload["message"]["usage"];
                self.usage.input = n(&usage["input_tokens"]).unwrap_or(0);
                self.usage.cache_read = n(&usage["cache_read_input_tokens"]).unwrap_or(0);
                self.usage.cache_write = n(&usage["cache_creation_input_tokens"]).unwrap_or(0);
                self.usage.output = n(&usage["output_tokens"]).unwrap_or(0);
            }
            "content_block_start" => self.started = true,
            "content_block_delta" => {
                self.started = true;
                let delta = &payload["delta"];
                if delta["type"] == "text_delta"
                    && let Some(text) = delta["text"].as_str()
                    && !text.is_empty()
                {
                    self.text.push_str(text);
                    on_delta(text);
                }
            }
            "message_delta" => {
                if let Some(reason) = payload["delta"]["stop_reason"].as_str() {
                    self.stop_reason = Some(reason.to_owned());
                }
                if let Some(output) = n(&payload["usage"]["output_tokens"]) {
                    self.usage.output = output;
                }
            }
            "message_stop" => self.stopped = true,
            "error" => return Err(stream_error(&payload["error"])),
            _ => {}
        }
        Ok(())
    }

    fn finish(mut self, model: String) -> Result<SummaryOutput, SummarizeError> {
        if !self.stopped {
            return Err(http::incomplete_stream());
        }
        match self.stop_reason.as_deref() {
            Some("max_tokens") => return Err(SummarizeError::Truncated { text: self.text }),
            Some("refusal") => {
                return Err(SummarizeError::Other(
                    "Summarization failed: the model refused to summarise".to_owned(),
                ));
            }
            _ => {}
        }
        let text = self.text.trim();
        if text.is_empty() {
            return Err(SummarizeError::Empty);
        }
        let u = &mut self.usage;
        u.total_tokens = u.input + u.output + u.cache_read + u.cache_write;
        Ok(SummaryOutput {
            text: text.to_owned(),
            short_summary: None,
            usage: Some(self.usage),
            model,
        })
    }
}

/// An `error` event: `{"type": "overloaded_error", "message": "Overloaded"}`.
fn stream_error(error: &Value) -> SummarizeError {
    let kind = error["type"].as_str().unwrap_or("error");
    let message = error["message"].as_str().unwrap_or("unknown error");
    let text = format!("{kind}: {message}");
    if is_overflow_message(&text) {
        SummarizeError::Overflow(text)
    } else {
        SummarizeError::Other(format!("Summarization failed: {text}"))
    }
}

impl Summarizer for AnthropicSummarizer {
    fn id(&self) -> String {
        format!("{}/{}", self.config.provider, self.config.model)
    }

    fn context_window(&self) -> u64 {
        self.config.context_window
    }

    fn max_output_tokens(&self) -> Option<u32> {
        Some(
            self.config
                .max_output_tokens
                .unwrap_or_else(|| default_output_limit(self.config.context_window)),
        )
    }

    fn queue(&self) -> Option<Arc<RequestQueue>> {
        self.config.queue.clone()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn summarizer(thinking: bool) -> AnthropicSummarizer {
        AnthropicSummarizer::new(AnthropicConfig {
            provider: "anthropic".into(),
            model: "claude".into(),
            base_url: "https://api.anthropic.com".into(),
            api_key: None,
            context_window: 200_000,
            max_output_tokens: None,
            thinking,
            http: HttpOptions::default(),
            queue: None,
        })
        .unwrap()
    }

    #[test]
    fn thinking_needs_reasoning_capability_and_room() {
        let mut req = SummaryRequest::new(super::super::Purpose::History, "s", "p", 13_107);
        assert_eq!(summarizer(true).thinking_budget(&req), None, "not asked");
        req.reasoning = true;
        assert_eq!(summarizer(false).thinking_budget(&req), None, "not capable");
        assert_eq!(summarizer(true).thinking_budget(&req), Some(6_553));
        req.max_tokens = 512;
        assert_eq!(summarizer(true).thinking_budget(&req), None, "no room");
        req.max_tokens = 2_048;
        let budget = summarizer(true).thinking_budget(&req).unwrap();
        assert!(budget < req.max_tokens);
    }
}
