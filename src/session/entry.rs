//! Session entries (spec §1.2): the header line and every entry type, as typed values.
//!
//! Unknown entry types and unknown fields are kept in `extra` / [`EntryKind::Unknown`] so a
//! rewrite keeps them. `fromExtension` is written; the upstream name `fromHook` is accepted on
//! read (it lands in the same field).

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::message::{AgentMessage, Content, Extra, tagged};

/// The version compactd writes.
pub const CURRENT_SESSION_VERSION: u64 = 3;

/// Line 1 of a session file.
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
}

impl SessionHeader {
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

/// Wire name of [`EntryKind::LeafMove`].
pub const LEAF_MOVE_TYPE: &str = "compactd_leaf";

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

#[derive(Clone)]
enum Body {
    Parsed(Box<Fields>),
    Raw {
        line: RawSpan,
        parsed: OnceLock<Box<Fields>>,
    },
}

/// A line of a shared file buffer, known to be UTF-8 JSON with a string `type`.
#[derive(Clone)]
pub(crate) struct RawSpan {
    buf: Arc<Vec<u8>>,
    start: usize,
    end: usize,
    type_name: Box<str>,
}

impl PartialEq for RawSpan {
    fn eq(&self, other: &Self) -> bool {
        self.text() == other.text()
    }
}

impl std::fmt::Debug for RawSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RawSpan").field(&self.text()).finish()
    }
}

impl RawSpan {
    /// Whether `entry`'s header fields are still the ones this line holds, so the line can be
    /// written back verbatim.
    fn head_matches(&self, entry: &Entry) -> bool {
        let Ok(head) = serde_json::from_str::<Head<'_>>(self.text()) else {
            return false;
        };
        head.id.as_deref().unwrap_or_default() == entry.id
            && head.parent_id.as_deref() == entry.parent_id.as_deref()
            && head.timestamp.as_deref().unwrap_or_default() == entry.timestamp
    }

    fn text(&self) -> &str {
        // The loader checked that this span is UTF-8 before it made the span; a failure here
        // would be a loader bug, so fall back to an empty object rather than panic.
        std::str::from_utf8(&self.buf[self.start..self.end]).unwrap_or("{}")
    }

    /// The full parse the eager loader used to do. A line the head parse accepted but
    /// `serde_json::Value` refuses (a number beyond `f64`, a lone surrogate escape) becomes an
    /// unknown entry that keeps its line, so a rewrite writes it back unchanged.
    fn parse(&self) -> Fields {
        let parsed = serde_json::from_str::<Value>(self.text())
            .map_err(|e| e.to_string())
            .and_then(|v| Entry::from_value(v).map_err(|e| e.to_string()));
        match parsed {
            Ok(entry) => entry.into_fields(),
            Err(reason) => {
                tracing::warn!(%reason, type_name = %self.type_name, "entry body does not parse");
                Fields {
                    kind: EntryKind::Unknown {
                        type_name: self.type_name.to_string(),
                    },
                    extra: Extra::new(),
                    unparsed: Some(self.clone()),
                }
            }
        }
    }
}

/// `line` (a JSON object) with its `id`, `parentId` and `timestamp` members set to the given
/// values, in place or, when missing, after `type`; every other member is copied as written,
/// so values `serde_json::Value` cannot hold (`1e400`, a lone surrogate) survive. `None` when
/// the line is not an object with string keys.
fn reheaded(line: &str, id: &str, parent_id: Option<&str>, timestamp: &str) -> Option<String> {
    use serde_json::value::RawValue;

    struct Members<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);
    impl<'de> Deserialize<'de> for Members<'de> {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct Visit;
            impl<'de> serde::de::Visitor<'de> for Visit {
                type Value = Members<'de>;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a JSON object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut map: A,
                ) -> Result<Members<'de>, A::Error> {
                    let mut out = Vec::new();
                    while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                        out.push((key, map.next_value::<&'de RawValue>()?));
                    }
                    Ok(Members(out))
                }
            }
            d.deserialize_map(Visit)
        }
    }

    let Members(members) = serde_json::from_str(line).ok()?;
    let head = [
        ("id", Value::from(id)),
        ("parentId", parent_id.map_or(Value::Null, Value::from)),
        ("timestamp", Value::from(timestamp)),
    ];
    let mut parts: Vec<String> = Vec::with_capacity(members.len() + 3);
    let mut placed = [false; 3];
    for (key, value) in &members {
        let slot = head.iter().position(|(k, _)| *k == key.as_ref());
        let value = match slot {
            Some(i) if placed[i] => continue,
            Some(i) => {
                placed[i] = true;
                head[i].1.to_string()
            }
            None => value.get().to_owned(),
        };
        parts.push(format!("{}:{value}", Value::from(key.as_ref())));
        if key == "type" {
            for (i, (k, v)) in head.iter().enumerate() {
                if !members.iter().any(|(m, _)| m == k) {
                    placed[i] = true;
                    parts.push(format!("{}:{v}", Value::from(*k)));
                }
            }
        }
    }
    Some(format!("{{{}}}", parts.join(",")))
}

