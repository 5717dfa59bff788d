//! Context-overflow detection (spec §4.3): whether an assistant reply says the request did not
//! fit the model's context window, either in its error text or silently in its usage.

use crate::session::message::AssistantMessage;

/// Error texts that mean "the prompt did not fit", as in-order fragments of the lower-cased
/// message; an inner slice lists alternatives for one position.
const PATTERNS: &[&[&[&str]]] = &[
    &[&["prompt is too long"]],
    &[&["input is too long for requested model"]],
    &[&["exceeds the context window"]],
    &[&["input token count"], &["exceeds the maximum"]],
    &[&["maximum prompt length is "]],
    &[&["reduce the length of the messages"]],
    &[&["maximum context length is "], &[" tokens"]],
    &[&["exceeds the limit of "]],
    &[&["exceeds the available context size"]],
    &[
        &["requested token"],
        &["exceed"],
        &["context window", "context length", "context size"],
    ],
    &[
        &["context window", "context length", "context size"],
        &["exceeded", "overflow", "too small"],
    ],
    &[
        &["prompt", "input"],
        &["too long", "too large"],
        &["context", "n_ctx"],
    ],
    &[
        &["requested token"],
        &["exceed", "greater than"],
        &["n_ctx", "context"],
    ],
    &[&["greater than the context length"]],
    &[&["context window exceeds limit"]],
    &[&["exceeded model token limit"]],
    &[&["context_length_exceeded"]],
    &[&["context length exceeded"]],
    &[&["too many tokens"]],
    &[&["token limit exceeded"]],
    &[&["request_too_large"]],
];

/// `isContextOverflow(msg, contextWindow)`: an error reply whose text is a known overflow
/// message or a bare `400`/`413 (no body)`, or — for any stop reason — a reply whose prompt
/// (`input + cacheRead`) exceeded a known (non-zero) window.
pub fn is_context_overflow(msg: &AssistantMessage, context_window: u64) -> bool {
    if msg.is_error()
        && let Some(text) = msg.error_message.as_deref()
        && is_overflow_error_text(text)
    {
        return true;
    }
    if context_window > 0
        && let Some(usage) = &msg.usage
    {
        return usage.input + usage.cache_read > context_window;
    }
    false
}

/// Whether an error message says the context overflowed (spec §4.3 (a) and (b)).
pub fn is_overflow_error_text(text: &str) -> bool {
    let lower = text.to_lowercase();
    PATTERNS.iter().any(|p| matches_in_order(&lower, p)) || is_bare_status(&lower)
}

fn matches_in_order(text: &str, parts: &[&[&str]]) -> bool {
    let mut rest = text;
    for alternatives in parts {
        let found = alternatives
            .iter()
            .filter_map(|alt| rest.find(alt).map(|at| at + alt.len()))
            .min();
        match found {
            Some(end) => rest = &rest[end..],
            None => return false,
        }
    }
    true
}

/// `400`/`413`, optionally `status code`, then `(no body)` (Cerebras, Mistral).
fn is_bare_status(lower: &str) -> bool {
    let t = lower.trim();
    let Some(rest) = t.strip_prefix("400").or_else(|| t.strip_prefix("413")) else {
        return false;
    };
    let rest = rest.trim_start();
    let rest = rest
        .strip_prefix("status code")
        .unwrap_or(rest)
        .trim_start();
    rest.starts_with("(no body)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::message::Usage;

    fn err(text: &str) -> AssistantMessage {
        let v = serde_json::json!({"content":[],"stopReason":"error","errorMessage":text});
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn provider_error_texts_are_overflows() {
        for text in [
            "prompt is too long: 213000 tokens > 200000 maximum",
            "This model's maximum context length is 128000 tokens. However, ...",
            "Your input exceeds the context window of this model",
            "The input token count (1200000) exceeds the maximum number of tokens allowed",
            "the request exceeds the available context size, try increasing it",
            "requested tokens (9000) exceed context window of 8192",
            "error: context_length_exceeded",
            "400 status code (no body)",
            "413 (no body)",
            "Request_Too_Large",
            "prompt too long; exceeded max context length n_ctx",
        ] {
            assert!(is_context_overflow(&err(text), 0), "{text}");
        }
    }

    #[test]
    fn other_errors_are_not_overflows() {
        for text in [
            "rate limit exceeded",
            "500 internal server error",
            "400 bad request: invalid tool schema",
            "overloaded_error",
        ] {
            assert!(!is_context_overflow(&err(text), 200_000), "{text}");
        }
    }

    #[test]
    fn silent_overflow_needs_a_known_window() {
        let mut msg = err("");
        msg.stop_reason = Some("stop".into());
        msg.error_message = None;
        msg.usage = Some(Usage {
            input: 150_000,
            cache_read: 60_000,
            ..Default::default()
        });
        assert!(is_context_overflow(&msg, 200_000));
        assert!(!is_context_overflow(&msg, 0));
        assert!(!is_context_overflow(&msg, 210_000));
    }
}
