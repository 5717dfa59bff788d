//! Fitting a summary's input to one summarizer (DESIGN §3 deviation 8, peers.md §4 #8): the
//! input-token budget its window leaves, and the conversation planned into requests that fit
//! it. Pure: the ladder ([`super::ladder`]) plans each rung with these, in its server's
//! tokens, and plans again smaller when the server refuses a prompt as too long.
//!
//! An input that does not fit is reduced, in order: tool results are clipped harder and the
//! middles of long texts are dropped (head and tail kept, the cut marked); if it still does
//! not fit, the conversation is split at message boundaries into chunks the ladder summarises
//! one after the other, each with the previous chunk's summary as `<previous-summary>` (an
//! iterative fold). A request bound to overflow is refused before it is sent.

use serde_json::Value;

use crate::compaction::{serialize_conversation, serialize_messages};
use crate::session::{AgentMessage, Content, ContentBlock, LlmMessages};
use crate::tokens::TokenCounter;

use super::SummarizeError;
use super::job::SummaryJob;
use super::prompts::length_instruction;

/// Characters kept of each tool result once the input has to shrink.
pub const TIGHT_TOOL_RESULT_CHARS: usize = 500;
/// Texts longer than this lose their middle once the input has to shrink.
pub const LONG_TEXT_CHARS: usize = 4_000;
/// Characters kept (head + tail) of a long text.
pub const LONG_TEXT_KEEP_CHARS: usize = 2_000;

/// The input-token budget of a request to a summarizer with `window` tokens that may answer
/// with `max_output` tokens: what is left after the output and a 5 % margin (at least 256, but
/// never more than a tenth of a small window). An unbounded window (the extractive summarizer)
/// gives an unbounded budget.
pub fn input_budget(window: u64, max_output: u32) -> u64 {
    if window == u64::MAX {
        return u64::MAX;
    }
    let margin = (window / 20).max(256.min(window / 10));
    window
        .saturating_sub(u64::from(max_output))
        .saturating_sub(margin)
}

/// Splits (and if needed reduces) the job's messages so every request to a summarizer that
/// answers with at most `max_output` tokens fits `budget` input tokens. One chunk when
/// everything fits.
pub fn plan_chunks(
    job: &SummaryJob<'_>,
    budget: u64,
    max_output: u32,
    counter: &dyn TokenCounter,
) -> Result<Vec<LlmMessages>, SummarizeError> {
    if budget == u64::MAX {
        return Ok(vec![job.messages.clone()]);
    }
    let system = counter.count_text(job.system_prompt)
        + counter.count_text(&length_instruction(job.purpose, max_output));
    let overhead_first =
        system + counter.count_text(&(job.build_prompt)("", job.previous_summary.as_deref()));
    // Later chunks carry the previous chunk's summary, at most `max_output` long.
    let overhead_rest =
        system + counter.count_text(&(job.build_prompt)("", Some("…"))) + u64::from(max_output);
    let room_first = budget.saturating_sub(overhead_first);
    let room_rest = budget.saturating_sub(overhead_rest);
    let measure = |msgs: &[AgentMessage]| counter.count_text(&serialize_conversation(msgs));

    if counter.count_text(&serialize_messages(job.messages.iter())) <= room_first {
        return Ok(vec![job.messages.clone()]);
    }
    let reduced: Vec<AgentMessage> = job.messages.iter().map(|m| reduce_message(&m)).collect();
    if measure(&reduced) <= room_first {
        return Ok(vec![reduced.into()]);
    }
    if room_first == 0 || room_rest == 0 {
        return Err(SummarizeError::Overflow(format!(
            "the summarizer's window leaves no room for the conversation: the prompt's \
             instructions alone take {overhead_first} of its {budget} input tokens"
        )));
    }
    if job.tail_only {
        return Ok(vec![tail_that_fits(&reduced, room_first, &measure).into()]);
    }
    Ok(split_into_chunks(reduced, room_first, room_rest, &measure)
        .into_iter()
        .map(LlmMessages::from)
        .collect())
}

/// The most recent messages that fit `room` (at least one, shrunk to fit).
fn tail_that_fits(
    messages: &[AgentMessage],
    room: u64,
    measure: &dyn Fn(&[AgentMessage]) -> u64,
) -> Vec<AgentMessage> {
    let mut kept: Vec<AgentMessage> = Vec::new();
    for m in messages.iter().rev() {
        let mut candidate = vec![m.clone()];
        candidate.extend(kept.iter().cloned());
        if measure(&candidate) > room {
            break;
        }
        kept = candidate;
    }
    if kept.is_empty()
        && let Some(last) = messages.last()
    {
        kept.push(shrink_to_fit(last, room, measure));
    }
    kept
}

