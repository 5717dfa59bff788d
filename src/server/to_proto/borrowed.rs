//! Borrowed forms of the notifications that carry a compaction's `details`: each serialises
//! exactly as its protocol type does when built by the functions of [`super`], but writes the
//! details from the entry or outcome that holds them. On a huge session the details (the
//! ledger) are megabytes of JSON and several times that as a value; building the protocol
//! type copied them into one, and that copy was the daemon's peak (issue 35 item 7).
//!
//! The tests below hold each form to its protocol type, byte for byte.

use serde::Serialize;
use serde::ser::SerializeMap;
use serde_json::{Map, Value};

use super::{READ_DETAILS, auto_outcome_head, compact_result, read_details};
use crate::engine::{AutoResult, CompactOutcome};
use crate::protocol::{AutoCompactionOutcome, AutoCompactionReason, ErrorInfo, SummaryDetails};
use crate::session::Entry;

/// `session/entriesAppended` (the protocol's `EntriesAppended`) of `entries`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EntriesAppendedRef<'a> {
    pub session_id: &'a str,
    #[serde(serialize_with = "entries")]
    pub entries: &'a [Entry],
    pub leaf_id: &'a str,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub external: bool,
}

fn entries<S: serde::Serializer>(entries: &&[Entry], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(entries.iter().map(Entry::json))
}

/// `session/compactionFinished` (the protocol's `CompactionFinished`) of `result`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactionFinishedRef<'a> {
    pub session_id: &'a str,
    pub operation_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "result")]
    pub result: Option<&'a CompactOutcome>,
    pub aborted: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
}

fn result<S: serde::Serializer>(
    outcome: &Option<&CompactOutcome>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match outcome {
        Some(outcome) => CompactResultRef(outcome).serialize(s),
        None => s.serialize_none(),
    }
}

/// `session/autoCompactionFinished` (the protocol's `AutoCompactionFinished`) of `auto`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AutoCompactionFinishedRef<'a> {
    session_id: &'a str,
    operation_id: &'a str,
    reason: AutoCompactionReason,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "result")]
    result: Option<&'a CompactOutcome>,
    aborted: bool,
    will_retry: bool,
    skipped: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    skip_reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error_message: Option<String>,
}

impl<'a> AutoCompactionFinishedRef<'a> {
    pub fn new(session_id: &'a str, operation_id: &'a str, auto: &'a AutoResult) -> Self {
        let AutoCompactionOutcome {
            reason,
            result: _,
            aborted,
            will_retry,
            skipped,
            skip_reason,
            error_message,
        } = auto_outcome_head(auto);
        AutoCompactionFinishedRef {
            session_id,
            operation_id,
            reason,
            result: auto.outcome.as_deref(),
            aborted,
            will_retry,
            skipped,
            skip_reason,
            error_message,
        }
    }
}

/// [`compact_result`] of an outcome, its `details` written from it.
struct CompactResultRef<'a>(&'a CompactOutcome);

impl Serialize for CompactResultRef<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let head = compact_result(self.0.clone_without_details());
        let head = serde_json::to_value(head).map_err(serde::ser::Error::custom)?;
        let Value::Object(head) = head else {
            return Err(serde::ser::Error::custom("a result is an object"));
        };
        let mut out = s.serialize_map(Some(head.len()))?;
        for (k, v) in &head {
            if k == "details" {
                out.serialize_entry(k, &DetailsRef(&self.0.details))?;
            } else {
                out.serialize_entry(k, v)?;
            }
        }
        out.end()
    }
}

/// `summary_details` of `details`, borrowed: the typed fields first, then the others as
/// they stand in the details.
struct DetailsRef<'a>(&'a Value);

impl Serialize for DetailsRef<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (typed, rest, skip_read): (SummaryDetails, Vec<(&str, &Value)>, bool) = match self.0 {
            Value::Object(map) => match read_details(map) {
                Some(typed) => (typed, entries_of(map), true),
                None => (SummaryDetails::default(), entries_of(map), false),
            },
            Value::Null => (SummaryDetails::default(), Vec::new(), false),
            other => (SummaryDetails::default(), vec![("value", other)], false),
        };
        let typed = serde_json::to_value(typed).map_err(serde::ser::Error::custom)?;
        let Value::Object(typed) = typed else {
            return Err(serde::ser::Error::custom("details are an object"));
        };
        let mut out = s.serialize_map(None)?;
        for (k, v) in &typed {
            out.serialize_entry(k, v)?;
        }
        for (k, v) in rest {
            if !(skip_read && READ_DETAILS.contains(&k)) {
                out.serialize_entry(k, v)?;
            }
        }
        out.end()
    }
}