/// The fields of a line that every decision needs, borrowed from the line; bodies are skipped.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow, rename = "type")]
    type_name: Cow<'a, str>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "parentId")]
    parent_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    timestamp: Option<Cow<'a, str>>,
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
            body: Body::Parsed(Box::new(Fields {
                kind,
                extra,
                unparsed: None,
            })),
        }
    }

    /// The line `buf[start..end]` as an entry whose body is parsed on first use. `Err` when
    /// the line is not UTF-8 JSON with the header fields in their usual shape (a string
    /// `type`, string-or-absent ids): the caller then parses it eagerly with
    /// [`Entry::from_value`], which decides exactly as before.
    pub(crate) fn from_shared_line(
        buf: &Arc<Vec<u8>>,
        start: usize,
        end: usize,
    ) -> Result<Entry, ()> {
        let text = std::str::from_utf8(&buf[start..end]).map_err(|_| ())?;
        let head: Head<'_> = serde_json::from_str(text).map_err(|_| ())?;
        Ok(Entry {
            id: head.id.map(Cow::into_owned).unwrap_or_default(),
            parent_id: head.parent_id.map(Cow::into_owned),
            timestamp: head.timestamp.map(Cow::into_owned).unwrap_or_default(),
            body: Body::Raw {
                line: RawSpan {
                    buf: Arc::clone(buf),
                    start,
                    end,
                    type_name: head.type_name.into(),
                },
                parsed: OnceLock::new(),
            },
        })
    }

    fn fields(&self) -> &Fields {
        match &self.body {
            Body::Parsed(f) => f,
            Body::Raw { line, parsed } => parsed.get_or_init(|| Box::new(line.parse())),
        }
    }

    fn fields_mut(&mut self) -> &mut Fields {
        if let Body::Raw { line, parsed } = &mut self.body {
            let fields = parsed.take().unwrap_or_else(|| Box::new(line.parse()));
            self.body = Body::Parsed(fields);
        }
        match &mut self.body {
            Body::Parsed(f) => f,
            Body::Raw { .. } => unreachable!("a raw body was just replaced by a parsed one"),
        }
    }

    fn into_fields(self) -> Fields {
        match self.body {
            Body::Parsed(f) => *f,
            Body::Raw { line, parsed } => parsed.into_inner().map_or_else(|| line.parse(), |f| *f),
        }
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

    /// For an entry whose body could not be parsed: rewrites its kept line so its `id`,
    /// `parentId` and `timestamp` are the entry's current ones (after a migration gave it new
    /// ids), every other member kept as written. Does nothing for other entries.
    pub(crate) fn rehead_unparsed(&mut self) {
        let (id, parent_id, timestamp) = (
            self.id.clone(),
            self.parent_id.clone(),
            self.timestamp.clone(),
        );
        let fields = self.fields_mut();
        let Some(line) = &fields.unparsed else {
            return;
        };
        let Some(text) = reheaded(line.text(), &id, parent_id.as_deref(), &timestamp) else {
            return;
        };
        let bytes = Arc::new(text.into_bytes());
        let end = bytes.len();
        fields.unparsed = Some(RawSpan {
            buf: bytes,
            start: 0,
            end,
            type_name: line.type_name.clone(),
        });
    }

    /// Drops the parsed body of an unmodified loaded entry, keeping its line; the next read
    /// parses it again. Frees what a one-off pass over old history (a compaction) parsed.
    pub fn forget_parsed(&mut self) {
        if let Body::Raw { parsed, .. } = &mut self.body {
            parsed.take();
        }
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

    /// The entry as a JSON object: `type`, `id`, `parentId`, `timestamp`, then its fields.
    pub fn to_value(&self) -> Value {
        let mut out = Map::new();
        out.insert("type".into(), Value::from(self.type_name()));
        out.insert("id".into(), Value::from(self.id.clone()));
        out.insert(
            "parentId".into(),
            self.parent_id.clone().map_or(Value::Null, Value::from),
        );
        out.insert("timestamp".into(), Value::from(self.timestamp.clone()));
        let fields = kind_fields(self.kind());
        out.extend(fields);
        for (k, v) in self.extra() {
            out.entry(k.clone()).or_insert_with(|| v.clone());
        }
        Value::Object(out)
    }

    /// One JSONL line, without the newline. A loaded line nothing has modified is written
    /// back byte for byte (key order, number spelling and escapes as read); so is a line whose
    /// body could not be parsed, whatever happened to it since.
    pub fn to_line(&self) -> String {
        if let Body::Raw { line, .. } = &self.body
            && line.head_matches(self)
        {
            return line.text().to_owned();
        }
        if let Some(line) = &self.fields().unparsed {
            if !line.head_matches(self) {
                tracing::warn!(id = %self.id, "writing an unparsed line with its original header");
            }
            return line.text().to_owned();
        }
        self.to_value().to_string()
    }

    /// Parses an entry object. An entry whose known type has fields of the wrong shape is kept
    /// as [`EntryKind::Unknown`] so nothing is lost; `Err` only when it is not an object or has
    /// no `type`.
    pub fn from_value(value: Value) -> Result<Self, EntryError> {
        let Value::Object(mut map) = value else {
            return Err(EntryError::NotAnObject);
        };
        let type_name = match map.get("type").and_then(Value::as_str) {
            Some(t) => t.to_owned(),
            None => return Err(EntryError::NoType),
        };
        let id = match map.get("id") {
            Some(Value::String(s)) => s.clone(),
            _ => String::new(),
        };
        let parent_id = match map.get("parentId") {
            Some(Value::String(s)) => Some(s.clone()),
            _ => None,
        };
        let timestamp = map
            .get("timestamp")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let original = map.clone();
        for k in ["type", "id", "parentId", "timestamp"] {
            map.remove(k);
        }
        match parse_kind(&type_name, &mut map) {
            Some(kind) => Ok(Entry::with_extra(id, parent_id, timestamp, kind, map)),
            None => {
                let mut extra = original;
                for k in ["type", "id", "parentId", "timestamp"] {
                    extra.remove(k);
                }
                Ok(Entry::with_extra(
                    id,
                    parent_id,
                    timestamp,
                    EntryKind::Unknown { type_name },
                    extra,
                ))
            }
        }
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
        use super::message::{BranchSummaryMessage, CompactionSummaryMessage, CustomMessage};
        let timestamp = iso_to_epoch_ms(&self.timestamp).map(Value::from);
        match self.kind() {
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
        }
    }
}

/// Milliseconds since the Unix epoch of an ISO-8601 UTC timestamp such as
/// `2026-01-02T03:04:05.678Z` (the form the reference writes); `None` when it is not one.
pub fn iso_to_epoch_ms(iso: &str) -> Option<i64> {
    let b = iso.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let s = iso.get(r)?;
        if s.bytes().all(|c| c.is_ascii_digit()) {
            s.parse().ok()
        } else {
            None
        }
    };
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut ms = 0;
    let mut rest = &iso[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        let padded = format!("{:0<3}", &frac[..digits.min(3)]);
        ms = padded.parse::<i64>().ok()?;
        rest = &frac[digits..];
    }
    if !(rest == "Z" || rest.is_empty() || rest == "+00:00") || !(1..=12).contains(&mo) {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm), valid for the proleptic Gregorian calendar.
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + h) * 60 + mi) * 60_000 + s * 1000 + ms)
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum EntryError {
    #[error("entry is not a JSON object")]
    NotAnObject,
    #[error("entry has no string `type`")]
    NoType,
}

