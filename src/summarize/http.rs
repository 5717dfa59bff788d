//! HTTP plumbing shared by the model-backed summarizers: URL policy, client construction with
//! a connect timeout, the first-token and idle timeouts of a streamed answer ([`Clock`]; never
//! a total timeout on a stream), turning error responses into [`SummarizeError`]s, and reading
//! server-sent events.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures::{Stream, StreamExt};
use reqwest::Url;

use super::SummarizeError;
use super::error::excerpt;
use super::overflow::is_overflow_message;
use super::retry::parse_retry_after;
use crate::settings::SecretString;

/// How much of an error body is kept in messages.
const BODY_EXCERPT_CHARS: usize = 500;
/// How much of an error body is read at most.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// The first-token timeout of a hosted API (a server on this machine gets a longer one from
/// its provider settings: a CPU model can read a prompt for minutes).
pub const REMOTE_FIRST_TOKEN_TIMEOUT: Duration = Duration::from_secs(120);

/// Network options of a summarizer.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpOptions {
    /// Time allowed to open the connection.
    pub connect_timeout: Duration,
    /// Longest wait, from sending the request, for the first token of the answer (the server
    /// reads the whole prompt first).
    pub first_token_timeout: Duration,
    /// Longest silence allowed between two parts of the answer once it has started (no total
    /// limit, so a long stream that keeps producing is never cut).
    pub idle_timeout: Duration,
    /// Accept `http://` for hosts other than loopback.
    pub allow_insecure_http: bool,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            connect_timeout: Duration::from_secs(10),
            first_token_timeout: REMOTE_FIRST_TOKEN_TIMEOUT,
            idle_timeout: Duration::from_secs(120),
            allow_insecure_http: false,
        }
    }
}

/// The deadlines of one streamed answer: the first token within
/// [`HttpOptions::first_token_timeout`] of sending the request, then no silence longer than
/// [`HttpOptions::idle_timeout`].
pub(crate) struct Clock {
    sent: Instant,
    first_token: Duration,
    idle: Duration,
    started: bool,
}

impl Clock {
    /// Starts the clock as the request is sent.
    pub(crate) fn start(options: &HttpOptions) -> Self {
        Clock {
            sent: Instant::now(),
            first_token: options.first_token_timeout,
            idle: options.idle_timeout,
            started: false,
        }
    }

    /// The answer has started: from now on only the idle timeout applies.
    pub(crate) fn token(&mut self) {
        self.started = true;
    }

    /// Runs `fut` within the current deadline.
    pub(crate) async fn within<T>(
        &self,
        fut: impl Future<Output = T>,
    ) -> Result<T, SummarizeError> {
        let (wait, error) = if self.started {
            let idle = self.idle;
            (
                idle,
                format!(
                    "the answer stopped: nothing for {} s (idle timeout)",
                    idle.as_secs_f64()
                ),
            )
        } else {
            (
                self.first_token.saturating_sub(self.sent.elapsed()),
                format!(
                    "no first token within {} s of sending the request (first-token timeout)",
                    self.first_token.as_secs_f64()
                ),
            )
        };
        tokio::time::timeout(wait, fut)
            .await
            .map_err(|_| SummarizeError::Timeout(error))
    }
}

/// Parses `url` and applies compactd's transport rule: `https://` always, `http://` only for a
/// loopback host unless `allow_insecure_http`; anything else is refused.
pub fn check_url(url: &str, allow_insecure_http: bool) -> Result<Url, SummarizeError> {
    let parsed =
        Url::parse(url).map_err(|e| SummarizeError::Other(format!("Invalid URL {url:?}: {e}")))?;
    match parsed.scheme() {
        "https" => Ok(parsed),
        "http" if allow_insecure_http || is_loopback(&parsed) => Ok(parsed),
        "http" => Err(SummarizeError::Other(format!(
            "Refusing plain http:// URL for non-loopback host {}: use https:// or set \
             compaction.allowInsecureHttp",
            parsed.host_str().unwrap_or("")
        ))),
        other => Err(SummarizeError::Other(format!(
            "Unsupported URL scheme {other:?} in {url:?}: use https://"
        ))),
    }
}

