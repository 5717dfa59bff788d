//! The ways a summarization request can fail, typed so the candidate loop can decide between
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
    /// The output hit the token limit and is incomplete (spec §13 #9).
    #[error("Summarization failed: the summary was cut off at the output token limit")]
    Truncated,
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

    /// Whether this is a summarizer context overflow.
    pub fn is_overflow(&self) -> bool {
        matches!(self, SummarizeError::Overflow(_))
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
    fn excerpt_cuts_on_char_boundaries() {
        assert_eq!(excerpt("héllo", 2), "hé…");
        assert_eq!(excerpt("hi", 5), "hi");
    }
}
