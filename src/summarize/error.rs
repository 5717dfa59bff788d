//! The ways a summarization request can fail, typed so the ladder can decide between
//! retrying, moving to the next model and stopping.

use std::time::Duration;

/// Why one summarizer call failed.
///
/// Messages never contain API keys or tokens: request headers are not part of any variant, and
/// transport errors are rendered without their URL.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SummarizeError {
    /// The caller's cancellation token fired; the request was dropped.
    #[error("Summarization cancelled")]
    Cancelled,
    /// The server answered with a non-success status.
    #[error("{message}")]
    Http {
        status: u16,
        /// The whole human-readable message, e.g. `HTTP 429 Too Many Requests: <body>` or, for
        /// the remote endpoint, `Remote compaction failed (500 Internal Server Error)`.
        message: String,
        /// The start of the response body, for logs.
        body_excerpt: String,
        /// How long the server asked us to wait (retry-after and rate-limit headers).
        retry_after: Option<Duration>,
    },
    /// The summarizer's own context window overflowed: the input must shrink before another
    /// try can succeed, so this is never retried as is.
    #[error("Summarizer context overflow: {0}")]
    Overflow(String),
    /// No answer (or no progress on a stream) within the allowed time.
    #[error("Summarization timed out: {0}")]
    Timeout(String),
    /// The connection failed or broke before the response was complete.
    #[error("connection error: {0}")]
    Network(String),
    /// The response could not be understood (bad JSON, bad stream, missing field).
    #[error("{0}")]
    Protocol(String),
    /// The summarizer answered with no text.
    #[error("Summarization failed: the summarizer returned an empty summary")]
    Empty,
    /// The output hit the token limit and is incomplete (spec §13 #9). `text` is what came
    /// before the cut: its complete sections may still be kept (see [`super::check`]).
    #[error("Summarization failed: the summary was cut off at the output token limit")]
    Truncated { text: String },
    /// The answer came back but failed the answer checks (an echo of the prompt, degenerate
    /// repetition, a cut answer with no complete section); `reason` says which.
    #[error("Summarization failed: the answer was rejected: {reason}")]
    Rejected { reason: String },
    /// The summarizer was not asked: it failed earlier in this operation in a way that opened
    /// its breaker (see [`super::breaker`]).
    #[error("not asked again in this operation: {0}")]
    Skipped(String),
    /// Anything else, e.g. a refused configuration or a provider error event.
    #[error("{0}")]
    Other(String),
}

impl SummarizeError {
    /// The retry delay the server asked for, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            SummarizeError::Http { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// Why the call failed, short, for a person reading which summarizers gave up before a
    /// fallback (`HTTP 500 Internal Server Error: …`, `timed out: …`, `answer rejected: …`):
    /// the message without the `Summarization failed` prefix the error itself carries.
    pub fn reason(&self) -> String {
        match self {
            SummarizeError::Cancelled => "cancelled".to_owned(),
            SummarizeError::Overflow(detail) => format!("context overflow: {detail}"),
            SummarizeError::Timeout(detail) => format!("timed out: {detail}"),
            SummarizeError::Empty => "empty answer".to_owned(),
            SummarizeError::Truncated { .. } => {
                "answer cut off at the output token limit".to_owned()
            }
            SummarizeError::Rejected { reason } => format!("answer rejected: {reason}"),
            other => other.to_string(),
        }
    }

    /// Whether this is a summarizer context overflow.
    pub fn is_overflow(&self) -> bool {
        matches!(self, SummarizeError::Overflow(_))
    }

    /// The way the call failed, coarse enough that two failures of one kind mean the same
    /// thing will happen again (the circuit breaker counts these): `http 503`, `timeout`,
    /// `network`, `overflow`, `rejected`, ...
    pub fn failure_kind(&self) -> String {
        match self {
            SummarizeError::Cancelled => "cancelled".into(),
            SummarizeError::Http { status, .. } => format!("http {status}"),
            SummarizeError::Overflow(_) => "overflow".into(),
            SummarizeError::Timeout(_) => "timeout".into(),
            SummarizeError::Network(_) => "network".into(),
            SummarizeError::Protocol(_) => "protocol".into(),
            SummarizeError::Empty => "empty".into(),
            SummarizeError::Truncated { .. } => "cut at the output limit".into(),
            SummarizeError::Rejected { .. } => "rejected".into(),
            SummarizeError::Skipped(_) => "skipped".into(),
            SummarizeError::Other(_) => "other".into(),
        }
    }

