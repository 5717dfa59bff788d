//! Whether an assistant reply reports that its prompt overflowed the context window: the
//! provider said so (the one text classifier, [`is_overflow_message`]) or, silently, the usage
//! it reports is larger than the window.

use crate::session::message::AssistantMessage;
use crate::summarize::is_overflow_message;

/// Whether `msg` reports that the prompt did not fit `context_window`: (a) an error whose text
/// is an overflow message of a known provider or a bare `400`/`413 (no body)`, or (b) a silent
/// overflow, when the window is known (non-zero) and `usage.input + usage.cacheRead` exceeds
/// it, whatever the stop reason.
pub fn is_context_overflow(msg: &AssistantMessage, context_window: u64) -> bool {
    if msg.is_error()
        && msg
            .error_message
            .as_deref()
            .is_some_and(is_overflow_message)
    {
        return true;
    }
    context_window > 0
        && msg
            .usage
            .as_ref()
            .is_some_and(|u| u.input + u.cache_read > context_window)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::Usage;

    fn error(text: &str) -> AssistantMessage {
        AssistantMessage {
            content: vec![],
            api: None,
            provider: Some("p".into()),
            model: Some("m".into()),
            usage: None,
            stop_reason: Some("error".into()),
            error_message: Some(text.into()),
            timestamp: None,
            extra: Default::default(),
        }
    }

    #[test]
    fn an_error_reply_with_an_overflow_message_overflows() {
        assert!(is_context_overflow(
            &error("prompt is too long: 213462 tokens > 200000 maximum"),
            0
        ));
        assert!(is_context_overflow(&error("413 (no body)"), 0));
        assert!(!is_context_overflow(&error("rate limit exceeded"), 0));
    }

    #[test]
    fn silent_overflow_needs_a_known_window_and_any_stop_reason() {
        let mut msg = error("");
        msg.stop_reason = Some("stop".into());
        msg.usage = Some(Usage {
            input: 150_000,
            cache_read: 60_000,
            ..Default::default()
        });
        assert!(is_context_overflow(&msg, 200_000));
        assert!(!is_context_overflow(&msg, 0));
        assert!(!is_context_overflow(&msg, 210_000));
    }

    #[test]
    fn an_overflow_text_in_a_reply_that_did_not_fail_is_no_overflow() {
        let mut ok = error("prompt is too long");
        ok.stop_reason = Some("stop".into());
        assert!(!is_context_overflow(&ok, 0));
    }
}
