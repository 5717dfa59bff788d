//! Session entries (spec §1.2): the header line and every entry type, as typed values.
//!
//! Unknown entry types and unknown fields are kept in `extra` / [`EntryKind::Unknown`] so a
//! rewrite keeps them. `fromExtension` is written; the upstream name `fromHook` is accepted on
//! read (it lands in the same field).//!
//! The code is in three parts: the types and their accessors (here), the lazily parsed raw
//! line of a loaded entry (`raw`), and the conversion to and from JSON (`wire`).

use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ids::ms_from_iso;
use super::message::{AgentMessage, Content, Extra, tagged};

use raw::RawSpan;

/// The version compactd writes.
pub const CURRENT_SESSION_VERSION: u64 = 3;

/// The header line of a session file: line 1, or line 2 after a [`TitleLine`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionHeader {
    /// Absent means version 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default)]
    pub timestamp: String,
    #[serde(default)]
    pub cwd: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
    /// The title slot before the header, in files of oh-my-pi 18 and later; `None` for every
    /// file that has none (compactd never adds one).
    #[serde(skip)]
    pub title_line: Option<TitleLine>,
}

/// oh-my-pi 18's first line, `{"type":"title","v":1,"title":…,"updatedAt":…,"pad":"  …"}`: a
/// fixed-width slot before the header that the agent rewrites in place when the title changes.
/// compactd reads the title from it and writes it back byte for byte in every rewrite.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TitleLine {
    /// The line as written, without its `\n`.
    bytes: Box<[u8]>,
    /// Its `title`; empty when it has none.
    title: String,
}

impl TitleLine {
    /// `line` (parsed as `value`) when it is a title line.
    pub fn from_line(line: &[u8], value: &Value) -> Option<TitleLine> {
        if value.get("type").and_then(Value::as_str) != Some("title") {
            return None;
        }
        let title = value.get("title").and_then(Value::as_str).unwrap_or("");
        Some(TitleLine {
            bytes: line.into(),
            title: title.to_owned(),
        })
    }

    /// The line as written, without its `\n`.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The title it holds, if not empty.
    pub fn title(&self) -> Option<&str> {
        Some(self.title.as_str()).filter(|t| !t.is_empty())
    }
}

impl SessionHeader {
    /// The session's title: the title line's when it holds one (the agent keeps it current
    /// there), else the header's.
    pub fn display_title(&self) -> Option<&str> {
        self.title_line
            .as_ref()
            .and_then(TitleLine::title)
            .or(self.title.as_deref())
    }

    /// What a file holds before its first entry, without the last `\n`: the title line (when
    /// the file has one) and the header line.
    pub fn head_bytes(&self) -> Vec<u8> {
        let header = self.to_value().to_string();
        let mut out = Vec::with_capacity(header.len() + 258);
        if let Some(title) = &self.title_line {
            out.extend_from_slice(title.bytes());
            out.push(b'\n');
        }
        out.extend_from_slice(header.as_bytes());
        out
    }

    /// Lines before the first entry: 2 with a title line, else 1.
    pub fn head_lines(&self) -> usize {
        1 + usize::from(self.title_line.is_some())
    }

    pub fn to_value(&self) -> Value {
        // Cannot fail: all keys are strings.
        tagged(
            "type",
            "session",
            serde_json::to_value(self).expect("header serialises"),
        )
    }

    /// Parses a header line; `None` when it is not a `type:"session"` object with a string id.
    pub fn from_value(value: Value) -> Option<Self> {
        let Value::Object(mut map) = value else {
            return None;
        };
        if map.get("type").and_then(Value::as_str) != Some("session") {
            return None;
        }
        map.remove("type");
        map.get("id")?.as_str()?;
        serde_json::from_value(Value::Object(map)).ok()
    }
}

