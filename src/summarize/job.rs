//! One summary to write, as the engine hands it to [`super::write_summary`]: the messages, the
//! prompts that frame them and the output budget. Both the ladder ([`super::ladder`]) and the
//! planning that fits it to a summarizer ([`super::fit`]) read it, so it stands below both.

use crate::session::LlmMessages;

use super::Purpose;
#[cfg(doc)]
use super::SummaryRequest;

/// Builds the prompt text from the serialised conversation and the previous summary (the
/// caller's, for the first chunk; the previous chunk's, for the others).
pub type PromptBuilder<'a> = dyn Fn(&str, Option<&str>) -> String + Send + Sync + 'a;

/// One summary to write.
pub struct SummaryJob<'a> {
    pub purpose: Purpose,
    /// The messages to summarise, as `convert_to_llm` returns them; shared with the chunks
    /// and requests made of them.
    pub messages: LlmMessages,
    pub previous_summary: Option<String>,
    pub system_prompt: &'a str,
    pub build_prompt: &'a PromptBuilder<'a>,
    /// The output budget of this kind of summary; each rung lowers it to its own limit.
    pub max_tokens: u32,
    pub reasoning: bool,
    pub custom_instructions: Option<String>,
    pub read_files: Vec<String>,
    pub modified_files: Vec<String>,
    /// Only the most recent part is needed when it does not fit (the short summary): keep the
    /// last chunk instead of folding over all of them.
    pub tail_only: bool,
    /// [`SummaryRequest::detail_scale`].
    pub detail_scale: f64,
}

impl<'a> SummaryJob<'a> {
    /// A job with no previous summary, no reasoning, no custom instructions and no file lists.
    pub fn new(
        purpose: Purpose,
        messages: impl Into<LlmMessages>,
        system_prompt: &'a str,
        build_prompt: &'a PromptBuilder<'a>,
        max_tokens: u32,
    ) -> Self {
        SummaryJob {
            purpose,
            messages: messages.into(),
            previous_summary: None,
            system_prompt,
            build_prompt,
            max_tokens,
            reasoning: false,
            custom_instructions: None,
            read_files: Vec::new(),
            modified_files: Vec::new(),
            tail_only: false,
            detail_scale: 1.0,
        }
    }
}
