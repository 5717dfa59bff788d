//! Entries to and from JSON: the common fields, each known type's fields, and everything
//! else kept in `extra` (or the whole entry kept as unknown when a known type has the wrong
//! shape).

use std::borrow::Cow;

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::{Body, BranchSummaryEntry, CompactionEntry, Entry, EntryKind, LEAF_MOVE_TYPE};
use crate::session::message::{AgentMessage, leftover};

impl Entry {
    /// The entry as a JSON object: `type`, `id`, `parentId`, `timestamp`, then its fields.
    pub fn to_value(&self) -> Value {
        self.value_with(kind_fields(self.kind()))
    }

    /// What [`Entry::to_value`] serialises to, without copying the entry into a value first:
    /// a compaction's or branch summary's `details` (a huge session's ledger, megabytes) are
    /// written from the entry, and a loaded line nothing modified is written as it was read,
    /// unparsed (the same JSON, its spelling as in the file) (issue 35 item 7).
    pub fn json(&self) -> EntryJson<'_> {
        EntryJson(self)
    }

    fn value_with(&self, fields: Map<String, Value>) -> Value {
        let mut out = Map::new();
        out.insert("type".into(), Value::from(self.type_name()));
        out.insert("id".into(), Value::from(self.id.clone()));
        out.insert(
            "parentId".into(),
            self.parent_id.clone().map_or(Value::Null, Value::from),
        );
        out.insert("timestamp".into(), Value::from(self.timestamp.clone()));
        out.extend(fields);
        for (k, v) in self.extra() {
            out.entry(k.clone()).or_insert_with(|| v.clone());
        }
        Value::Object(out)
    }

    /// Whether [`Entry::line_bytes`] writes the line as it was read (nothing modified it).
    /// Also true for a line whose body could not be parsed: it is always written back as read.
    pub fn is_unmodified_line(&self) -> bool {
        matches!(&self.body, Body::Raw { line, .. } if line.head_matches(self))
            || self.fields().unparsed.is_some()
    }

    /// One JSONL line, without the newline. A loaded line nothing has modified is written
    /// back byte for byte (key order, number spelling and escapes as read); so is a line whose
    /// body could not be parsed, whatever happened to it since. `Err` only when such a line
    /// was left in the session file and cannot be read from it again as it was (the file was
    /// cut or changed in place by another program): nothing must then be written in its
    /// place.
    pub fn line_bytes(&self) -> std::io::Result<Cow<'_, [u8]>> {
        if let Body::Raw { line, .. } = &self.body
            && line.head_matches(self)
        {
            return line.bytes();
        }
        if let Some(line) = &self.fields().unparsed {
            if !line.head_matches(self) {
                tracing::warn!(id = %self.id, "writing an unparsed line with its original header");
            }
            return line.bytes();
        }
        Ok(Cow::Owned(
            serde_json::to_vec(&self.json()).expect("an entry serialises"),
        ))
    }

    /// [`Entry::line_bytes`] as text (invalid UTF-8 replaced), or the entry serialized when
    /// its line cannot be read again; for looking at a line, not for writing it.
    pub fn to_line(&self) -> String {
        match self.line_bytes() {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(_) => self.to_value().to_string(),
        }
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
        // A message in the usual shape is converted at once: it surely fits, so nothing is
        // kept to fall back on (copying it whole was a fifth of parsing it).
        if type_name == "message"
            && let Some(message) = map.get("message")
            && AgentMessage::surely_parses(message)
        {
            for k in ["type", "id", "parentId", "timestamp"] {
                map.remove(k);
            }
            let message = map.remove("message").expect("looked up just above");
            let kind = EntryKind::Message(AgentMessage::from_checked(message));
            return Ok(Entry::with_extra(
                id,
                parent_id,
                timestamp,
                kind,
                leftover(map),
            ));
        }
        // Kept to fall back on if the fields do not fit the type.
        let original = map.clone();
        for k in ["type", "id", "parentId", "timestamp"] {
            map.remove(k);
        }
        match parse_kind(&type_name, &mut map) {
            Some(kind) => Ok(Entry::with_extra(
                id,
                parent_id,
                timestamp,
                kind,
                leftover(map),
            )),
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

/// An entry serialising as its [`Entry::to_value`] (a loaded line nothing modified: as read);
/// see [`Entry::json`].
pub struct EntryJson<'a>(&'a Entry);

impl Serialize for EntryJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let entry = self.0;
        // A line nothing modified is written as read, unparsed.
        if let Body::Raw { line, .. } = &entry.body
            && line.head_matches(entry)
            && let Ok(bytes) = line.bytes()
            && let Ok(raw) = serde_json::from_slice::<&RawValue>(&bytes)
        {
            return raw.serialize(s);
        }
        let Some((fields, details)) = hollow_fields(entry.kind()) else {
            return entry.to_value().serialize(s);
        };
        let value = entry.value_with(fields);
        Splice {
            value: &value,
            key: "details",
            with: details,
        }
        .serialize(s)
    }
}

/// An object serialised with its member `key` written from `with` instead of its own value.
struct Splice<'a> {
    value: &'a Value,
    key: &'a str,
    with: &'a Value,
}