/// `compaction` entry fields.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactionEntry {
    pub summary: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub short_summary: Option<String>,
    #[serde(default)]
    pub first_kept_entry_id: String,
    #[serde(default)]
    pub tokens_before: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preserve_data: Option<Value>,
    #[serde(default, alias = "fromHook", skip_serializing_if = "Option::is_none")]
    pub from_extension: Option<bool>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `branch_summary` entry fields.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BranchSummaryEntry {
    /// The attach point (`"root"` when attached at the root), as the reference writes it.
    #[serde(default)]
    pub from_id: String,
    #[serde(default)]
    pub summary: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    #[serde(default, alias = "fromHook", skip_serializing_if = "Option::is_none")]
    pub from_extension: Option<bool>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `custom_message` entry fields.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CustomMessageEntry {
    #[serde(default)]
    pub custom_type: String,
    #[serde(default)]
    pub content: Content,
    #[serde(default)]
    pub display: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// What an entry is; the variant fields of spec §1.2.
#[derive(Clone, Debug, PartialEq)]
pub enum EntryKind {
    Message(AgentMessage),
    ThinkingLevelChange {
        thinking_level: String,
    },
    /// `model` is `provider/id`; v1 entries carry `provider`/`modelId` instead (kept in `extra`).
    ModelChange {
        model: Option<String>,
        role: Option<String>,
    },
    Compaction(CompactionEntry),
    BranchSummary(BranchSummaryEntry),
    Custom {
        custom_type: String,
        data: Option<Value>,
    },
    CustomMessage(CustomMessageEntry),
    /// `label` absent or empty clears the label.
    Label {
        target_id: String,
        label: Option<String>,
    },
    TtsrInjection {
        injected_rules: Vec<String>,
    },
    SessionInit {
        system_prompt: Value,
        task: Value,
        tools: Value,
        output_schema: Option<Value>,
    },
    ModeChange {
        mode: String,
        data: Option<Value>,
    },
    /// compactd's own leaf marker, appended after a navigation that appended nothing: its
    /// `parentId` is the new leaf (`None` after a reset to no leaf). The reference takes the last
    /// line as its leaf and skips unknown types, so it rebuilds the same context from it.
    LeafMove,
    /// An entry type this version does not know; all its fields are in `Entry::extra`.
    Unknown {
        type_name: String,
    },
}

impl EntryKind {
    /// The wire name of the entry type.
    pub fn type_name(&self) -> &str {
        match self {
            EntryKind::Message(_) => "message",
            EntryKind::ThinkingLevelChange { .. } => "thinking_level_change",
            EntryKind::ModelChange { .. } => "model_change",
            EntryKind::Compaction(_) => "compaction",
            EntryKind::BranchSummary(_) => "branch_summary",
            EntryKind::Custom { .. } => "custom",
            EntryKind::CustomMessage(_) => "custom_message",
            EntryKind::Label { .. } => "label",
            EntryKind::TtsrInjection { .. } => "ttsr_injection",
            EntryKind::SessionInit { .. } => "session_init",
            EntryKind::ModeChange { .. } => "mode_change",
            EntryKind::LeafMove => LEAF_MOVE_TYPE,
            EntryKind::Unknown { type_name } => type_name,
        }
    }
}

/// The wire names of the types compactd knows: what [`EntryKind::type_name`] gives for every
/// variant but `Unknown`. A raw line of one of these types shares the name instead of
/// allocating it (`raw.rs`); the wire module's round trip of every type checks the list.
pub(crate) const KNOWN_TYPE_NAMES: [&str; 12] = [
    "message",
    "thinking_level_change",
    "model_change",
    "compaction",
    "branch_summary",
    "custom",
    "custom_message",
    "label",
    "ttsr_injection",
    "session_init",
    "mode_change",
    LEAF_MOVE_TYPE,
];

/// Wire name of [`EntryKind::LeafMove`].
pub const LEAF_MOVE_TYPE: &str = "compactd_leaf";

/// Most bytes of raw lines a pass over many entries parses and keeps parsed
/// ([`Entry::worth_keeping_parsed`]). A parsed body costs about ten times its line, so above
/// this a pass parses each entry for the moment it looks at it and drops the parse.
const KEEP_PARSED_MAX_BYTES: usize = 16 << 20;

/// One line of a session file after the header.
///
/// An entry loaded from a version 3 file starts as its raw line (a span of the file buffer,
/// shared by all entries read with it) plus the fields every decision needs: `id`, `parentId`,
/// `timestamp` and the wire type. Its typed [`EntryKind`] and unmodelled fields are parsed on
/// the first call to [`Entry::kind`] or [`Entry::extra`] and kept, so a long session costs a
/// header parse per line to open and a full parse only of the entries something reads.
#[derive(Clone)]
pub struct Entry {
    pub id: String,
    /// `None` for a root.
    pub parent_id: Option<String>,
    /// ISO-8601.
    pub timestamp: String,
    body: Body,
}

/// The typed part of an entry.
#[derive(Clone, Debug, PartialEq)]
struct Fields {
    kind: EntryKind,
    /// Fields this version does not model, in their original order.
    extra: Extra,
    /// Set when the body of a loaded line could not be parsed (a number beyond `f64`, a lone
    /// surrogate escape): `kind` is then [`EntryKind::Unknown`] with no fields, and the line is
    /// written back exactly as it was read.
    unparsed: Option<RawSpan>,
}

/// A parsed body is shared between clones of an entry (a copy of a long branch, an event's
/// copy of an appended entry) and copied only when one of them is modified: a compaction's
/// entry holds its whole ledger, megabytes on a huge session (issue 35 item 7).
#[derive(Clone)]
enum Body {
    Parsed(Arc<Fields>),
    Raw {
        line: RawSpan,
        parsed: OnceLock<Arc<Fields>>,
    },
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
            && self.parent_id == other.parent_id
            && self.timestamp == other.timestamp
            && self.fields() == other.fields()
    }
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("id", &self.id)
            .field("parent_id", &self.parent_id)
            .field("timestamp", &self.timestamp)
            .field("kind", self.kind())
            .field("extra", self.extra())
            .finish()
    }
}