    /// Whether asking the same summarizer again cannot help: a refused key, a model the server
    /// does not have. The breaker stops asking at once.
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            SummarizeError::Http {
                status: 401 | 403 | 404,
                ..
            }
        )
    }

    /// Turns an HTTP, protocol or other error whose message `is_overflow` recognises (normally
    /// [`is_overflow_message`](super::is_overflow_message)) into [`SummarizeError::Overflow`].
    pub fn reclassify_overflow(self, is_overflow: impl Fn(&str) -> bool) -> Self {
        let text = match &self {
            SummarizeError::Http {
                message,
                body_excerpt,
                ..
            } => format!("{message} {body_excerpt}"),
            SummarizeError::Protocol(m) | SummarizeError::Other(m) => m.clone(),
            _ => return self,
        };
        if is_overflow(&text) {
            SummarizeError::Overflow(self.to_string())
        } else {
            self
        }
    }
}

/// What a refused-as-too-long message says of the sizes, when it does: the prompt's tokens and
/// the window, as the server counts them. Read from llama.cpp's `n_prompt_tokens` / `n_ctx`,
/// OpenAI's "maximum context length is N tokens ... resulted in M tokens", and messages of the
/// form "M tokens > N" or "M tokens ... maximum N".
pub fn overflow_figures(message: &str) -> Option<(u64, u64)> {
    let field = |name: &str| -> Option<u64> {
        let at = message.find(name)? + name.len();
        let digits: String = message[at..]
            .trim_start_matches(['"', ':', ' ', '='])
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    };
    if let (Some(prompt), Some(window)) = (field("n_prompt_tokens"), field("n_ctx")) {
        return Some((prompt, window));
    }
    // Otherwise the numbers followed by "tokens": the window is the smaller of the first two.
    let lower = message.to_ascii_lowercase();
    let numbers: Vec<u64> = lower
        .match_indices("token")
        .filter_map(|(at, _)| {
            let before = lower[..at].trim_end();
            let digits: String = before
                .chars()
                .rev()
                .take_while(|c| c.is_ascii_digit() || *c == ',')
                .filter(char::is_ascii_digit)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            digits.parse().ok()
        })
        .collect();
    let pair = |numbers: &[u64]| match numbers {
        [a, b, ..] if a != b => Some(((*a).max(*b), (*a).min(*b))),
        _ => None,
    };
    pair(&numbers).or_else(|| {
        // "210000 tokens > 200000 maximum": every number of four digits or more, in order.
        let all: Vec<u64> = lower
            .replace(',', "")
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|d| d.parse().ok())
            .filter(|n| *n >= 1_000)
            .collect();
        pair(&all)
    })
}

/// The first `max` characters of `text`, on a character boundary, with `…` when cut.
pub(crate) fn excerpt(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reclassify_uses_the_given_classifier() {
        let err = SummarizeError::Other("n_ctx exhausted".into());
        let err = err.reclassify_overflow(|m| m.contains("n_ctx"));
        assert!(err.is_overflow());
        assert_eq!(
            SummarizeError::Empty.reclassify_overflow(|_| true),
            SummarizeError::Empty
        );
    }

    #[test]
    fn overflow_figures_of_common_servers() {
        let llama = r#"HTTP 400 Bad Request: {"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5210,"n_ctx":4096}}"#;
        assert_eq!(overflow_figures(llama), Some((5_210, 4_096)));
        let openai = "This model's maximum context length is 8192 tokens. However, your messages \
                      resulted in 9,041 tokens. Please reduce the length of the messages.";
        assert_eq!(overflow_figures(openai), Some((9_041, 8_192)));
        assert_eq!(
            overflow_figures("prompt is too long: 210000 tokens > 200000 maximum"),
            Some((210_000, 200_000))
        );
        assert_eq!(overflow_figures("context_length_exceeded"), None);
    }

    #[test]
    fn excerpt_cuts_on_char_boundaries() {
        assert_eq!(excerpt("héllo", 2), "hé…");
        assert_eq!(excerpt("hi", 5), "hi");
    }
}
