//! Messages read from their entries when they are needed instead of held: a compaction's span
//! of a million messages, held parsed, is about twice its file on top of the session (issue 35
//! item 7). Each read borrows an entry's message when the entry is parsed already (a session of
//! a few MB keeps its window parsed) and otherwise parses the entry and drops the parse.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

use super::context::convert_for_llm;
use super::{AgentMessage, Entry};

/// The messages of `entries[range]` as a compaction window sees them
/// ([`Entry::peek_message`] without compactions: compaction entries and metadata yield none).
#[derive(Clone)]
pub struct EntrySpan {
    entries: Arc<[Entry]>,
    range: Range<usize>,
}

impl EntrySpan {
    /// # Panics
    /// When `range` is not within `entries`.
    pub fn new(entries: Arc<[Entry]>, range: Range<usize>) -> Self {
        assert!(
            range.start <= range.end && range.end <= entries.len(),
            "span {range:?} outside {} entries",
            entries.len()
        );
        EntrySpan { entries, range }
    }

    pub fn empty() -> Self {
        EntrySpan {
            entries: Arc::from(Vec::new()),
            range: 0..0,
        }
    }

    /// The messages, in order; each parsed for this look unless its entry is parsed.
    pub fn messages(&self) -> impl Iterator<Item = Cow<'_, AgentMessage>> {
        self.entries[self.range.clone()]
            .iter()
            .filter_map(|e| e.peek_message(false))
    }

    /// The ids of the entries that yield a message, in order.
    pub fn message_ids(&self) -> impl Iterator<Item = &str> {
        self.entries[self.range.clone()]
            .iter()
            .filter(|e| e.peek_message(false).is_some())
            .map(|e| e.id.as_str())
    }

    /// Reads entries up to the first message.
    pub fn is_empty(&self) -> bool {
        self.messages().next().is_none()
    }

    /// Reads every entry.
    pub fn len(&self) -> usize {
        self.messages().count()
    }

    /// The messages, owned.
    pub fn to_vec(&self) -> Vec<AgentMessage> {
        self.messages().map(Cow::into_owned).collect()
    }

    /// The messages as a model gets them ([`super::convert_to_llm`]), read as they are.
    pub fn for_llm(&self) -> LlmMessages {
        LlmMessages(Source::Span(self.clone()))
    }
}

impl std::fmt::Debug for EntrySpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EntrySpan({:?} of {})", self.range, self.entries.len())
    }
}

/// Messages for a summarizer, as [`super::convert_to_llm`] gives them: held, or read from an
/// [`EntrySpan`] and converted each time they are read. Cheap to clone (a request is cloned per
/// rung and output limit).
#[derive(Clone)]
pub struct LlmMessages(Source);

#[derive(Clone)]
enum Source {
    Held(Arc<Vec<AgentMessage>>),
    Span(EntrySpan),
}

impl LlmMessages {
    /// The messages, in order: borrowed when held, else read from their entries.
    pub fn iter(&self) -> Box<dyn Iterator<Item = Cow<'_, AgentMessage>> + '_> {
        match &self.0 {
            Source::Held(v) => Box::new(v.iter().map(Cow::Borrowed)),
            Source::Span(span) => Box::new(span.messages().filter_map(convert_for_llm)),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    pub fn len(&self) -> usize {
        match &self.0 {
            Source::Held(v) => v.len(),
            Source::Span(_) => self.iter().count(),
        }
    }

    pub fn to_vec(&self) -> Vec<AgentMessage> {
        self.iter().map(Cow::into_owned).collect()
    }
}

impl Default for LlmMessages {
    fn default() -> Self {
        Vec::new().into()
    }
}

/// Messages already converted for a model.
impl From<Vec<AgentMessage>> for LlmMessages {
    fn from(messages: Vec<AgentMessage>) -> Self {
        LlmMessages(Source::Held(Arc::new(messages)))
    }
}

impl std::fmt::Debug for LlmMessages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Source::Held(v) => f.debug_list().entries(v.iter()).finish(),
            Source::Span(span) => span.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::session::context::convert_to_llm;
    use crate::session::entry::LineSource;

    /// A message, a compaction, a bash execution and a message, as raw lines of a loaded
    /// session: each read parses.
    fn entries() -> Arc<[Entry]> {
        let line = |i: usize, body: serde_json::Value| {
            let mut e = json!({"id": format!("e{i}"), "parentId": null,
                               "timestamp": "2026-01-01T00:00:00.000Z"});
            e.as_object_mut()
                .unwrap()
                .extend(body.as_object().unwrap().clone());
            format!("{e}\n")
        };
        let text = [
            line(
                0,
                json!({"type": "message", "message": {"role": "user", "content": "first"}}),
            ),
            line(
                1,
                json!({"type": "compaction", "summary": "s", "firstKeptEntryId": "e0",
                           "tokensBefore": 1}),
            ),
            line(
                2,
                json!({"type": "message", "message": {"role": "bashExecution",
                           "command": "ls", "output": "a b", "exitCode": 0}}),
            ),
            line(
                3,
                json!({"type": "message", "message": {"role": "user", "content": "last"}}),
            ),
        ]
        .concat();
        let src = LineSource::memory(text.into_bytes());
        let bytes = src.bytes();
        let mut start = 0;
        memchr::memchr_iter(b'\n', bytes)
            .map(|end| {
                let e = Entry::from_shared_line(&src, start, end).expect("a usual header");
                start = end + 1;
                e
            })
            .collect()
    }

    #[test]
    fn a_span_reads_the_messages_a_window_sees_and_converts_them_for_a_model() {
        let all = entries();
        let span = EntrySpan::new(Arc::clone(&all), 0..4);
        assert!(all.iter().all(|e| !e.is_parsed()));
        let held: Vec<AgentMessage> = all
            .iter()
            .filter_map(|e| e.peek_message(false).map(Cow::into_owned))
            .collect();
        assert_eq!(held.len(), 3, "the compaction entry yields nothing");
        assert_eq!(span.to_vec(), held);
        assert_eq!(span.len(), 3);
        assert_eq!(span.message_ids().collect::<Vec<_>>(), ["e0", "e2", "e3"]);
        let for_llm = span.for_llm();
        assert_eq!(for_llm.to_vec(), convert_to_llm(&held));
        assert_eq!(
            for_llm.to_vec()[1].role(),
            "user",
            "the execution as the model sees it"
        );
        assert_eq!(for_llm.len(), 3);
        assert!(all.iter().all(|e| !e.is_parsed()), "reading keeps no parse");
        let compaction_only = EntrySpan::new(all, 1..2);
        assert!(compaction_only.is_empty() && compaction_only.for_llm().is_empty());
        assert!(EntrySpan::empty().is_empty());
        assert_eq!(LlmMessages::from(held.clone()).to_vec(), held);
    }
}