impl Entry {
    /// An entry with no unmodelled fields.
    pub fn new(
        id: impl Into<String>,
        parent_id: Option<String>,
        timestamp: impl Into<String>,
        kind: EntryKind,
    ) -> Entry {
        Entry::with_extra(id, parent_id, timestamp, kind, Extra::new())
    }

    /// An entry with unmodelled fields to write after the modelled ones.
    pub fn with_extra(
        id: impl Into<String>,
        parent_id: Option<String>,
        timestamp: impl Into<String>,
        kind: EntryKind,
        extra: Extra,
    ) -> Entry {
        Entry {
            id: id.into(),
            parent_id,
            timestamp: timestamp.into(),
            body: Body::Parsed(Arc::new(Fields {
                kind,
                extra,
                unparsed: None,
            })),
        }
    }

    fn fields(&self) -> &Fields {
        match &self.body {
            Body::Parsed(f) => f,
            Body::Raw { line, parsed } => parsed.get_or_init(|| Arc::new(line.parse())),
        }
    }

    /// The fields to modify: this entry's own copy when a clone shares them.
    fn fields_mut(&mut self) -> &mut Fields {
        if let Body::Raw { line, parsed } = &mut self.body {
            let fields = parsed.take().unwrap_or_else(|| Arc::new(line.parse()));
            self.body = Body::Parsed(fields);
        }
        match &mut self.body {
            Body::Parsed(f) => Arc::make_mut(f),
            Body::Raw { .. } => unreachable!("a raw body was just replaced by a parsed one"),
        }
    }

    fn into_fields(self) -> Fields {
        let shared = match self.body {
            Body::Parsed(f) => f,
            Body::Raw { line, parsed } => match parsed.into_inner() {
                Some(f) => f,
                None => return line.parse(),
            },
        };
        Arc::unwrap_or_clone(shared)
    }

