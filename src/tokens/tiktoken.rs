//! Exact token counts with tiktoken's BPE (o200k_base, cl100k_base), and a cost for every
//! message role (DESIGN §3 deviation 5).
//!
//! The counting itself is `bpe.rs`, over vocabularies embedded at build time, whose lookup
//! tables a process builds in a few milliseconds on its first exact count (tiktoken-rs, used
//! before, built its tables in about 170 ms per process). Text is counted in chunks of at
//! most [`MAX_CHUNK_BYTES`], cut before a whitespace character where possible (so ` word`
//! stays whole), and identical chunks are counted once per call: tiktoken-rs needed the
//! chunks (its backtracking regex overflowed its stack on about a million consecutive
//! spaces), and they are kept so counts stay what they were.

use std::collections::HashMap;

use super::bpe::{self, Vocab};

use crate::session::message::{AgentMessage, Content, ContentBlock};

use super::TokenCounter;

/// Tokens charged per image block, whatever its size (providers bill images by resolution,
/// which the session does not record; 1200 matches the reference's later native counter).
pub const IMAGE_TOKENS: u64 = 1200;

/// Tokens added per message for the role header and separators of chat formats (OpenAI's
/// documented per-message overhead is 3 to 4).
pub const MESSAGE_OVERHEAD_TOKENS: u64 = 4;

/// Largest chunk handed to the BPE at once.
const MAX_CHUNK_BYTES: usize = 2048;

/// Which BPE vocabulary to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bpe {
    /// o200k_base (GPT-4o and later): the default.
    O200k,
    /// cl100k_base (GPT-4, GPT-3.5).
    Cl100k,
}

impl Bpe {
    fn name(self) -> &'static str {
        match self {
            Bpe::O200k => "o200k",
            Bpe::Cl100k => "cl100k",
        }
    }

    /// The vocabulary.
    fn vocab(self) -> &'static Vocab {
        match self {
            Bpe::O200k => bpe::o200k(),
            Bpe::Cl100k => bpe::cl100k(),
        }
    }
}

/// An exact token counter.
#[derive(Clone, Copy, Debug)]
pub struct Tiktoken {
    bpe: Bpe,
}

impl Tiktoken {
    pub fn new(bpe: Bpe) -> Self {
        Tiktoken { bpe }
    }

    /// Builds the vocabulary's lookup tables and its splitting automaton now (a few
    /// milliseconds each), so the first count on a hot path does not. Returns whether the
    /// vocabulary is ready (always).
    pub fn warm(&self) -> bool {
        self.warm_tables();
        self.bpe.vocab().splitter();
        true
    }

    /// Builds the vocabulary's lookup tables now (the part of [`Tiktoken::warm`] that the
    /// benchmarks time apart).
    pub fn warm_tables(&self) {
        self.bpe.vocab().lookup();
    }
}

/// Splits `text` into chunks of at most `max` bytes, each cut just before a whitespace
/// character when the window has one, otherwise at a character boundary.
fn chunks(text: &str, max: usize) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        if rest.len() <= max {
            return Some(std::mem::take(&mut rest));
        }
        let mut end = max;
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let window = &rest[..end];
        // Cut before the last whitespace that is not at the very start, so progress is made.
        let cut = window
            .char_indices()
            .rev()
            .find(|&(i, c)| i > 0 && c.is_whitespace())
            .map_or(end, |(i, _)| i);
        let (head, tail) = rest.split_at(cut);
        rest = tail;
        Some(head)
    })
}

fn count_chunk(vocab: &Vocab, chunk: &str) -> u64 {
    vocab.count(chunk) as u64
}

impl Tiktoken {
    fn count_blocks(&self, blocks: &[ContentBlock]) -> u64 {
        blocks
            .iter()
            .map(|block| match block {
                ContentBlock::Text(t) => self.count_text(&t.text),
                ContentBlock::Thinking(t) => self.count_text(&t.thinking),
                ContentBlock::Image(_) => IMAGE_TOKENS,
                ContentBlock::ToolCall(c) => {
                    self.count_text(&c.name) + self.count_text(&c.arguments.to_string())
                }
                ContentBlock::Unknown(m) => {
                    self.count_text(&serde_json::Value::from(m.clone()).to_string())
                }
            })
            .sum()
    }