fn entries_of(map: &Map<String, Value>) -> Vec<(&str, &Value)> {
    map.iter().map(|(k, v)| (k.as_str(), v)).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::engine::Purpose;
    use crate::engine::compact::TargetReport;
    use crate::protocol::{CompactionFinished, EntriesAppended};
    use crate::server::to_proto;
    use crate::session::{BranchSummaryEntry, CompactionEntry, EntryKind};

    fn outcome(details: Value) -> CompactOutcome {
        CompactOutcome {
            entry_id: Some("c1".into()),
            summary: "## Goal\nfix the parser".into(),
            short_summary: Some("Fixed it.".into()),
            first_kept_entry_id: "e9".into(),
            tokens_before: 120_000,
            tokens_after: 9_000,
            details,
            preserve_data: Some(json!({"kept": [1, 2]})),
            from_extension: false,
            preview: false,
            summarizer: "extractive".into(),
            reports: vec![(Purpose::History, Default::default())],
            warnings: vec!["ignored providers.x.baseUrl".into()],
            preview_id: Some("p1".into()),
            target: Some(TargetReport {
                target_tokens: 500,
                met: false,
                summary_tokens: 700,
                reason: Some("ledger".into()),
            }),
            background_operation_id: Some("op-bg".into()),
        }
    }

    /// Details of every shape `summary_details` tells apart.
    fn details_cases() -> Vec<Value> {
        vec![
            json!({
                "readFiles": ["a.rs"], "modifiedFiles": ["b.rs"],
                "ledger": {"requests": [{"text": "fix it", "status": "done"}]},
                "retainedFacts": [{"kind": "path", "text": "src/a.rs"}],
                "reason": "threshold", "edited": true,
                "summarizers": [{"purpose": "history", "summarizer": "extractive"}],
            }),
            json!({"readFiles": "not a list", "ledger": [1, 2, 3], "modifiedFiles": []}),
            json!({"own": {"hook": true}}),
            json!({}),
            Value::Null,
            json!(["a", "list"]),
            json!("text"),
        ]
    }

    #[test]
    fn a_finished_compaction_serialises_as_its_protocol_type_byte_for_byte() {
        for details in details_cases() {
            let outcome = outcome(details.clone());
            for (aborted, error) in [
                (false, None),
                (
                    true,
                    Some(ErrorInfo::from(
                        &crate::protocol::ErrorKind::Cancelled.error(),
                    )),
                ),
            ] {
                let borrowed = CompactionFinishedRef {
                    session_id: "s1",
                    operation_id: "op1",
                    result: (!aborted).then_some(&outcome),
                    aborted,
                    error: error.clone(),
                };
                let owned = CompactionFinished {
                    session_id: "s1".into(),
                    operation_id: "op1".into(),
                    result: (!aborted).then(|| to_proto::compact_result(outcome.clone())),
                    aborted,
                    error,
                };
                assert_eq!(
                    serde_json::to_string(&borrowed).unwrap(),
                    serde_json::to_string(&owned).unwrap(),
                    "details {details}"
                );
            }
        }
    }

    #[test]
    fn an_auto_compaction_serialises_as_its_protocol_type_byte_for_byte() {
        use crate::engine::CompactReason;
        use crate::protocol::AutoCompactionFinished;
        let mut cases = Vec::new();
        for details in details_cases() {
            let mut auto = AutoResult::new(CompactReason::Overflow);
            auto.outcome = Some(std::sync::Arc::new(outcome(details)));
            auto.will_retry = true;
            cases.push(auto);
        }
        let mut skipped = AutoResult::new(CompactReason::Threshold);
        skipped.skipped = true;
        cases.push(skipped);
        let mut failed = AutoResult::new(CompactReason::Threshold);
        failed.error_message = Some("Auto-compaction failed: no".into());
        failed.aborted = true;
        cases.push(failed);
        for auto in cases {
            let borrowed = AutoCompactionFinishedRef::new("s1", "op1", &auto);
            let owned = AutoCompactionFinished {
                session_id: "s1".into(),
                operation_id: "op1".into(),
                outcome: to_proto::auto_outcome(auto.clone()),
            };
            assert_eq!(
                serde_json::to_string(&borrowed).unwrap(),
                serde_json::to_string(&owned).unwrap()
            );
        }
    }

    #[test]
    fn appended_entries_serialise_as_their_protocol_type_byte_for_byte() {
        let mut entries = Vec::new();
        for (i, details) in details_cases().into_iter().enumerate() {
            let compaction = CompactionEntry {
                summary: format!("summary {i}"),
                short_summary: None,
                first_kept_entry_id: "e1".into(),
                tokens_before: 10,
                details: (!details.is_null()).then_some(details.clone()),
                preserve_data: None,
                from_extension: Some(false),
                extra: Map::from_iter([("mine".to_owned(), json!(i))]),
            };
            entries.push(Entry::new(
                format!("c{i}"),
                Some("p".into()),
                "2026-12-07T04:00:00.000Z",
                EntryKind::Compaction(compaction),
            ));
            let branch = BranchSummaryEntry {
                from_id: "root".into(),
                summary: "left".into(),
                details: Some(details),
                from_extension: None,
                extra: Map::new(),
            };
            entries.push(Entry::with_extra(
                format!("b{i}"),
                None,
                "2026-12-07T04:00:01.000Z",
                EntryKind::BranchSummary(branch),
                Map::from_iter([("unmodelled".to_owned(), json!({"x": 1}))]),
            ));
        }
        entries.push(
            Entry::from_value(json!({
                "type": "message", "id": "m1", "parentId": "c0",
                "timestamp": "2026-12-07T04:00:02.000Z",
                "message": {"role": "user", "content": "hi", "timestamp": 1}
            }))
            .unwrap(),
        );
        for external in [false, true] {
            let borrowed = EntriesAppendedRef {
                session_id: "s1",
                entries: &entries,
                leaf_id: "m1",
                external,
            };
            let owned = EntriesAppended {
                session_id: "s1".into(),
                entries: entries.iter().map(to_proto::entry).collect(),
                leaf_id: "m1".into(),
                external,
            };
            assert_eq!(
                serde_json::to_string(&borrowed).unwrap(),
                serde_json::to_string(&owned).unwrap()
            );
        }
    }
}