    /// What the entry is (parsed on first use for a loaded entry).
    pub fn kind(&self) -> &EntryKind {
        &self.fields().kind
    }

    /// Mutable access to the kind; the entry is parsed and no longer tied to its raw line.
    pub fn kind_mut(&mut self) -> &mut EntryKind {
        &mut self.fields_mut().kind
    }

    /// The kind and the unmodelled fields, both mutable.
    pub fn parts_mut(&mut self) -> (&mut EntryKind, &mut Extra) {
        let f = self.fields_mut();
        (&mut f.kind, &mut f.extra)
    }

    /// The kind, by value.
    pub fn into_kind(self) -> EntryKind {
        self.into_fields().kind
    }

    /// The kind and the unmodelled fields, by value.
    pub fn into_parts(self) -> (EntryKind, Extra) {
        let f = self.into_fields();
        (f.kind, f.extra)
    }

    /// Fields this version does not model, in their original order.
    pub fn extra(&self) -> &Extra {
        &self.fields().extra
    }

    pub fn extra_mut(&mut self) -> &mut Extra {
        &mut self.fields_mut().extra
    }

    /// Drops the parsed body of an unmodified loaded entry, keeping its line; the next read
    /// parses it again. Frees what a one-off pass over old history (a compaction) parsed.
    pub fn forget_parsed(&mut self) {
        if let Body::Raw { parsed, .. } = &mut self.body {
            parsed.take();
        }
    }

    /// The entry with its body parsed, without keeping the parse: borrowed when the body is
    /// already parsed, else a parsed copy that is dropped with the `Cow`. For passes over a
    /// whole long path (usage, a compaction plan of a million entries), where keeping every
    /// parsed body would cost many times the file (issue 35 item 7).
    pub fn peek(&self) -> Cow<'_, Entry> {
        match &self.body {
            Body::Raw { line, parsed } if parsed.get().is_none() => Cow::Owned(Entry {
                id: self.id.clone(),
                parent_id: self.parent_id.clone(),
                timestamp: self.timestamp.clone(),
                body: Body::Parsed(Arc::new(line.parse())),
            }),
            _ => Cow::Borrowed(self),
        }
    }

    /// Whether the bodies of `entries` still to be parsed are few enough bytes to keep parsed
    /// (see [`Entry::parse_all`]); above, passes over them [`Entry::peek`] instead.
    pub fn worth_keeping_parsed(entries: &[&Entry]) -> bool {
        let mut total = 0usize;
        entries.iter().all(|e| {
            total += e.unparsed_len();
            total <= KEEP_PARSED_MAX_BYTES
        })
    }

    /// Whether the typed body has been parsed (always for entries built in memory).
    pub fn is_parsed(&self) -> bool {
        match &self.body {
            Body::Parsed(_) => true,
            Body::Raw { parsed, .. } => parsed.get().is_some(),
        }
    }

    pub fn message(&self) -> Option<&AgentMessage> {
        match self.kind() {
            EntryKind::Message(m) => Some(m),
            _ => None,
        }
    }

    /// The wire type; known without parsing the body.
    pub fn type_name(&self) -> &str {
        match &self.body {
            Body::Raw { line, parsed } if parsed.get().is_none() => &line.type_name,
            _ => self.kind().type_name(),
        }
    }

    /// Whether this is a `compactd_leaf` marker; known without parsing the body.
    pub fn is_leaf_move(&self) -> bool {
        self.type_name() == LEAF_MOVE_TYPE
    }

    /// Bytes of the raw line still to be parsed; 0 once parsed or for a built entry.
    fn unparsed_len(&self) -> usize {
        match &self.body {
            Body::Raw { line, parsed } if parsed.get().is_none() => line.len(),
            _ => 0,
        }
    }

    /// Parses the bodies of `entries` that are still raw, on the machine's cores when there
    /// are enough bytes to pay for the threads. The result is what parsing each on first use
    /// would give (an entry's body is parsed once, whichever thread gets there); only the wall
    /// time changes. For callers about to read every entry of a long window.
    pub fn parse_all(entries: &[&Entry]) {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self::parse_on(entries, cores);
    }

    /// [`Entry::parse_all`] on `cores` cores, whatever the machine has.
    fn parse_on(entries: &[&Entry], cores: usize) {
        /// Below this many bytes a second thread costs more than it saves.
        const MIN_PARALLEL_BYTES: usize = 256 << 10;
        let pending: Vec<&Entry> = entries
            .iter()
            .copied()
            .filter(|e| e.unparsed_len() > 0)
            .collect();
        let total: usize = pending.iter().map(|e| e.unparsed_len()).sum();
        if total < MIN_PARALLEL_BYTES {
            return;
        }
        // One thread per core (8 at most), and no more than one per 128 KiB of bodies.
        let threads = cores.min(8).min(total / (MIN_PARALLEL_BYTES / 2));
        if threads < 2 {
            return;
        }
        // Each thread takes the next entry nobody has taken until none is left, so a thread
        // that runs slower does not keep the others waiting. Fixed halves of equal bytes did:
        // the spawned thread's first allocations fault in a fresh malloc arena, and on the
        // window of the 50 MB bench session it finished ~1.3 ms (about a tenth of the open
        // and plan) after this one.
        let next = AtomicUsize::new(0);
        let parse = || {
            while let Some(e) = pending.get(next.fetch_add(1, Ordering::Relaxed)) {
                e.fields();
            }
        };
        std::thread::scope(|s| {
            for _ in 1..threads {
                s.spawn(parse);
            }
            parse();
        });
    }
}

