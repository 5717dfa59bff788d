//! Recognising a context overflow in a provider's error text: the one classifier for both the
//! replies an agent appends (`engine::overflow`) and the summarizer's own requests (the HTTP
//! clients and the retry loop), so the two can never disagree.

use std::sync::LazyLock;

use regex::{Regex, RegexSet};

/// Provider error texts that mean "the prompt does not fit"; the provider is in the comment.
/// Matched case-insensitively anywhere in the text (`.` also matches a line break). Every
/// overflow case of `docs/conformance.md` (section 4.3) has a test below.
const OVERFLOW_PATTERNS: &[&str] = &[
    r"prompt is too long",                                              // Anthropic
    r"input is too long",                                               // Amazon Bedrock, generic
    r"exceeds the context window", // OpenAI (completions, responses)
    r"input token count.*exceeds the maximum", // Google Gemini
    r"maximum prompt length is \d+", // xAI
    r"reduce the length of the messages", // Groq
    r"maximum context length",     // OpenRouter, vLLM, generic
    r"exceeds the limit of \d+",   // GitHub Copilot
    r"exceeds the available context size", // llama.cpp server
    r"requested tokens?.*exceeds?.*context (?:window|length|size)", // llama.cpp, local servers
    r"context (?:window|length|size).*(?:exceeded|overflow|too small)", // generic local
    r"(?:prompt|input).*too (?:long|large).*(?:context|n_ctx)", // llama.cpp variants
    r"requested tokens?.*(?:exceeds?|greater than).*(?:n_ctx|context)", // llama.cpp
    r"greater than the context length", // LM Studio
    r"context window exceeds limit", // MiniMax
    r"exceeded model token limit", // Kimi (Moonshot)
    r"context[_ ]length[_ ]exceeded", // generic (OpenAI error code)
    r"too many tokens",            // generic
    r"token limit exceeded",       // generic
    r"request_too_large",          // Anthropic 413
];

static OVERFLOW: LazyLock<RegexSet> = LazyLock::new(|| {
    let patterns = OVERFLOW_PATTERNS.iter().map(|p| format!("(?is){p}"));
    // The patterns are constants above; a test compiles them.
    RegexSet::new(patterns).expect("overflow patterns compile")
});

/// Cerebras and Mistral answer an oversized request with a bare status and no body.
static NO_BODY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^4(?:00|13)\s*(?:status code)?\s*\(no body\)").expect("constant regex")
});

/// Whether `text` (an error message or response body) says the prompt did not fit the
/// model's context window: a known provider message anywhere in it, or a bare `400`/`413
/// (no body)` status.
pub fn is_overflow_message(text: &str) -> bool {
    OVERFLOW.is_match(text) || NO_BODY.is_match(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overflows(text: &str) -> bool {
        is_overflow_message(text)
    }

    #[test]
    fn patterns_compile() {
        assert_eq!(OVERFLOW.len(), OVERFLOW_PATTERNS.len());
        LazyLock::force(&NO_BODY);
    }

    #[test]
    fn anthropic() {
        assert!(overflows(
            "prompt is too long: 213462 tokens > 200000 maximum"
        ));
    }

    #[test]
    fn bedrock() {
        assert!(overflows(
            "ValidationException: Input is too long for requested model."
        ));
    }

    #[test]
    fn openai() {
        assert!(overflows(
            "Your input exceeds the context window of this model. Please adjust your input and try again."
        ));
    }

    #[test]
    fn gemini() {
        assert!(overflows(
            "The input token count (1196265) exceeds the maximum number of tokens allowed (1048575)."
        ));
    }

    #[test]
    fn xai() {
        assert!(overflows(
            "This model's maximum prompt length is 131072 but the request contains 537812 tokens."
        ));
    }

    #[test]
    fn groq() {
        assert!(overflows(
            "Please reduce the length of the messages or completion."
        ));
    }

    #[test]
    fn openrouter() {
        assert!(overflows(
            "This endpoint's maximum context length is 200000 tokens. However, you requested about 268081 tokens (264000 of text input, 4081 of tool input). Please reduce the length of either one."
        ));
    }

    #[test]
    fn github_copilot() {
        assert!(overflows(
            "prompt token count of 128915 exceeds the limit of 128000"
        ));
    }

    #[test]
    fn llama_cpp_server() {
        assert!(overflows(
            "the request exceeds the available context size, try increasing it"
        ));
    }

    #[test]
    fn local_requested_tokens_exceed_context_window() {
        assert!(overflows(
            "Requested tokens (9000) exceed context window of 8192"
        ));
    }

    #[test]
    fn generic_local_context_size_exceeded() {
        assert!(overflows("Context size has been exceeded."));
        assert!(overflows("context window overflow detected"));
        assert!(overflows("Context length too small for this prompt"));
    }

    #[test]
    fn llama_cpp_prompt_too_large_for_n_ctx() {
        assert!(overflows(
            "input is too large to process for the configured n_ctx (4096)"
        ));
    }

    #[test]
    fn llama_cpp_requested_greater_than_n_ctx() {
        assert!(overflows(
            "requested tokens (5000) greater than n_ctx (4096)"
        ));
    }

    #[test]
    fn lm_studio() {
        assert!(overflows(
            "The number of tokens to keep from the initial prompt is greater than the context length."
        ));
    }

    #[test]
    fn minimax() {
        assert!(overflows(
            "invalid params, context window exceeds limit (2013)"
        ));
    }

    #[test]
    fn kimi() {
        assert!(overflows(
            "Invalid request: Your request exceeded model token limit: 262144 (requested: 300012)"
        ));
    }

    #[test]
    fn generic_context_length_exceeded() {
        assert!(overflows(
            r#"400 {"error":{"code":"context_length_exceeded","message":"too long"}}"#
        ));
        assert!(overflows("Context length exceeded"));
    }

    #[test]
    fn generic_too_many_tokens() {
        assert!(overflows("Too many tokens in request"));
    }

    #[test]
    fn generic_token_limit_exceeded() {
        assert!(overflows("Token limit exceeded for this model"));
    }

    #[test]
    fn anthropic_413_request_too_large() {
        assert!(overflows(
            r#"413 {"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}"#
        ));
    }

    #[test]
    fn cerebras_and_mistral_no_body() {
        assert!(overflows("400 status code (no body)"));
        assert!(overflows("413 (no body)"));
        assert!(overflows("413 Status Code (No Body)"));
        assert!(!overflows("401 status code (no body)"));
        assert!(!overflows("error: 400 status code (no body)"));
    }

    #[test]
    fn other_errors_are_not_overflows() {
        for text in [
            "rate limit exceeded, retry in 20s",
            "500 Internal server error",
            "400 status code: invalid api key",
            "Request was aborted",
            "The model is overloaded",
        ] {
            assert!(!overflows(text), "{text}");
        }
    }

    #[test]
    fn json_bodies_and_any_case_are_recognised() {
        assert!(overflows(
            "{\"error\":{\"code\":\"context_length_exceeded\"}}"
        ));
        assert!(overflows("Prompt is too long: 210000 tokens"));
        assert!(overflows("Input is too long."));
        assert!(overflows("maximum context length exceeded"));
    }

    #[test]
    fn the_retry_loop_uses_this_classifier() {
        // Gemini's text was missing from the retry loop's former quick check.
        let gemini = "The input token count (1196265) exceeds the maximum number of tokens";
        let policy = crate::summarize::RetryPolicy::default();
        assert!((policy.is_overflow)(gemini));
        let error = crate::summarize::SummarizeError::Other(gemini.into());
        assert!(error.reclassify_overflow(policy.is_overflow).is_overflow());
    }
}