    fn count_content(&self, content: &Content) -> u64 {
        match content {
            Content::Text(t) => self.count_text(t),
            Content::Blocks(b) => self.count_blocks(b),
        }
    }
}

impl TokenCounter for Tiktoken {
    fn name(&self) -> &str {
        self.bpe.name()
    }

    fn count_text(&self, text: &str) -> u64 {
        let core = self.bpe.vocab();
        if text.len() <= MAX_CHUNK_BYTES {
            return count_chunk(core, text);
        }
        let mut seen: HashMap<&str, u64> = HashMap::new();
        chunks(text, MAX_CHUNK_BYTES)
            .map(|chunk| {
                *seen
                    .entry(chunk)
                    .or_insert_with(|| count_chunk(core, chunk))
            })
            .sum()
    }

    fn count_message(&self, msg: &AgentMessage) -> u64 {
        let body = match msg {
            AgentMessage::User(u) => self.count_content(&u.content),
            AgentMessage::Assistant(a) => self.count_blocks(&a.content),
            AgentMessage::ToolResult(r) => self.count_blocks(&r.content),
            AgentMessage::BashExecution(e) | AgentMessage::PythonExecution(e) => {
                self.count_text(e.source()) + self.count_text(&e.output)
            }
            AgentMessage::Custom(c) => self.count_content(&c.content),
            AgentMessage::BranchSummary(s) => self.count_text(&s.summary),
            AgentMessage::CompactionSummary(s) => self.count_text(&s.summary),
            AgentMessage::FileMention(f) => f
                .files
                .iter()
                .map(|file| {
                    let image = if file.image.is_some() {
                        IMAGE_TOKENS
                    } else {
                        0
                    };
                    self.count_text(&file.path) + self.count_text(&file.content) + image
                })
                .sum(),
            // Unknown roles still reach some context; charge their JSON.
            AgentMessage::Unknown(m) => {
                self.count_text(&serde_json::Value::from(m.clone()).to_string())
            }
        };
        body + MESSAGE_OVERHEAD_TOKENS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn chunks_cut_before_whitespace_and_cover_the_text() {
        let text = "alpha beta gamma delta";
        let parts: Vec<&str> = chunks(text, 8).collect();
        assert_eq!(parts.concat(), text);
        assert!(parts.iter().all(|p| p.len() <= 8));
        assert_eq!(parts[0], "alpha");
        assert_eq!(parts[1], " beta");
    }

    #[test]
    fn chunks_never_split_a_utf8_character() {
        let text = "é".repeat(100) + &"😀".repeat(100);
        let parts: Vec<&str> = chunks(&text, 7).collect();
        assert_eq!(parts.concat(), text);
        assert!(parts.iter().all(|p| !p.is_empty() && p.len() <= 7));
    }

    #[test]
    fn counts_known_text_exactly() {
        let o200k = Tiktoken::new(Bpe::O200k);
        assert!(o200k.warm());
        assert_eq!(o200k.count_text("hello world"), 2);
        assert_eq!(o200k.count_text(""), 0);
        let cl100k = Tiktoken::new(Bpe::Cl100k);
        assert_eq!(cl100k.count_text("hello world"), 2);
    }

    #[test]
    fn chunked_count_is_close_to_the_whole_count() {
        let counter = Tiktoken::new(Bpe::O200k);
        let text = "The quick brown fox jumps over the lazy dog. ".repeat(300);
        let whole = Bpe::O200k.vocab().count(&text) as u64;
        let chunked = counter.count_text(&text);
        assert!(
            chunked.abs_diff(whole) <= whole / 100 + 2,
            "{chunked} vs {whole}"
        );
    }

    #[test]
    fn two_megabytes_of_spaces_neither_panic_nor_crawl() {
        let counter = Tiktoken::new(Bpe::O200k);
        counter.warm();
        for text in [
            " ".repeat(2 << 20),
            "a".repeat(2 << 20),
            "\n".repeat(1 << 20),
        ] {
            let started = Instant::now();
            let n = counter.count_text(&text);
            assert!(n > 0);
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "took {:?}",
                started.elapsed()
            );
        }
    }
}
