//! Every wire value the daemon hands to the engine, converted in one place: entries to
//! append, the client's answers to hooks, and the params that become an operation's options.
//! The way out is [`super::to_proto`].

use serde_json::Value;

use crate::engine::{
    AppendOptions, BeforeCompactReply, BeforeTreeReply, CompactOptions, CompactReason,
    CompactingReply, HookCompaction, ListPage, NavigateOptions, NewEntry,
};
use crate::protocol::{
    AppendEntry, BeforeCompactResponse, BeforeTreeResponse, CompactingResponse, NavigateTreeParams,
    SessionAppendParams, SessionCompactParams, SettingsTarget,
};
use crate::session::listing::ListCursor;
use crate::session::{Entry, EntryKind};
use crate::settings::UpdateTarget;

/// `limit` and `cursor` of `session/list` as the page to return; the error names the param.
pub fn list_page(
    limit: Option<u32>,
    cursor: Option<&str>,
) -> Result<ListPage, (&'static str, String)> {
    if limit == Some(0) {
        return Err(("limit", "must be at least 1".into()));
    }
    let after = match cursor {
        None => None,
        Some(c) => Some(c.parse::<ListCursor>().map_err(|()| {
            (
                "cursor",
                format!("{c:?} is not a nextCursor of session/list"),
            )
        })?),
    };
    Ok(ListPage {
        limit: limit.map(|l| l as usize),
        after,
    })
}

/// `expectedLeafId` as the engine takes it: `Some(Some(id))` to check, `None` not to.
pub fn expected_leaf(expected: Option<String>) -> Option<Option<String>> {
    expected.map(Some)
}

/// The options of a manual compaction.
pub fn compact_options(params: SessionCompactParams) -> CompactOptions {
    CompactOptions {
        reason: CompactReason::Manual,
        custom_instructions: params.custom_instructions,
        preview: params.preview.unwrap_or(false),
        first_kept_entry_id: params.first_kept_entry_id,
        expected_leaf_id: expected_leaf(params.expected_leaf_id),
        leaf_id: params.leaf_id,
        target_tokens: params.target_tokens,
        keep_recent_tokens: None,
        use_armed: params.use_armed.unwrap_or(false),
    }
}

/// What an agent says about its turn.
pub fn observed_turn(params: crate::protocol::ObserveTurnParams) -> crate::engine::ObservedTurn {
    crate::engine::ObservedTurn {
        leaf_id: params.leaf_id,
        context_tokens: params.context_tokens,
        context_window: params.context_window,
        threshold_tokens: params.threshold_tokens,
    }
}

/// The options of a navigation.
pub fn navigate_options(params: &NavigateTreeParams) -> NavigateOptions {
    NavigateOptions {
        summarize: params.summarize.unwrap_or(false),
        custom_instructions: params.custom_instructions.clone(),
        replace_instructions: params.replace_instructions.unwrap_or(false),
        expected_leaf_id: expected_leaf(params.expected_leaf_id.clone()),
        preview: params.preview.unwrap_or(false),
        from_leaf_id: params.leaf_id.clone(),
    }
}

/// The options of an append (the daemon's default: do not wait for a compaction).
pub fn append_options(params: &SessionAppendParams) -> AppendOptions {
    AppendOptions {
        expected_leaf: expected_leaf(params.expected_leaf_id.clone()),
        check_compaction: params.check_compaction.unwrap_or(true),
        wait_for_compaction: params.wait_for_compaction.unwrap_or(false),
    }
}

pub fn settings_target(target: SettingsTarget) -> UpdateTarget {
    match target {
        SettingsTarget::User => UpdateTarget::UserFile,
        SettingsTarget::Session => UpdateTarget::Initialize,
    }
}

fn object(value: Option<serde_json::Map<String, Value>>) -> Option<Value> {
    value.map(Value::Object)
}

/// The client's answer to `hooks/beforeCompact`.
pub fn before_compact_reply(answer: BeforeCompactResponse) -> BeforeCompactReply {
    BeforeCompactReply {
        cancel: answer.cancel.unwrap_or(false),
        compaction: answer.compaction.map(|c| HookCompaction {
            summary: c.summary,
            short_summary: c.short_summary,
            first_kept_entry_id: c.first_kept_entry_id,
            tokens_before: Some(c.tokens_before),
            details: c.details,
            preserve_data: object(c.preserve_data),
        }),
    }
}

/// The client's answer to `hooks/compacting`.
pub fn compacting_reply(answer: CompactingResponse) -> CompactingReply {
    CompactingReply {
        context: answer.context.unwrap_or_default(),
        prompt: answer.prompt,
        preserve_data: object(answer.preserve_data),
    }
}

/// The client's answer to `hooks/beforeTree`.
pub fn before_tree_reply(answer: BeforeTreeResponse) -> BeforeTreeReply {
    BeforeTreeReply {
        cancel: answer.cancel.unwrap_or(false),
        summary: answer.summary.map(|s| (s.summary, s.details)),
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

/// The domain search of `session/search`'s params (the cursor is the entry to resume after).
pub fn search_query(params: crate::protocol::SessionSearchParams) -> crate::session::SearchQuery {
    use crate::protocol::SearchScope as Wire;
    use crate::session::SearchScope;
    crate::session::SearchQuery {
        text: params.query,
        regex: params.regex.unwrap_or(false),
        case_sensitive: params.case_sensitive.unwrap_or(false),
        scope: match params.scope.unwrap_or_default() {
            Wire::Branch => SearchScope::Branch,
            Wire::Session => SearchScope::Session,
        },
        limit: params
            .limit
            .map_or(crate::session::DEFAULT_SEARCH_LIMIT, |l| l as usize),
        after: params.cursor,
    }
}