impl Serialize for Splice<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let Value::Object(map) = self.value else {
            return self.value.serialize(s);
        };
        let mut out = s.serialize_map(Some(map.len()))?;
        for (k, v) in map {
            let v = if k == self.key { self.with } else { v };
            out.serialize_entry(k, v)?;
        }
        out.end()
    }
}

/// The fields of a compaction or branch summary with a `null` in place of its `details`, and
/// the details: the one member of an entry that grows with the session. `None` for the other
/// kinds (and for one whose unmodelled fields also name `details`, which would take its place).
fn hollow_fields(kind: &EntryKind) -> Option<(Map<String, Value>, &Value)> {
    fn ser<T: Serialize>(t: &T) -> Map<String, Value> {
        match serde_json::to_value(t).expect("entry fields serialise") {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }
    match kind {
        EntryKind::Compaction(c) if !c.extra.contains_key("details") => {
            let details = c.details.as_ref()?;
            let hollow = CompactionEntry {
                summary: c.summary.clone(),
                short_summary: c.short_summary.clone(),
                first_kept_entry_id: c.first_kept_entry_id.clone(),
                tokens_before: c.tokens_before,
                details: Some(Value::Null),
                preserve_data: c.preserve_data.clone(),
                from_extension: c.from_extension,
                extra: c.extra.clone(),
            };
            Some((ser(&hollow), details))
        }
        EntryKind::BranchSummary(b) if !b.extra.contains_key("details") => {
            let details = b.details.as_ref()?;
            let hollow = BranchSummaryEntry {
                from_id: b.from_id.clone(),
                summary: b.summary.clone(),
                details: Some(Value::Null),
                from_extension: b.from_extension,
                extra: b.extra.clone(),
            };
            Some((ser(&hollow), details))
        }
        _ => None,
    }
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

    fn round_trip(v: Value) -> Entry {
        let e = Entry::from_value(v.clone()).unwrap();
        assert_eq!(e.to_value(), v, "round trip of {v}");
        e
    }

    #[test]
    fn every_entry_type_round_trips() {
        let mut known = std::collections::BTreeSet::new();
        let mut round_trip = |v: Value| {
            let e = round_trip(v);
            if !matches!(e.kind(), EntryKind::Unknown { .. }) {
                known.insert(e.kind().type_name().to_owned());
            }
        };
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
        // The list raw lines share their type names from is exactly the types parsed as known.
        let listed: std::collections::BTreeSet<String> = super::super::KNOWN_TYPE_NAMES
            .iter()
            .map(|&t| t.to_owned())
            .collect();
        assert_eq!(known, listed);
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
    fn an_entry_serialised_in_place_is_its_value_byte_for_byte() {
        let fixtures = [
            include_str!("../../../tests/fixtures/pi-sessions/before-compaction.jsonl"),
            include_str!("../../../tests/fixtures/pi-sessions/large-session.jsonl"),
            include_str!("../../../tests/fixtures/sessions/v2.jsonl"),
        ];
        let mut entries: Vec<Entry> = fixtures
            .iter()
            .flat_map(|f| f.lines())
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|v| v["type"] != "session")
            .filter_map(|v| Entry::from_value(v).ok())
            .collect();
        let details = json!({"readFiles": ["a.rs"], "ledger": {"requests": [{"text": "é\u{1}"}]}});
        for v in [
            json!({"type": "compaction", "id": "c1", "parentId": "p", "timestamp": "t",
                   "summary": "s", "firstKeptEntryId": "e", "tokensBefore": 5,
                   "details": details, "preserveData": {"x": 1}, "mine": [1]}),
            json!({"type": "compaction", "id": "c2", "parentId": null, "timestamp": "t",
                   "summary": "s", "details": null}),
            json!({"type": "compaction", "id": "c3", "summary": "s", "details": "text"}),
            json!({"type": "compaction", "id": "c4", "summary": "no details"}),
            json!({"type": "branch_summary", "id": "b1", "parentId": "p", "timestamp": "t",
                   "fromId": "root", "summary": "left", "details": details, "other": true}),
            json!({"type": "branch_summary", "id": "b2", "fromId": "x", "summary": 3}),
        ] {
            entries.push(Entry::from_value(v).unwrap());
        }
        // Built in code: unmodelled fields that repeat a modelled name, at both levels.
        let mut kind = EntryKind::Compaction(CompactionEntry {
            summary: "s".into(),
            short_summary: None,
            first_kept_entry_id: "e".into(),
            tokens_before: 1,
            details: Some(details.clone()),
            preserve_data: None,
            from_extension: None,
            extra: Map::from_iter([("details".to_owned(), json!("shadow"))]),
        });
        entries.push(Entry::new("c5", None, "t", kind.clone()));
        if let EntryKind::Compaction(c) = &mut kind {
            c.extra.clear();
        }
        let entry_extra = Map::from_iter([
            ("details".to_owned(), json!("ignored")),
            ("id".to_owned(), json!("ignored")),
            ("late".to_owned(), json!(1)),
        ]);
        entries.push(Entry::with_extra("c6", None, "t", kind, entry_extra));
        assert!(entries.len() > 1500, "{} entries", entries.len());
        for e in &entries {
            let in_place = serde_json::to_string(&e.json()).unwrap();
            assert_eq!(in_place, e.to_value().to_string(), "entry {}", e.id);
            assert_eq!(e.line_bytes().unwrap().as_ref(), in_place.as_bytes());
        }
    }
}