fn take_string(map: &mut Map<String, Value>, key: &str) -> Option<String> {
    match map.remove(key) {
        Some(Value::String(s)) => Some(s),
        Some(other) => {
            map.insert(key.to_owned(), other);
            None
        }
        None => None,
    }
}

fn take<T: serde::de::DeserializeOwned>(map: &mut Map<String, Value>) -> Option<T> {
    let value = Value::Object(std::mem::take(map));
    serde_json::from_value(value).ok()
}

/// Moves the fields of a known entry type out of `map` into its kind. `None` when a required
/// field has the wrong shape (the caller then keeps the entry as unknown).
fn parse_kind(type_name: &str, map: &mut Map<String, Value>) -> Option<EntryKind> {
    Some(match type_name {
        "message" => {
            let message = map.remove("message")?;
            EntryKind::Message(AgentMessage::from_value(message).ok()?)
        }
        "thinking_level_change" => EntryKind::ThinkingLevelChange {
            thinking_level: take_string(map, "thinkingLevel")?,
        },
        "model_change" => EntryKind::ModelChange {
            model: take_string(map, "model"),
            role: take_string(map, "role"),
        },
        "compaction" => EntryKind::Compaction(take(map)?),
        "branch_summary" => EntryKind::BranchSummary(take(map)?),
        "custom" => EntryKind::Custom {
            custom_type: take_string(map, "customType").unwrap_or_default(),
            data: map.remove("data"),
        },
        "custom_message" => EntryKind::CustomMessage(take(map)?),
        "label" => EntryKind::Label {
            target_id: take_string(map, "targetId")?,
            label: take_string(map, "label"),
        },
        "ttsr_injection" => {
            let rules = map.remove("injectedRules").unwrap_or(Value::Array(vec![]));
            EntryKind::TtsrInjection {
                injected_rules: serde_json::from_value(rules).ok()?,
            }
        }
        "session_init" => EntryKind::SessionInit {
            system_prompt: map.remove("systemPrompt").unwrap_or(Value::Null),
            task: map.remove("task").unwrap_or(Value::Null),
            tools: map.remove("tools").unwrap_or(Value::Null),
            output_schema: map.remove("outputSchema"),
        },
        "mode_change" => EntryKind::ModeChange {
            mode: take_string(map, "mode").unwrap_or_else(|| "none".into()),
            data: map.remove("data"),
        },
        LEAF_MOVE_TYPE => EntryKind::LeafMove,
        _ => return None,
    })
}