/// Greedy split at message boundaries; a single message larger than a chunk is shrunk.
fn split_into_chunks(
    messages: Vec<AgentMessage>,
    room_first: u64,
    room_rest: u64,
    measure: &dyn Fn(&[AgentMessage]) -> u64,
) -> Vec<Vec<AgentMessage>> {
    let mut chunks: Vec<Vec<AgentMessage>> = Vec::new();
    let mut current: Vec<AgentMessage> = Vec::new();
    let mut current_tokens = 0u64;
    for m in messages {
        let room = if chunks.is_empty() {
            room_first
        } else {
            room_rest
        };
        let mut tokens = measure(std::slice::from_ref(&m));
        let m = if tokens > room {
            let shrunk = shrink_to_fit(&m, room, measure);
            tokens = measure(std::slice::from_ref(&shrunk));
            shrunk
        } else {
            m
        };
        // The blank line between parts costs about a token.
        if !current.is_empty() && current_tokens + tokens + 1 > room {
            chunks.push(std::mem::take(&mut current));
            current_tokens = 0;
        }
        current_tokens += tokens + 1;
        current.push(m);
    }
    if !current.is_empty() {
        chunks.push(current);
    }
    chunks
}

/// `m` with its texts cut (middle dropped) until it measures at most `room`.
fn shrink_to_fit(
    m: &AgentMessage,
    room: u64,
    measure: &dyn Fn(&[AgentMessage]) -> u64,
) -> AgentMessage {
    // Start from a generous guess (4 characters a token) and halve until it fits.
    let mut keep = usize::try_from(room.saturating_mul(4)).unwrap_or(usize::MAX);
    loop {
        let shrunk = map_texts(m, &|t| drop_middle(t, keep), Some(keep));
        if keep <= 64 || measure(std::slice::from_ref(&shrunk)) <= room {
            return shrunk;
        }
        keep /= 2;
    }
}

/// The first reduction: tool results clipped to [`TIGHT_TOOL_RESULT_CHARS`], texts longer than
/// [`LONG_TEXT_CHARS`] cut to [`LONG_TEXT_KEEP_CHARS`] (head and tail).
pub fn reduce_message(m: &AgentMessage) -> AgentMessage {
    match m {
        AgentMessage::ToolResult(_) => {
            map_texts(m, &|t| drop_middle(t, TIGHT_TOOL_RESULT_CHARS), None)
        }
        _ => map_texts(
            m,
            &|t| {
                if t.chars().count() > LONG_TEXT_CHARS {
                    drop_middle(t, LONG_TEXT_KEEP_CHARS)
                } else {
                    t.to_owned()
                }
            },
            Some(LONG_TEXT_KEEP_CHARS),
        ),
    }
}

/// `m` with `f` applied to each text (user/assistant/tool-result text and thinking blocks) and,
/// when `args_keep` is set, to string arguments of tool calls longer than that.
fn map_texts(
    m: &AgentMessage,
    f: &dyn Fn(&str) -> String,
    args_keep: Option<usize>,
) -> AgentMessage {
    let blocks = |blocks: &[ContentBlock]| -> Vec<ContentBlock> {
        blocks
            .iter()
            .map(|b| match b {
                ContentBlock::Text(t) => {
                    let mut t = t.clone();
                    t.text = f(&t.text);
                    ContentBlock::Text(t)
                }
                ContentBlock::Thinking(t) => {
                    let mut t = t.clone();
                    t.thinking = f(&t.thinking);
                    ContentBlock::Thinking(t)
                }
                ContentBlock::ToolCall(c) => {
                    let mut c = c.clone();
                    if let Some(keep) = args_keep {
                        shrink_json_strings(&mut c.arguments, keep);
                    }
                    ContentBlock::ToolCall(c)
                }
                other => other.clone(),
            })
            .collect()
    };
    let mut out = m.clone();
    match &mut out {
        AgentMessage::User(u) => {
            u.content = match &u.content {
                Content::Text(t) => Content::Text(f(t)),
                Content::Blocks(b) => Content::Blocks(blocks(b)),
            }
        }
        AgentMessage::Assistant(a) => a.content = blocks(&a.content),
        AgentMessage::ToolResult(t) => t.content = blocks(&t.content),
        _ => {}
    }
    out
}

