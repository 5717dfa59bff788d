//! Interim stand-ins for types owned by modules that are still being written (`session` store,
//! `tokens`, `summarize`). They let the engine's public API compile now; each is replaced by a
//! re-export of the real type when that module lands on main.

/// The in-memory session (store engineer's `session::Session`).
#[derive(Debug, Default)]
pub struct Session;

/// A session file error naming the file and line (store engineer's `session::SessionError`).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SessionError(pub String);

/// Counts tokens of text (`tokens::TokenCounter`).
pub trait TokenCounter: Send + Sync {
    /// Tokens in `text`.
    fn count_text(&self, text: &str) -> u64;
}

/// A way to turn a conversation into summary text (`summarize::Summarizer`).
pub trait Summarizer: Send + Sync {
    /// `provider/model`, or the kind's name.
    fn id(&self) -> String;
    /// Input window in tokens.
    fn context_window(&self) -> u64;
}

/// Retry policy of the candidate loop (`summarize::RetryPolicy`).
#[derive(Debug, Clone, Default)]
pub struct RetryPolicy;

/// Prompt templates (`summarize::Prompts`).
#[derive(Debug, Clone, Default)]
pub struct Prompts;
