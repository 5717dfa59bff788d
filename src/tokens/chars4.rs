//! The reference agent's estimate (spec §4.7): UTF-16 code units / 4, rounded up per message,
//! with its per-role table reproduced exactly, blind spots included (`custom`,
//! `pythonExecution`, `fileMention` and user images cost 0). Use it to compare cut points with
//! the reference; budgets should use an exact counter.

use crate::session::message::{AgentMessage, ContentBlock};

use super::TokenCounter;

/// Name of the chars/4 counter.
pub const CHARS4_NAME: &str = "chars4";

/// Characters the reference charges for one image block in tool results (≈1200 tokens).
const IMAGE_CHARS: u64 = 4800;

/// The reference's chars/4 estimate.
#[derive(Clone, Copy, Debug, Default)]
pub struct Chars4;

/// Length of `s` in UTF-16 code units, as JavaScript's `String.length` counts it.
///
/// Counted on the bytes, eight at a time (tool outputs are megabytes; decoding characters
/// was a twentieth of a whole `compactd plan`, and a byte-wise count still a fortieth):
/// every byte but a continuation byte (`10xxxxxx`) starts a character, one unit, and a
/// character beyond U+FFFF (4 bytes, lead byte 0xF0 or above) is a surrogate pair, one more.
pub fn utf16_len(s: &str) -> u64 {
    utf16_units(s.as_bytes())
}

/// [`utf16_len`] of UTF-8 bytes. The count is a sum over bytes, so the bytes of a text may
/// be counted in pieces cut anywhere.
fn utf16_units(bytes: &[u8]) -> u64 {
    const TOP_BITS: u64 = 0x8080_8080_8080_8080;
    let mut chunks = bytes.chunks_exact(8);
    let (mut continuation, mut four_byte_leads) = (0u64, 0u64);
    for chunk in &mut chunks {
        let x = u64::from_le_bytes(chunk.try_into().expect("chunks of 8 bytes"));
        // Shifting left by k brings bit 7-k of each byte to its bit 7 (a byte's own bit 7
        // moves into the next byte's bit 0, which the mask drops).
        continuation += u64::from((x & !(x << 1) & TOP_BITS).count_ones());
        four_byte_leads += u64::from((x & (x << 1) & (x << 2) & (x << 3) & TOP_BITS).count_ones());
    }
    for &b in chunks.remainder() {
        continuation += u64::from(b & 0xC0 == 0x80);
        four_byte_leads += u64::from(b >= 0xF0);
    }
    bytes.len() as u64 - continuation + four_byte_leads
}

/// [`utf16_len`] of `value` as compact JSON (`JSON.stringify`), counted as serde_json writes
/// it instead of from a string built for the purpose: tool-call arguments hold whole files.
pub(crate) fn json_utf16_len(value: &serde_json::Value) -> u64 {
    struct Units(u64);
    impl std::io::Write for Units {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += utf16_units(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut units = Units(0);
    // Writing a `Value` cannot fail, and neither can this writer.
    match serde_json::to_writer(&mut units, value) {
        Ok(()) => units.0,
        Err(_) => utf16_len(&value.to_string()),
    }
}

fn text_chars(blocks: &[ContentBlock]) -> u64 {
    blocks
        .iter()
        .filter_map(ContentBlock::as_text)
        .map(utf16_len)
        .sum()
}

fn text_and_image_chars(blocks: &[ContentBlock]) -> u64 {
    let images = blocks
        .iter()
        .filter(|b| matches!(b, ContentBlock::Image(_)))
        .count() as u64;
    text_chars(blocks) + images * IMAGE_CHARS
}

/// The characters spec §4.7 counts for `msg`.
fn message_chars(msg: &AgentMessage) -> u64 {
    match msg {
        AgentMessage::User(u) => match &u.content {
            crate::session::Content::Text(t) => utf16_len(t),
            crate::session::Content::Blocks(b) => text_chars(b),
        },
        AgentMessage::Assistant(a) => a
            .content
            .iter()
            .map(|block| match block {
                ContentBlock::Text(t) => utf16_len(&t.text),
                ContentBlock::Thinking(t) => utf16_len(&t.thinking),
                // `JSON.stringify(arguments)`: compact, keys in stored order, which serde_json
                // with `preserve_order` reproduces (floats written as `1.0` are the exception).
                // A missing `arguments` (read as null) would make the reference throw; count 0.
                ContentBlock::ToolCall(c) => {
                    let args = match &c.arguments {
                        serde_json::Value::Null => 0,
                        v => json_utf16_len(v),
                    };
                    utf16_len(&c.name) + args
                }
                _ => 0,
            })
            .sum(),
        AgentMessage::ToolResult(r) => text_and_image_chars(&r.content),
        AgentMessage::BashExecution(b) => {
            utf16_len(b.command.as_deref().unwrap_or("")) + utf16_len(&b.output)
        }
        AgentMessage::BranchSummary(s) => utf16_len(&s.summary),
        AgentMessage::CompactionSummary(s) => utf16_len(&s.summary),
        // The reference charges `hookMessage` like a tool result but `custom` nothing; v3 data
        // (and this crate, which reads `hookMessage` as `custom`) only has `custom`.
        AgentMessage::Custom(_)
        | AgentMessage::PythonExecution(_)
        | AgentMessage::FileMention(_)
        | AgentMessage::Unknown(_) => 0,
    }
}

impl TokenCounter for Chars4 {
    fn name(&self) -> &str {
        CHARS4_NAME
    }

    fn count_text(&self, text: &str) -> u64 {
        utf16_len(text).div_ceil(4)
    }

    fn count_message(&self, msg: &AgentMessage) -> u64 {
        message_chars(msg).div_ceil(4)
    }
}