fn shrink_json_strings(value: &mut Value, keep: usize) {
    match value {
        Value::String(s) if s.chars().count() > keep => *s = drop_middle(s, keep),
        Value::Array(items) => items.iter_mut().for_each(|v| shrink_json_strings(v, keep)),
        Value::Object(map) => map.values_mut().for_each(|v| shrink_json_strings(v, keep)),
        _ => {}
    }
}

/// `text` with its middle replaced by a note when it is longer than `keep` characters: the
/// first and last `keep / 2` characters stay.
pub fn drop_middle(text: &str, keep: usize) -> String {
    let total = text.chars().count();
    if total <= keep {
        return text.to_owned();
    }
    let head_chars = keep / 2;
    let tail_chars = keep - head_chars;
    let head_end = text
        .char_indices()
        .nth(head_chars)
        .map_or(text.len(), |(i, _)| i);
    let tail_start = text
        .char_indices()
        .nth(total - tail_chars)
        .map_or(text.len(), |(i, _)| i);
    let omitted = total - head_chars - tail_chars;
    format!(
        "{}\n[… {omitted} characters omitted …]\n{}",
        &text[..head_end],
        &text[tail_start..]
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::summarize::Purpose;
    use crate::summarize::job::PromptBuilder;
    use crate::tokens::Chars4;

    fn user(text: &str) -> AgentMessage {
        AgentMessage::from_value(json!({"role": "user", "content": text})).unwrap()
    }

    fn builder(conv: &str, prev: Option<&str>) -> String {
        match prev {
            Some(p) => format!(
                "<conversation>\n{conv}\n</conversation>\n\n<previous-summary>\n{p}\n</previous-summary>\n\nSummarize."
            ),
            None => format!("<conversation>\n{conv}\n</conversation>\n\nSummarize."),
        }
    }

    fn job<'a>(messages: Vec<AgentMessage>, b: &'a PromptBuilder<'a>) -> SummaryJob<'a> {
        SummaryJob::new(Purpose::History, messages, "You summarize.", b, 100)
    }

    #[test]
    fn drop_middle_keeps_head_and_tail_and_marks_the_cut() {
        let text = format!("{}{}{}", "a".repeat(100), "b".repeat(1000), "c".repeat(100));
        let out = drop_middle(&text, 200);
        assert!(out.starts_with(&"a".repeat(100)));
        assert!(out.ends_with(&"c".repeat(100)));
        assert!(out.contains("[… 1000 characters omitted …]"));
        assert_eq!(drop_middle("short", 10), "short");
        // Multi-byte characters are cut on character boundaries.
        assert!(drop_middle(&"é".repeat(50), 10).contains("[… 40 characters omitted …]"));
    }

    #[test]
    fn a_window_too_small_for_the_prompt_itself_is_refused_before_sending() {
        let b: &PromptBuilder = &builder;
        let j = job(vec![user(&"word ".repeat(1_000))], b);
        let err = plan_chunks(&j, 10, 100, &Chars4).unwrap_err();
        assert!(err.is_overflow());
    }

    #[test]
    fn tail_only_keeps_the_most_recent_messages() {
        let b: &PromptBuilder = &builder;
        let mut j = job(
            (0..40)
                .map(|i| user(&format!("m{i} {}", "w ".repeat(50))))
                .collect(),
            b,
        );
        j.tail_only = true;
        let chunks = plan_chunks(&j, 400, 100, &Chars4).unwrap();
        assert_eq!(chunks.len(), 1);
        let text = serialize_conversation(&chunks[0].to_vec());
        assert!(text.contains("m39 "));
        assert!(!text.contains("m0 "));
    }

    #[test]
    fn the_budget_leaves_room_for_the_answer_and_a_margin() {
        assert_eq!(input_budget(u64::MAX, 4_096), u64::MAX);
        // 5 % of 100k is above the 256 floor.
        assert_eq!(input_budget(100_000, 4_096), 100_000 - 4_096 - 5_000);
        // A small window: the floor of 256, capped at a tenth of the window.
        assert_eq!(input_budget(4_096, 512), 4_096 - 512 - 256);
        assert_eq!(input_budget(1_000, 100), 1_000 - 100 - 100);
        assert_eq!(input_budget(100, 500), 0);
    }
}
