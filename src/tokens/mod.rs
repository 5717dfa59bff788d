//! Token counting: the [`TokenCounter`] trait, the reference agent's chars/4 estimate
//! ([`Chars4`], for parity) and exact BPE tokenizers ([`Tiktoken`], o200k and cl100k), plus a
//! per-entry [`TokenCache`].
//!
//! Budgets (keep-recent tokens, pruning windows, branch budgets) are all measured with one
//! counter, chosen by the `tokenizer` setting.

mod bpe;
mod cache;
mod chars4;
mod lookup;
mod table;
mod tiktoken;

use std::sync::Arc;

use crate::session::AgentMessage;
use chars4::CHARS4_NAME;

pub use cache::TokenCache;
pub use chars4::Chars4;
pub use tiktoken::{Bpe, Tiktoken};

/// Counts tokens of text and of whole messages.
pub trait TokenCounter: Send + Sync {
    /// The counter's name as the `tokenizer` setting spells it (`chars4`, `o200k`, `cl100k`).
    fn name(&self) -> &str;
    /// Tokens of a piece of text.
    fn count_text(&self, text: &str) -> u64;
    /// Tokens a message costs in the context.
    fn count_message(&self, msg: &AgentMessage) -> u64;
}

/// The counter named `name` (`chars4`, `o200k`, `cl100k`); `None` for any other name.
pub fn counter_by_name(name: &str) -> Option<Arc<dyn TokenCounter>> {
    match name {
        CHARS4_NAME => Some(Arc::new(Chars4)),
        "o200k" => Some(Arc::new(Tiktoken::new(Bpe::O200k))),
        "cl100k" => Some(Arc::new(Tiktoken::new(Bpe::Cl100k))),
        _ => None,
    }
}

/// Whether `counter` is the reference's chars/4 estimate, whose units are not tokens.
pub fn is_chars4(counter: &dyn TokenCounter) -> bool {
    counter.name() == CHARS4_NAME
}

#[cfg(test)]
mod tests;