/// The fields of a kind, in wire form (without the common fields).
fn kind_fields(kind: &EntryKind) -> Map<String, Value> {
    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }
    fn ser<T: Serialize>(t: &T) -> Map<String, Value> {
        // Cannot fail: all keys are strings.
        obj(serde_json::to_value(t).expect("entry fields serialise"))
    }
    let mut m = Map::new();
    match kind {
        EntryKind::Message(msg) => {
            m.insert("message".into(), msg.to_value());
        }
        EntryKind::ThinkingLevelChange { thinking_level } => {
            m.insert("thinkingLevel".into(), Value::from(thinking_level.clone()));
        }
        EntryKind::ModelChange { model, role } => {
            if let Some(model) = model {
                m.insert("model".into(), Value::from(model.clone()));
            }
            if let Some(role) = role {
                m.insert("role".into(), Value::from(role.clone()));
            }
        }
        EntryKind::Compaction(c) => m = ser(c),
        EntryKind::BranchSummary(b) => m = ser(b),
        EntryKind::Custom { custom_type, data } => {
            m.insert("customType".into(), Value::from(custom_type.clone()));
            if let Some(data) = data {
                m.insert("data".into(), data.clone());
            }
        }
        EntryKind::CustomMessage(c) => m = ser(c),
        EntryKind::Label { target_id, label } => {
            m.insert("targetId".into(), Value::from(target_id.clone()));
            if let Some(label) = label {
                m.insert("label".into(), Value::from(label.clone()));
            }
        }
        EntryKind::TtsrInjection { injected_rules } => {
            m.insert("injectedRules".into(), Value::from(injected_rules.clone()));
        }
        EntryKind::SessionInit {
            system_prompt,
            task,
            tools,
            output_schema,
        } => {
            m.insert("systemPrompt".into(), system_prompt.clone());
            m.insert("task".into(), task.clone());
            m.insert("tools".into(), tools.clone());
            if let Some(s) = output_schema {
                m.insert("outputSchema".into(), s.clone());
            }
        }
        EntryKind::ModeChange { mode, data } => {
            m.insert("mode".into(), Value::from(mode.clone()));
            if let Some(data) = data {
                m.insert("data".into(), data.clone());
            }
        }
        EntryKind::LeafMove | EntryKind::Unknown { .. } => {}
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip(v: Value) {
        let e = Entry::from_value(v.clone()).unwrap();
        assert_eq!(e.to_value(), v, "round trip of {v}");
    }

    #[test]
    fn every_entry_type_round_trips() {
        let base = |t: &str, extra: Value| {
            let mut m = json!({"type": t, "id": "a1", "parentId": "p0", "timestamp": "2026-01-01T00:00:00.000Z"});
            m.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            m
        };
        round_trip(base(
            "message",
            json!({"message": {"role":"user","content":"hi","timestamp":1}}),
        ));
        round_trip(base(
            "thinking_level_change",
            json!({"thinkingLevel":"high"}),
        ));
        round_trip(base(
            "model_change",
            json!({"model":"anthropic/claude","role":"smol"}),
        ));
        round_trip(base(
            "compaction",
            json!({"summary":"s","shortSummary":"x","firstKeptEntryId":"b","tokensBefore":5,"details":{"readFiles":[],"modifiedFiles":[]},"fromExtension":false}),
        ));
        round_trip(base(
            "branch_summary",
            json!({"fromId":"root","summary":"s"}),
        ));
        round_trip(base("custom", json!({"customType":"ext","data":{"k":1}})));
        round_trip(base(
            "custom_message",
            json!({"customType":"ext","content":[{"type":"text","text":"x"}],"display":true}),
        ));
        round_trip(base("label", json!({"targetId":"a0","label":"bookmark"})));
        round_trip(base("ttsr_injection", json!({"injectedRules":["r1"]})));
        round_trip(base(
            "session_init",
            json!({"systemPrompt":"sp","task":"t","tools":["read"]}),
        ));
        round_trip(base("mode_change", json!({"mode":"plan","data":{"a":1}})));
        round_trip(base(LEAF_MOVE_TYPE, json!({})));
        round_trip(base(
            "future_kind",
            json!({"anything":[1,2,3],"nested":{"a":null}}),
        ));
        round_trip(base(
            "compaction",
            json!({"summary":"s","firstKeptEntryId":"b","tokensBefore":5,"newField":"kept"}),
        ));
    }

    #[test]
    fn malformed_known_type_is_kept_as_unknown() {
        let v = json!({"type":"compaction","id":"x","parentId":null,"timestamp":"t","summary":42});
        let e = Entry::from_value(v.clone()).unwrap();
        assert!(matches!(e.kind(), EntryKind::Unknown { .. }));
        assert_eq!(e.to_value(), v);
    }

    #[test]
    fn from_hook_is_read_as_from_extension() {
        let v = json!({"type":"compaction","id":"x","parentId":null,"timestamp":"t","summary":"s","firstKeptEntryId":"a","tokensBefore":1,"fromHook":true});
        let e = Entry::from_value(v).unwrap();
        let EntryKind::Compaction(c) = e.kind() else {
            panic!("not a compaction")
        };
        assert_eq!(c.from_extension, Some(true));
        assert_eq!(e.to_value()["fromExtension"], json!(true));
    }

    #[test]
    fn iso_timestamps_convert_to_epoch_ms() {
        assert_eq!(iso_to_epoch_ms("1970-01-01T00:00:00.000Z"), Some(0));
        assert_eq!(
            iso_to_epoch_ms("2026-01-02T03:04:05.678Z"),
            Some(1_767_323_045_678)
        );
        assert_eq!(
            iso_to_epoch_ms("2000-02-29T00:00:00Z"),
            Some(951_782_400_000)
        );
        assert_eq!(iso_to_epoch_ms("yesterday"), None);
    }

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
}
