use std::collections::HashSet;

use serde_json::json;

use super::errors::all_kind_names;
use super::method::{SessionAbortBranchSummary, SessionAbortCompaction, SessionCompact};
use super::schema::{protocol_bundle, protocol_schemas};
use super::*;

#[test]
fn method_names_are_unique_and_client_methods_have_a_class() {
    let mut seen = HashSet::new();
    for m in METHODS {
        assert!(seen.insert(m.name), "{} is listed twice", m.name);
        assert_eq!(
            m.concurrency.is_some(),
            m.direction == Direction::ClientToServer,
            "{}: only client methods have a concurrency class",
            m.name
        );
        assert_eq!(
            m.result.is_some(),
            m.kind == MessageKind::Request,
            "{}",
            m.name
        );
        assert!(!m.description().is_empty(), "{} has no doc comment", m.name);
    }
}

#[test]
fn session_serial_methods_require_a_session_id() {
    // The transport keys session-serial queues on `params.sessionId`; a method without it
    // would fail every call with -32602.
    for m in METHODS {
        if let Some(class @ (Concurrency::SessionSerial | Concurrency::SessionRead)) = m.concurrency
        {
            let schema = m.params.root_schema().to_value();
            let required = schema["required"].as_array().cloned().unwrap_or_default();
            assert!(
                required.contains(&json!("sessionId")),
                "{} is {} but its params do not require sessionId: {schema}",
                m.name,
                concurrency_name(class)
            );
        }
    }
}

#[test]
fn aborts_run_in_parallel_with_what_they_abort() {
    assert_eq!(SessionCompact::CONCURRENCY, Concurrency::SessionSerial);
    assert_eq!(SessionAbortCompaction::CONCURRENCY, Concurrency::Parallel);
    assert_eq!(
        SessionAbortBranchSummary::CONCURRENCY,
        Concurrency::Parallel
    );
    assert_eq!(
        MethodSpec::find("settings/update").and_then(|m| m.concurrency),
        Some(Concurrency::GlobalSerial)
    );
    assert_eq!(SessionCompact::NAME, "session/compact");
}

#[test]
fn error_kinds_have_unique_codes_and_names_matching_serde() {
    let mut codes = HashSet::new();
    for kind in ErrorKind::ALL {
        assert!(
            codes.insert(kind.code()),
            "{} reuses code {}",
            kind.name(),
            kind.code()
        );
        assert_eq!(serde_json::to_value(kind).unwrap(), json!(kind.name()));
        assert_eq!(ErrorKind::from_name(kind.name()), Some(kind));
        let error = kind.error();
        assert_eq!(error.code, kind.code());
        assert_eq!(ErrorKind::of(&error), Some(kind));
    }
    assert_eq!(
        ErrorKind::Cancelled.code(),
        crate::rpc::error_code::REQUEST_CANCELLED
    );
    assert_eq!(
        ErrorKind::AlreadyCompacted.error().message,
        "Already compacted"
    );
    assert_eq!(
        ErrorKind::NothingToCompact.error().message,
        "Nothing to compact (session too small)"
    );
    assert_eq!(ErrorKind::Cancelled.error().message, "Compaction cancelled");
    let missing = ErrorKind::entry_not_found("7f3e9a12");
    assert_eq!(missing.message, "Entry 7f3e9a12 not found");
    assert_eq!(
        missing.data.as_deref(),
        Some(&json!({"kind": "entryNotFound", "entryId": "7f3e9a12"}))
    );
    let moved = ErrorKind::leaf_moved("a", None);
    assert_eq!(
        moved.data.as_deref(),
        Some(&json!({"kind": "leafMoved", "expectedLeafId": "a", "leafId": null}))
    );
}

#[test]
fn initialize_accepts_lsp_params_and_ignores_unknown_fields() {
    // Shaped like what vscode-languageclient sends.
    let params: InitializeParams = serde_json::from_value(json!({
        "processId": null,
        "clientInfo": {"name": "Visual Studio Code", "version": "1.99.0"},
        "locale": "en",
        "rootUri": "file:///home/dev/proj",
        "capabilities": {
            "workspace": {"applyEdit": true},
            "textDocument": {"synchronization": {"dynamicRegistration": true}},
            "window": {"workDoneProgress": true, "showMessage": {}}
        },
        "initializationOptions": {"settings": {"compaction": {"reserveTokens": 8192}}, "other": 1},
        "trace": "off",
        "workspaceFolders": null
    }))
    .expect("LSP initialize params are accepted");
    assert_eq!(params.process_id, None);
    assert!(params.capabilities.supports_work_done_progress());
    assert!(!params.capabilities.summarizer);
    assert!(!params.capabilities.hooks.before_compact);
    let settings = params.initialization_options.and_then(|o| o.settings);
    assert_eq!(
        settings,
        Some(
            json!({"compaction": {"reserveTokens": 8192}})
                .as_object()
                .cloned()
                .unwrap()
        )
    );

    let ours: InitializeParams = serde_json::from_value(json!({
        "capabilities": {"hooks": {"beforeTree": true}, "summarizer": true,
                         "optOutNotifications": ["session/compactionDelta"]}
    }))
    .unwrap();
    assert!(ours.capabilities.hooks.before_tree && ours.capabilities.summarizer);
    assert!(!ours.capabilities.supports_work_done_progress());
    assert!(ours.capabilities.opted_out_of("session/compactionDelta"));
    assert!(serde_json::from_value::<InitializeParams>(json!({})).is_ok());
}

