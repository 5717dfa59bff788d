//! The remote endpoint summarizer (`compaction.remoteEndpoint`, spec §4.14), completed where
//! the reference is half-done (spec §13 #11): optional bearer auth, a timeout, real
//! cancellation (the request is dropped and its connection closed), and the response's
//! `shortSummary` is returned instead of being ignored.

use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::error::excerpt;
use super::http::{self, HttpOptions};
use super::{DeltaSink, SummarizeError, Summarizer, SummaryOutput, SummaryRequest, cancellable};
use crate::settings::{CompactionSettings, DEFAULT_CONTEXT_WINDOW, SecretString};

/// The error when the response has no string `summary` (spec §9).
pub const MISSING_SUMMARY: &str = "Remote compaction response missing summary";

/// Configuration of a [`RemoteSummarizer`].
#[derive(Debug, Clone)]
pub struct RemoteConfig {
    pub endpoint: String,
    /// Sent as `authorization: Bearer <token>` when set.
    pub token: Option<SecretString>,
    /// Limit on the whole request (the answer is not streamed).
    pub timeout: Duration,
    /// Assumed input window of the endpoint, for bounding its input.
    pub context_window: u64,
    pub http: HttpOptions,
}

impl RemoteConfig {
    /// The remote configuration of `settings`, if remote mode is on; the token is read from
    /// the environment variable named by `remoteTokenEnv` through `env`.
    pub fn from_settings(
        settings: &CompactionSettings,
        env: impl Fn(&str) -> Option<String>,
    ) -> Option<RemoteConfig> {
        let endpoint = settings.remote_endpoint()?;
        let token = settings
            .remote_token_env
            .as_deref()
            .and_then(env)
            .filter(|t| !t.is_empty())
            .map(SecretString::new);
        Some(RemoteConfig {
            endpoint: endpoint.to_owned(),
            token,
            timeout: settings.remote_timeout(),
            context_window: DEFAULT_CONTEXT_WINDOW,
            http: HttpOptions {
                allow_insecure_http: settings.allow_insecure_http,
                ..HttpOptions::default()
            },
        })
    }
}

/// POSTs `{systemPrompt, prompt}` and expects `{summary, shortSummary?}`.
#[derive(Debug)]
pub struct RemoteSummarizer {
    config: RemoteConfig,
    url: reqwest::Url,
    client: reqwest::Client,
}

impl RemoteSummarizer {
    /// Checks the URL (https, or http on loopback unless allowed) and builds the client.
    pub fn new(config: RemoteConfig) -> Result<Self, SummarizeError> {
        let url = http::check_url(&config.endpoint, config.http.allow_insecure_http)?;
        let client = http::build_client(&config.http)?;
        Ok(RemoteSummarizer {
            config,
            url,
            client,
        })
    }

    async fn run(&self, req: &SummaryRequest) -> Result<SummaryOutput, SummarizeError> {
        let mut request = self
            .client
            .post(self.url.clone())
            .timeout(self.config.timeout)
            .json(&json!({"systemPrompt": req.system_prompt, "prompt": req.prompt}));
        if let Some(token) = &self.config.token {
            request = request.bearer_auth(token.expose());
        }
        let response = request.send().await.map_err(|e| self.transport_error(e))?;
        let status = response.status();
        if !status.is_success() {
            return Err(self.status_error(response).await);
        }
        // Bounded: an endpoint that sends without end must not exhaust memory.
        let limit = http::stream_byte_limit(req.max_tokens);
        let mut body = Vec::new();
        let mut chunks = response.bytes_stream();
        while let Some(chunk) = chunks.next().await {
            body.extend_from_slice(&chunk.map_err(|e| self.transport_error(e))?);
            if body.len() > limit {
                return Err(SummarizeError::Protocol(format!(
                    "the remote summary went past {limit} bytes"
                )));
            }
        }
        let value: Value =
            serde_json::from_slice(&body).map_err(|e| SummarizeError::Protocol(e.to_string()))?;
        let summary = value["summary"]
            .as_str()
            .ok_or_else(|| SummarizeError::Protocol(MISSING_SUMMARY.to_owned()))?
            .trim();
        if summary.is_empty() {
            return Err(SummarizeError::Empty);
        }
        let short_summary = value["shortSummary"]
            .as_str()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        Ok(SummaryOutput {
            text: summary.to_owned(),
            short_summary,
            usage: None,
            model: self.id(),
        })
    }

    /// `Remote compaction failed (<status> <statusText>)`, after logging the body.
    async fn status_error(&self, response: reqwest::Response) -> SummarizeError {
        let status = response.status();
        let retry_after = super::retry::parse_retry_after(
            |name| response.headers().get(name).and_then(|v| v.to_str().ok()),
            std::time::SystemTime::now(),
        );
        let body = http::redact(
            http::read_limited(response).await,
            self.config.token.as_ref(),
        );
        let reason = status.canonical_reason().unwrap_or("");
        tracing::warn!(
            status = status.as_u16(),
            status_text = reason,
            body = %excerpt(&body, 500),
            "remote compaction endpoint failed"
        );
        SummarizeError::Http {
            status: status.as_u16(),
            message: format!("Remote compaction failed ({} {reason})", status.as_u16()),
            body_excerpt: excerpt(&body, 500),
            retry_after,
        }
    }

    fn transport_error(&self, err: reqwest::Error) -> SummarizeError {
        if err.is_timeout() {
            SummarizeError::Timeout(format!(
                "no answer from the remote compaction endpoint within {} ms",
                self.config.timeout.as_millis()
            ))
        } else {
            http::transport_error(err)
        }
    }
}

impl Summarizer for RemoteSummarizer {
    fn id(&self) -> String {
        "remote".to_owned()
    }

    fn context_window(&self) -> u64 {
        self.config.context_window
    }

    fn summarize<'a>(
        &'a self,
        req: &'a SummaryRequest,
        cancel: CancellationToken,
        _on_delta: DeltaSink<'a>,
    ) -> BoxFuture<'a, Result<SummaryOutput, SummarizeError>> {
        Box::pin(async move { cancellable(&cancel, self.run(req)).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_give_the_endpoint_token_and_timeout() {
        let settings = CompactionSettings {
            remote_endpoint: Some("https://sum.example/compact".into()),
            remote_token_env: Some("MY_TOKEN".into()),
            remote_timeout_ms: 1_500,
            ..CompactionSettings::default()
        };
        let config = RemoteConfig::from_settings(&settings, |name| {
            (name == "MY_TOKEN").then(|| "s3cret".to_owned())
        })
        .unwrap();
        assert_eq!(config.endpoint, "https://sum.example/compact");
        assert_eq!(
            config.token.as_ref().map(SecretString::expose),
            Some("s3cret")
        );
        assert_eq!(config.timeout, Duration::from_millis(1_500));
        assert!(!format!("{config:?}").contains("s3cret"));
        let off = CompactionSettings {
            remote_endpoint: Some(String::new()),
            ..CompactionSettings::default()
        };
        assert!(RemoteConfig::from_settings(&off, |_| None).is_none());
    }
}
