//! Domain values to wire values and back, where more than one handler needs them.

use serde_json::{Map, Value};

use crate::engine::{CompactOutcome, NewEntry, SessionInfo as EngineSessionInfo};
use crate::protocol::{
    AppendEntry, CompactResult, SessionInfo, SummaryDetails, WireEntry, WireMessage,
};
use crate::session::{AgentMessage, Entry, EntryKind};

/// An entry as stored in the file.
pub fn wire_entry(entry: &Entry) -> WireEntry {
    match entry.to_value() {
        Value::Object(map) => WireEntry(map),
        // An entry always serialises to an object; keep the protocol's shape regardless.
        other => WireEntry(Map::from_iter([("entry".to_owned(), other)])),
    }
}

/// A message as the protocol carries it.
pub fn wire_message(message: &AgentMessage) -> WireMessage {
    match serde_json::to_value(message) {
        Ok(Value::Object(map)) => WireMessage(map),
        _ => WireMessage::default(),
    }
}

/// The wire result of a compaction.
pub fn compact_result(outcome: &CompactOutcome) -> CompactResult {
    CompactResult {
        entry_id: outcome.entry_id.clone(),
        summary: outcome.summary.clone(),
        short_summary: outcome.short_summary.clone(),
        first_kept_entry_id: outcome.first_kept_entry_id.clone(),
        tokens_before: outcome.tokens_before,
        tokens_after: Some(outcome.tokens_after),
        details: summary_details(&outcome.details),
        preserve_data: match &outcome.preserve_data {
            Some(Value::Object(map)) => Some(map.clone()),
            Some(other) => Some(Map::from_iter([("value".to_owned(), other.clone())])),
            None => None,
        },
        preview: outcome.preview,
        from_extension: outcome.from_extension,
        summarizer: Some(outcome.summarizer.clone()),
    }
}

/// An entry's `details` on the wire. Details that do not have the usual shape (a hook's own)
/// are kept whole under their own keys rather than dropped.
fn summary_details(details: &Value) -> SummaryDetails {
    serde_json::from_value::<SummaryDetails>(details.clone()).unwrap_or_else(|_| SummaryDetails {
        other: match details {
            Value::Object(map) => map.clone(),
            Value::Null => Map::new(),
            other => Map::from_iter([("value".to_owned(), other.clone())]),
        },
        ..SummaryDetails::default()
    })
}

/// The wire description of an open session.
pub fn session_info(info: EngineSessionInfo) -> SessionInfo {
    SessionInfo {
        session_id: info.id,
        path: info.path.display().to_string(),
        cwd: info.cwd,
        title: info.title,
        leaf_id: info.leaf_id,
        entry_count: info.entry_count as u64,
        version: u32::try_from(info.version).unwrap_or(u32::MAX),
        read_only: info.read_only,
    }
}

/// The entry to append for an [`AppendEntry`]; `Err` names what is wrong. A `raw` entry keeps
/// every field it has (unknown types included) except `id`, `parentId` and `timestamp`, which
/// the server assigns.
pub fn new_entry(entry: AppendEntry) -> Result<NewEntry, String> {
    let value = match entry {
        AppendEntry::Message { message } => {
            if message.role().is_none() {
                return Err("a message needs a string `role`".to_owned());
            }
            serde_json::json!({ "type": "message", "message": message })
        }
        AppendEntry::ThinkingLevelChange { thinking_level } => {
            serde_json::json!({ "type": "thinking_level_change", "thinkingLevel": thinking_level })
        }
        AppendEntry::ModelChange { model, role } => {
            serde_json::json!({ "type": "model_change", "model": model, "role": role })
        }
        AppendEntry::CustomMessage {
            custom_type,
            content,
            display,
            details,
        } => serde_json::json!({
            "type": "custom_message", "customType": custom_type, "content": content,
            "display": display, "details": details,
        }),
        AppendEntry::Custom { custom_type, data } => {
            serde_json::json!({ "type": "custom", "customType": custom_type, "data": data })
        }
        AppendEntry::Label { target_id, label } => {
            serde_json::json!({ "type": "label", "targetId": target_id, "label": label })
        }
        AppendEntry::ModeChange { mode, data } => {
            serde_json::json!({ "type": "mode_change", "mode": mode, "data": data })
        }
        AppendEntry::Raw { entry } => {
            let type_name = entry.0.get("type").and_then(Value::as_str).unwrap_or("");
            if matches!(
                type_name,
                "" | "session" | "compaction" | "branch_summary" | "compactd_leaf"
            ) {
                return Err(format!(
                    "raw entries of type {type_name:?} cannot be appended: compaction, branch \
                     summary and leaf entries are the server's own"
                ));
            }
            return parse(Value::Object(entry.0));
        }
    };
    parse(strip_nulls(value))
}

/// The entry kind and extra fields of an entry object without its server-assigned fields.
fn parse(mut value: Value) -> Result<NewEntry, String> {
    if let Value::Object(map) = &mut value {
        for key in ["id", "parentId", "timestamp"] {
            map.remove(key);
        }
    }
    let entry = Entry::from_value(value).map_err(|e| format!("not a valid entry: {e}"))?;
    let (kind, extra) = entry.into_parts();
    match kind {
        EntryKind::Compaction(_) | EntryKind::BranchSummary(_) | EntryKind::LeafMove => {
            Err("compaction, branch summary and leaf entries are the server's own".to_owned())
        }
        kind => Ok(NewEntry { kind, extra }),
    }
}

/// Drops the top-level `null`s the optional fields above produce.
fn strip_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            Value::Object(map.into_iter().filter(|(_, v)| !v.is_null()).collect())
        }
        other => other,
    }
}