#[test]
fn no_params_accepts_absent_null_and_objects() {
    for value in [json!(null), json!({}), json!({"x": 1})] {
        assert!(serde_json::from_value::<NoParams>(value).is_ok());
    }
    assert_eq!(serde_json::to_value(NoParams).unwrap(), json!({}));
}

#[test]
fn append_entries_are_tagged_by_type_with_camel_case_fields() {
    let entries: Vec<AppendEntry> = serde_json::from_value(json!([
        {"type": "message", "message": {"role": "user", "content": "hi", "timestamp": 1}},
        {"type": "thinkingLevelChange", "thinkingLevel": "high"},
        {"type": "modelChange", "model": "openai/gpt-4.1"},
        {"type": "customMessage", "customType": "note", "content": "x"},
        {"type": "label", "targetId": "7f3e9a12"},
        {"type": "raw", "entry": {"type": "ttsr_injection", "injectedRules": ["r"]}}
    ]))
    .unwrap();
    assert!(
        matches!(&entries[1], AppendEntry::ThinkingLevelChange { thinking_level } if thinking_level == "high")
    );
    assert!(matches!(
        &entries[3],
        AppendEntry::CustomMessage { display: true, .. }
    ));
    assert!(
        matches!(&entries[0], AppendEntry::Message { message } if message.role() == Some("user"))
    );
    let bad = serde_json::from_value::<AppendEntry>(json!({"type": "compaction", "summary": "s"}));
    assert!(bad.is_err(), "server-owned entry types cannot be appended");
}

#[test]
fn session_open_names_exactly_one_session() {
    let by_path = SessionOpenParams {
        path: Some("/s.jsonl".into()),
        ..Default::default()
    };
    assert_eq!(by_path.locator(), Ok(SessionLocator::Path("/s.jsonl")));
    assert!(SessionOpenParams::default().locator().is_err());
    let both = SessionOpenParams {
        session_id: Some("a".into()),
        ..by_path
    };
    assert!(both.locator().is_err());
}

#[test]
fn progress_values_match_lsp() {
    let begin = WorkDoneProgress::Begin {
        title: "Compacting".into(),
        cancellable: Some(true),
        message: Some(ProgressPhase::Preparing.message()),
        percentage: Some(ProgressPhase::Preparing.percentage()),
    };
    assert_eq!(
        serde_json::to_value(&begin).unwrap(),
        json!({"kind": "begin", "title": "Compacting", "cancellable": true,
               "message": "preparing", "percentage": 5})
    );
    assert_eq!(
        ProgressPhase::Summarizing { characters: 1234 }.message(),
        "summarizing (1234 characters)"
    );
    let token: ProgressToken = serde_json::from_value(json!(7)).unwrap();
    assert_eq!(token, ProgressToken::Number(7));
}

#[test]
fn auto_compaction_finished_flattens_the_outcome() {
    let event = AutoCompactionFinished {
        session_id: "s".into(),
        operation_id: "op".into(),
        outcome: AutoCompactionOutcome {
            reason: AutoCompactionReason::Overflow,
            result: None,
            aborted: false,
            will_retry: false,
            skipped: false,
            skip_reason: None,
            error_message: Some("Context overflow recovery failed: boom".into()),
        },
    };
    assert_eq!(
        serde_json::to_value(&event).unwrap(),
        json!({"sessionId": "s", "operationId": "op", "reason": "overflow", "aborted": false,
               "willRetry": false, "skipped": false,
               "errorMessage": "Context overflow recovery failed: boom"})
    );
}

#[test]
fn the_bundle_lists_every_method_with_resolvable_refs() {
    let bundle = protocol_bundle();
    let methods = bundle["methods"].as_array().unwrap();
    assert_eq!(methods.len(), METHODS.len());
    let defs = bundle["$defs"].as_object().unwrap();
    let text = bundle.to_string();
    for piece in text.split("\"#/$defs/").skip(1) {
        let name = &piece[..piece.find('"').unwrap()];
        assert!(defs.contains_key(name), "dangling $ref to {name}");
    }
    let compact = methods
        .iter()
        .find(|m| m["method"] == "session/compact")
        .unwrap();
    assert_eq!(compact["concurrency"], "sessionSerial");
    assert_eq!(compact["result"], json!({"$ref": "#/$defs/CompactResult"}));
    let kinds: Vec<&str> = bundle["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, all_kind_names());
    assert_eq!(
        kinds.len(),
        ErrorKind::ALL.len() + crate::rpc::TransportErrorKind::ALL.len()
    );
    assert_eq!(bundle["error"], json!({"$ref": "#/$defs/ResponseError"}));
    let files: Vec<String> = protocol_schemas().into_iter().map(|(n, _)| n).collect();
    assert!(files.contains(&"settings.schema.json".to_owned()));
    assert!(files.contains(&"CompactResult.json".to_owned()));
    assert!(!files.iter().any(|f| f == "null.json"), "`()` gets no file");
}