/// The message an entry contributes to a conversation (spec §3.1 step 4, §4.6 step 8, §6.2).
impl Entry {
    /// The message this entry yields in a rebuilt context: a `message` as is, a
    /// `custom_message` as a `custom` message, a `branch_summary` as a `branchSummary` message.
    /// `compaction` entries yield a `compactionSummary` message only when
    /// `include_compaction` is set (branch summarization reads them; context rebuilding and
    /// compaction windows do not). Metadata yields nothing.
    pub fn to_agent_message(&self, include_compaction: bool) -> Option<AgentMessage> {
        self.agent_message(include_compaction).map(Cow::into_owned)
    }

    /// [`Entry::to_agent_message`], moving a `message` entry's message out instead of copying
    /// it (for a [`Entry::peek`] copy).
    pub fn into_agent_message(self, include_compaction: bool) -> Option<AgentMessage> {
        if !matches!(self.kind(), EntryKind::Message(_)) {
            return self.to_agent_message(include_compaction);
        }
        match self.into_kind() {
            EntryKind::Message(m) => Some(m),
            _ => None,
        }
    }

    /// [`Entry::agent_message`] of [`Entry::peek`]: the message, without keeping the body
    /// parsed when it was not.
    pub fn peek_message(&self, include_compaction: bool) -> Option<Cow<'_, AgentMessage>> {
        match self.peek() {
            Cow::Borrowed(e) => e.agent_message(include_compaction),
            Cow::Owned(e) => e.into_agent_message(include_compaction).map(Cow::Owned),
        }
    }

    /// [`Entry::to_agent_message`], borrowing a `message` entry's message instead of copying
    /// it (a tool output can be megabytes): for looking at it, e.g. counting its tokens.
    pub fn agent_message(&self, include_compaction: bool) -> Option<Cow<'_, AgentMessage>> {
        use super::message::{BranchSummaryMessage, CompactionSummaryMessage, CustomMessage};
        if let EntryKind::Message(m) = self.kind() {
            return Some(Cow::Borrowed(m));
        }
        let timestamp = ms_from_iso(&self.timestamp).map(Value::from);
        let owned = match self.kind() {
            EntryKind::Message(m) => Some(m.clone()),
            EntryKind::CustomMessage(c) => Some(AgentMessage::Custom(CustomMessage {
                custom_type: c.custom_type.clone(),
                content: c.content.clone(),
                display: c.display,
                details: c.details.clone(),
                timestamp,
                extra: Extra::new(),
            })),
            EntryKind::BranchSummary(b) => {
                Some(AgentMessage::BranchSummary(BranchSummaryMessage {
                    summary: b.summary.clone(),
                    from_id: b.from_id.clone(),
                    timestamp,
                    extra: Extra::new(),
                }))
            }
            EntryKind::Compaction(c) if include_compaction => {
                Some(AgentMessage::CompactionSummary(CompactionSummaryMessage {
                    summary: c.summary.clone(),
                    short_summary: c.short_summary.clone(),
                    tokens_before: c.tokens_before,
                    timestamp,
                    extra: Extra::new(),
                }))
            }
            _ => None,
        };
        owned.map(Cow::Owned)
    }
}