fn is_loopback(url: &Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// A client with the connect timeout of `options`; the read deadlines are the [`Clock`]'s.
pub(crate) fn build_client(options: &HttpOptions) -> Result<reqwest::Client, SummarizeError> {
    // reqwest is built without a crypto provider (Cargo.toml: `ring`, not the default C build
    // of aws-lc-rs), so rustls needs one installed for the process. An error only says that one
    // is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .connect_timeout(options.connect_timeout)
        .build()
        .map_err(|e| {
            SummarizeError::Other(format!("Cannot build HTTP client: {}", e.without_url()))
        })
}

/// Maps a transport error, without its URL (which could carry credentials in a query).
pub(crate) fn transport_error(err: reqwest::Error) -> SummarizeError {
    let err = err.without_url();
    if err.is_timeout() {
        SummarizeError::Timeout(describe(&err))
    } else {
        SummarizeError::Network(describe(&err))
    }
}

/// The error and its sources, since reqwest's own message is often just "error sending request".
fn describe(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Reads (a bounded part of) the body of a non-success response and turns it into an error:
/// an overflow when the body says so, else [`SummarizeError::Http`] with any retry-after.
/// `secret` is masked in the body, since some providers echo a rejected key.
pub(crate) async fn error_from_response(
    response: reqwest::Response,
    secret: Option<&SecretString>,
) -> SummarizeError {
    let status = response.status();
    let retry_after = parse_retry_after(
        |name| response.headers().get(name).and_then(|v| v.to_str().ok()),
        SystemTime::now(),
    );
    let body = redact(read_limited(response).await, secret);
    let message = format!(
        "HTTP {} {}: {}",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        excerpt(body.trim(), BODY_EXCERPT_CHARS)
    );
    if is_overflow_message(&body) {
        return SummarizeError::Overflow(message);
    }
    SummarizeError::Http {
        status: status.as_u16(),
        message,
        body_excerpt: excerpt(&body, BODY_EXCERPT_CHARS),
        retry_after,
    }
}

/// `text` with every occurrence of the secret replaced by `***`.
pub(crate) fn redact(text: String, secret: Option<&SecretString>) -> String {
    match secret.map(SecretString::expose) {
        Some(secret) if !secret.is_empty() && text.contains(secret) => {
            text.replace(secret, crate::settings::REDACTED)
        }
        _ => text,
    }
}

/// The body as text, reading at most [`MAX_ERROR_BODY_BYTES`]; errors end the read quietly
/// since the status already tells what went wrong.
pub(crate) async fn read_limited(response: reqwest::Response) -> String {
    let mut bytes = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(Ok(chunk)) = stream.next().await {
        bytes.extend_from_slice(&chunk);
        if bytes.len() >= MAX_ERROR_BODY_BYTES {
            bytes.truncate(MAX_ERROR_BODY_BYTES);
            break;
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Bytes a streamed response may carry per requested output token. Real streams spend a few
/// hundred bytes of JSON per delta; this is far above that, so only a broken or hostile server
/// (an endless stream) reaches the cap, and memory stays bounded.
const STREAM_BYTES_PER_TOKEN: usize = 1024;
/// The stream cap for small budgets.
const MIN_STREAM_BYTES: usize = 4 << 20;
/// Summary text allowed per requested output token: a token is a few bytes, so a server that
/// sends more ignored `max_tokens` and is streaming without end.
const TEXT_BYTES_PER_TOKEN: usize = 16;
/// The text cap for small budgets.
const MIN_TEXT_BYTES: usize = 64 << 10;

/// The most bytes read from a streamed response asked for `max_tokens`.
pub(crate) fn stream_byte_limit(max_tokens: u32) -> usize {
    (max_tokens as usize)
        .saturating_mul(STREAM_BYTES_PER_TOKEN)
        .max(MIN_STREAM_BYTES)
}

/// Fails once streamed summary text exceeds what `max_tokens` tokens can hold.
pub(crate) fn check_text_len(len: usize, max_tokens: u32) -> Result<(), SummarizeError> {
    let limit = (max_tokens as usize)
        .saturating_mul(TEXT_BYTES_PER_TOKEN)
        .max(MIN_TEXT_BYTES);
    if len > limit {
        return Err(SummarizeError::Protocol(format!(
            "the summary stream went past {limit} bytes of text for a budget of {max_tokens} \
             tokens; the server ignores max_tokens"
        )));
    }
    Ok(())
}

/// The response's server-sent events, with stream errors already mapped. At most
/// [`stream_byte_limit`] bytes are read; past that the stream ends with a protocol error.
pub(crate) fn sse_events(
    response: reqwest::Response,
    max_tokens: u32,
) -> impl Stream<Item = Result<Event, SummarizeError>> {
    let limit = stream_byte_limit(max_tokens);
    let over = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&over);
    let mut read = 0usize;
    let bytes = response.bytes_stream().take_while(move |chunk| {
        if let Ok(chunk) = chunk {
            read = read.saturating_add(chunk.len());
        }
        let keep = read <= limit;
        if !keep {
            flag.store(true, Ordering::Relaxed);
        }
        std::future::ready(keep)
    });
    let too_long = futures::stream::once(async move { over.load(Ordering::Relaxed) }).filter_map(
        move |over| {
            std::future::ready(over.then(|| {
                Err(SummarizeError::Protocol(format!(
                    "the response stream went past {limit} bytes"
                )))
            }))
        },
    );
    events_of(bytes).chain(too_long)
}

fn events_of<S, B>(bytes: S) -> impl Stream<Item = Result<Event, SummarizeError>>
where
    S: Stream<Item = Result<B, reqwest::Error>>,
    B: AsRef<[u8]>,
{
    bytes.eventsource().map(|item| {
        item.map_err(|err| match err {
            EventStreamError::Transport(e) => transport_error(e),
            EventStreamError::Utf8(e) => {
                SummarizeError::Protocol(format!("Invalid UTF-8 in event stream: {e}"))
            }
            EventStreamError::Parser(e) => {
                SummarizeError::Protocol(format!("Invalid event stream: {e}"))
            }
        })
    })
}

/// The error for a stream that ended without its final event.
pub(crate) fn incomplete_stream() -> SummarizeError {
    SummarizeError::Network("stream ended before the response was complete".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_is_always_accepted() {
        assert!(check_url("https://api.example.com/v1", false).is_ok());
    }

    #[test]
    fn http_needs_loopback_or_the_flag() {
        for ok in [
            "http://127.0.0.1:8080/x",
            "http://localhost/x",
            "http://[::1]:9/x",
            "http://127.5.0.1/",
        ] {
            assert!(check_url(ok, false).is_ok(), "{ok}");
        }
        let err = check_url("http://summaries.example.com/x", false).unwrap_err();
        assert!(err.to_string().contains("summaries.example.com"), "{err}");
        assert!(check_url("http://summaries.example.com/x", true).is_ok());
        assert!(check_url("ftp://127.0.0.1/x", true).is_err());
        assert!(check_url("not a url", true).is_err());
    }
}