pub(crate) mod head;
mod raw;
mod wire;

pub(crate) use raw::{LineSource, read_exact_at};

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn header_parses_and_rejects() {
        let h = SessionHeader::from_value(
            json!({"type":"session","id":"abc","timestamp":"t","cwd":"/x","provider":"p"}),
        )
        .unwrap();
        assert_eq!(h.version, None);
        assert_eq!(h.to_value()["provider"], json!("p"));
        assert!(SessionHeader::from_value(json!({"type":"message","id":"abc"})).is_none());
        assert!(SessionHeader::from_value(json!({"type":"session","id":5})).is_none());
    }

    /// Lines of ~1 KB, enough of them for `parse_all` to use its threads, one of them with a
    /// body serde refuses (a number beyond `f64`).
    fn raw_entries(src: &std::sync::Arc<LineSource>) -> Vec<Entry> {
        let bytes = src.bytes();
        let mut entries = Vec::new();
        let mut start = 0;
        for end in memchr::memchr_iter(b'\n', bytes) {
            entries.push(Entry::from_shared_line(src, start, end).expect("a usual header"));
            start = end + 1;
        }
        entries
    }

    #[test]
    fn parse_all_parses_every_raw_body_as_parsing_each_would() {
        let mut text = String::new();
        for i in 0..600 {
            let line = if i == 300 {
                json!({"type":"message","id":format!("e{i}"),"parentId":null,"timestamp":"t",
                       "message":{"role":"user","content":"x","n":1}})
                .to_string()
                .replace("\"n\":1", "\"n\":1e400")
            } else {
                json!({"type":"message","id":format!("e{i}"),"parentId":null,"timestamp":"t",
                       "message":{"role":"assistant","content":[{"type":"text","text":"y".repeat(1000)}]}})
                .to_string()
            };
            text.push_str(&line);
            text.push('\n');
        }
        assert!(text.len() > 512 << 10, "more than one thread's share");
        let src = LineSource::memory(text.into_bytes());
        // The cores are given, so the threaded path runs whatever the machine has; on one
        // core the bodies are left to be parsed on first use.
        for cores in [1, 2, 3] {
            let (threaded, one_by_one) = (raw_entries(&src), raw_entries(&src));
            let refs: Vec<&Entry> = threaded.iter().collect();
            assert!(refs.iter().all(|e| e.unparsed_len() > 0));
            Entry::parse_on(&refs, cores);
            for (a, b) in threaded.iter().zip(&one_by_one) {
                assert_eq!(
                    a.unparsed_len() == 0,
                    cores > 1,
                    "{} on {cores} cores",
                    a.id
                );
                assert_eq!(a.kind(), b.kind());
                assert_eq!(a.extra(), b.extra());
            }
            assert!(matches!(threaded[300].kind(), EntryKind::Unknown { .. }));
            assert!(matches!(threaded[299].kind(), EntryKind::Message(_)));
        }
    }
}
