//! Every domain value the daemon puts on the wire, converted in one place: entries and
//! messages as stored, results, events' payloads, hook and summarizer requests, and engine
//! errors as protocol errors (their kind mapped as an enum, never through its name). The way
//! back is [`super::from_proto`].
//!
//! The command line (`crate::cli`) prints its `--json` output through these same
//! functions (`compactd tree --json` is a `session/tree` result): one schema covers both.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{Map, Value};

use crate::engine::{
    self, AppendAction, AutoResult, BeforeCompactRequest, BeforeTreeRequest, CompactOutcome,
    CompactReason, CompactingRequest, EngineError, EngineErrorKind, OperationError, Phase, Purpose,
    SummaryStatus,
};
use crate::protocol::{
    AutoCompactionOutcome, AutoCompactionReason, BeforeCompactParams, BeforeTreeParams,
    BranchSummaryPreview, CompactResult, CompactingParams, CompactionPreparation, CompactionReason,
    ErrorInfo, ErrorKind, FileOps, NavigateTreeResult, NextAction, ProgressPhase, PruneResult,
    SessionContextResult, SessionInfo, SessionTreeResult, SessionUsageResult, SummarizeParams,
    SummarizerFailure, SummarizerReport, SummaryDetails, SummaryPart, SummaryPurpose, TreeNode,
    TreePreparation, WireEntry, WireMessage,
};
use crate::rpc::RpcError;
use crate::session::{AgentMessage, Entry, EntrySpan, LoadStep, SessionError};
use crate::summarize::SummaryReport;
use crate::summarize::client::ClientSummaryRequest;

mod borrowed;

pub use borrowed::{AutoCompactionFinishedRef, CompactionFinishedRef, EntriesAppendedRef};

/// An entry as stored in the file.
pub fn entry(entry: &Entry) -> WireEntry {
    match entry.to_value() {
        Value::Object(map) => WireEntry(map),
        // An entry always serialises to an object; keep the protocol's shape regardless.
        other => WireEntry(Map::from_iter([("entry".to_owned(), other)])),
    }
}

/// A message as the protocol carries it.
pub fn message(message: &AgentMessage) -> WireMessage {
    match serde_json::to_value(message) {
        Ok(Value::Object(map)) => WireMessage(map),
        _ => WireMessage::default(),
    }
}

/// The wire result of a compaction.
pub fn compact_result(outcome: CompactOutcome) -> CompactResult {
    CompactResult {
        entry_id: outcome.entry_id,
        summary: outcome.summary,
        short_summary: outcome.short_summary,
        first_kept_entry_id: outcome.first_kept_entry_id,
        tokens_before: outcome.tokens_before,
        tokens_after: Some(outcome.tokens_after),
        details: summary_details(outcome.details),
        preserve_data: match outcome.preserve_data {
            Some(Value::Object(map)) => Some(map),
            Some(other) => Some(Map::from_iter([("value".to_owned(), other)])),
            None => None,
        },
        preview: outcome.preview,
        preview_id: outcome.preview_id,
        target_met: outcome.target.as_ref().map(|t| t.met),
        summary_tokens: outcome.target.as_ref().map(|t| t.summary_tokens),
        target_reason: outcome.target.and_then(|t| t.reason),
        background_operation_id: outcome.background_operation_id,
        from_extension: outcome.from_extension,
        summarizer: Some(outcome.summarizer),
        warnings: outcome.warnings,
    }
}

/// The members of `details` read into [`SummaryDetails`]' own fields; the rest go to `other`.
const READ_DETAILS: [&str; 5] = [
    "readFiles",
    "modifiedFiles",
    "retainedFacts",
    "summarizers",
    "edited",
];

/// An entry's `details` on the wire. Details that do not have the usual shape (a hook's own)
/// are kept whole under their own keys rather than dropped. Moved, not copied: the ledger of a
/// huge session is megabytes (issue 35 item 7); only the few fields read are copied.
fn summary_details(details: Value) -> SummaryDetails {
    let mut map = match details {
        Value::Object(map) => map,
        Value::Null => Map::new(),
        other => {
            return SummaryDetails {
                other: Map::from_iter([("value".to_owned(), other)]),
                ..SummaryDetails::default()
            };
        }
    };
    match read_details(&map) {
        Some(mut usual) => {
            for k in READ_DETAILS {
                map.shift_remove(k);
            }
            usual.other = map;
            usual
        }
        None => SummaryDetails {
            other: map,
            ..SummaryDetails::default()
        },
    }
}

/// The fields of `details` that [`SummaryDetails`] reads (its `other` left empty); `None` when
/// one of them has another shape, and the details then go to `other` whole.
fn read_details(details: &Map<String, Value>) -> Option<SummaryDetails> {
    let read: Map<String, Value> = READ_DETAILS
        .iter()
        .filter_map(|&k| details.get(k).map(|v| (k.to_owned(), v.clone())))
        .collect();
    serde_json::from_value(Value::Object(read)).ok()
}

/// The wire description of an open session.
pub fn session_info(info: engine::SessionInfo) -> SessionInfo {
    SessionInfo {
        session_id: info.id,
        path: info.path.display().to_string(),
        cwd: info.cwd,
        title: info.title,
        leaf_id: info.leaf_id,
        entry_count: info.entry_count as u64,
        version: u32::try_from(info.version).unwrap_or(u32::MAX),
        read_only: info.read_only,
        warnings: info.warnings,
    }
}

/// The protocol error of an engine failure: its code, `data.kind` and a message a person can
/// act on, with the typed `data` fields of the kinds that have them.
pub fn error(error: EngineError) -> RpcError {
    let kind = error_kind(error.kind());
    match error {
        EngineError::SessionNotFound(id) => ErrorKind::session_not_found(&id),
        EngineError::SessionFile(SessionError::NotFound { path }) => {
            let path = path.display().to_string();
            kind.with_message(format!("session file {path} not found"))
                .with_data_field("path", path)
        }
        EngineError::EntryNotFound(id) => ErrorKind::entry_not_found(&id),
        EngineError::LeafMoved { expected, actual } => {
            ErrorKind::leaf_moved(expected.as_deref().unwrap_or("none"), actual.as_deref())
        }
        EngineError::AlreadyCompacted
        | EngineError::NothingToCompact
        | EngineError::CompactionInProgress => kind.error(),
        error @ EngineError::CannotGetUnderThreshold { tokens, threshold } => kind
            .with_message(error.to_string())
            .with_data_field("tokensAfter", tokens)
            .with_data_field("thresholdTokens", threshold),
        EngineError::SessionFile(SessionError::Io { path, source })
            if kind == ErrorKind::IoError =>
        {
            let message = format!("{}: {source}", path.display());
            io_error(kind.with_message(message), &path, &source)
        }
        EngineError::SessionFile(
            e @ (SessionError::InvalidHeader { .. } | SessionError::NotRegularFile { .. }),
        ) => {
            let path = match &e {
                SessionError::InvalidHeader { path, .. }
                | SessionError::NotRegularFile { path, .. } => path.display().to_string(),
                _ => String::new(),
            };
            kind.with_message(e.to_string())
                .with_data_field("path", path)
        }
        EngineError::BlobMissing {
            message,
            entry_id,
            blob,
        } => kind
            .with_message(message)
            .with_data_field("entryId", entry_id)
            .with_data_field("blob", blob),
        EngineError::PreviewNotFound(id) => kind
            .with_message(EngineError::PreviewNotFound(id.clone()).to_string())
            .with_data_field("previewId", id),
        error => kind.with_message(error.to_string()),
    }
}

/// An `ioError` with `message` about `path`, with the errno of `source`.
pub fn io_failure(message: String, path: &std::path::Path, source: &std::io::Error) -> RpcError {
    io_error(ErrorKind::IoError.with_message(message), path, source)
}

/// `data.path`, `data.errno` and `data.osError` of an `ioError`.
fn io_error(error: RpcError, path: &std::path::Path, source: &std::io::Error) -> RpcError {
    let error = error.with_data_field("path", path.display().to_string());
    match raw_os_error(source) {
        Some(errno) => error
            .with_data_field("errno", errno)
            .with_data_field("osError", crate::files::errno_name(errno)),
        None => error,
    }
}

/// The errno of `error`, or of the first I/O error in its chain of sources: `tempfile` and the
/// blob store wrap the system's error with the path it was about, which hides the errno from
/// [`std::io::Error::raw_os_error`].
pub fn raw_os_error(error: &std::io::Error) -> Option<i32> {
    if let Some(errno) = error.raw_os_error() {
        return Some(errno);
    }
    let mut next: Option<&(dyn std::error::Error + 'static)> = error
        .get_ref()
        .map(|e| e as &(dyn std::error::Error + 'static));
    while let Some(e) = next {
        if let Some(errno) = e
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::raw_os_error)
        {
            return Some(errno);
        }
        next = e.source();
    }
    None
}

/// The protocol's kind of an engine failure.
pub fn error_kind(kind: EngineErrorKind) -> ErrorKind {
    match kind {
        EngineErrorKind::SessionNotFound => ErrorKind::SessionNotFound,
        EngineErrorKind::EntryNotFound => ErrorKind::EntryNotFound,
        EngineErrorKind::AlreadyCompacted => ErrorKind::AlreadyCompacted,
        EngineErrorKind::NothingToCompact => ErrorKind::NothingToCompact,
        EngineErrorKind::CompactionInProgress => ErrorKind::CompactionInProgress,
        EngineErrorKind::Cancelled => ErrorKind::Cancelled,
        EngineErrorKind::SummarizationFailed => ErrorKind::SummarizationFailed,
        EngineErrorKind::LeafMoved => ErrorKind::LeafMoved,
        EngineErrorKind::InvalidParams => ErrorKind::InvalidParams,
        EngineErrorKind::SessionFile => ErrorKind::SessionFileInvalid,
        EngineErrorKind::Storage => ErrorKind::StorageUnavailable,
        EngineErrorKind::Io => ErrorKind::IoError,
        EngineErrorKind::CannotGetUnderThreshold => ErrorKind::CannotGetUnderThreshold,
        EngineErrorKind::Settings => ErrorKind::SettingsInvalid,
        EngineErrorKind::PathOutsideAllowed => ErrorKind::PathOutsideAllowed,
        EngineErrorKind::ReadOnly => ErrorKind::SessionReadOnly,
        EngineErrorKind::BlobMissing => ErrorKind::BlobMissing,
        EngineErrorKind::PreviewNotFound => ErrorKind::PreviewNotFound,
        EngineErrorKind::NothingToUndo => ErrorKind::NothingToUndo,
    }
}

/// The `error` of a `session/compactionFinished`: the failure with its protocol code, or
/// `cancelled` when the compaction was aborted.
pub fn finished_error(aborted: bool, error: Option<OperationError>) -> Option<ErrorInfo> {
    if aborted {
        return Some(ErrorInfo::from(&ErrorKind::Cancelled.error()));
    }
    let error = error?;
    Some(ErrorInfo::from(
        &error_kind(error.kind).with_message(error.message),
    ))
}

pub fn compaction_reason(reason: CompactReason) -> CompactionReason {
    match reason {
        CompactReason::Manual => CompactionReason::Manual,
        CompactReason::Threshold => CompactionReason::Threshold,
        CompactReason::Overflow => CompactionReason::Overflow,
    }
}

/// The reason of an auto-compaction (never manual).
pub fn auto_reason(reason: CompactReason) -> AutoCompactionReason {
    match reason {
        CompactReason::Overflow => AutoCompactionReason::Overflow,
        _ => AutoCompactionReason::Threshold,
    }
}

/// The wire name of a streamed part; `None` for a branch summary, which the protocol shows as
/// progress only.
pub fn summary_part(part: Purpose) -> Option<SummaryPart> {
    match part {
        Purpose::History => Some(SummaryPart::History),
        Purpose::TurnPrefix => Some(SummaryPart::TurnPrefix),
        Purpose::Short => Some(SummaryPart::Short),
        Purpose::Branch => None,
    }
}

/// The `$/progress` message of a summary's status: the part, then where it stands
/// (`turn prefix: queued for local/gemma while its server is busy`, `history: waiting for the
/// model local/gemma (chunk 2 of 5)`).
pub fn status_message(part: Purpose, status: &SummaryStatus) -> String {
    let part = match part {
        Purpose::History => "history",
        Purpose::TurnPrefix => "turn prefix",
        Purpose::Short => "short summary",
        Purpose::Branch => "branch summary",
    };
    format!("{part}: {}", status.describe())
}

pub fn summary_purpose(purpose: Purpose) -> SummaryPurpose {
    match purpose {
        Purpose::History => SummaryPurpose::History,
        Purpose::TurnPrefix => SummaryPurpose::TurnPrefix,
        Purpose::Short => SummaryPurpose::Short,
        Purpose::Branch => SummaryPurpose::Branch,
    }
}

/// A phase of a running operation; `characters` is what has streamed so far.
pub fn progress_phase(phase: Phase, characters: u64) -> ProgressPhase {
    match phase {
        Phase::Pruning => ProgressPhase::Pruning,
        Phase::Preparing => ProgressPhase::Preparing,
        Phase::Summarizing => ProgressPhase::Summarizing { characters },
        Phase::Persisting => ProgressPhase::Persisting,
    }
}

/// What an auto-compaction did, as `session/append` reports it (the end event is its
/// borrowed form, [`AutoCompactionFinishedRef`]). The compaction's outcome is moved out when
/// nothing else holds it any more (the event has gone out by then), copied otherwise.
pub fn auto_outcome(mut auto: AutoResult) -> AutoCompactionOutcome {
    let result = auto
        .outcome
        .take()
        .map(|o| compact_result(std::sync::Arc::unwrap_or_clone(o)));
    AutoCompactionOutcome {
        result,
        ..auto_outcome_head(&auto)
    }
}

/// [`auto_outcome`] without the compaction's result.
fn auto_outcome_head(auto: &AutoResult) -> AutoCompactionOutcome {
    AutoCompactionOutcome {
        reason: auto_reason(auto.reason),
        result: None,
        aborted: auto.aborted,
        will_retry: auto.will_retry,
        skipped: auto.skipped,
        skip_reason: auto.skipped.then(|| "nothing to compact".to_owned()),
        error_message: auto.error_message.clone(),
    }
}

/// What the agent should do after an append.
pub fn next_action(action: AppendAction, auto: Option<&AutoResult>) -> NextAction {
    match action {
        AppendAction::Compacting => NextAction::Compacting,
        AppendAction::Recovering => NextAction::Recovering,
        AppendAction::Retry => NextAction::Retry,
        AppendAction::Failed => NextAction::Failed,
        _ if auto.is_some_and(|a| a.aborted || a.skipped) => NextAction::Failed,
        AppendAction::Compacted if auto.is_some_and(|a| a.continue_entry_id.is_some()) => {
            NextAction::AutoContinue
        }
        AppendAction::Compacted | AppendAction::Continue => NextAction::Continue,
    }
}

/// The `session/context` result of `view`, with per-message counts when `per_message`.
pub fn context_result(
    view: &engine::usage::ContextView,
    per_message: bool,
) -> SessionContextResult {
    SessionContextResult {
        message_tokens: per_message.then(|| view.messages.iter().map(|m| m.tokens).collect()),
        messages: view.messages.iter().map(|m| message(&m.message)).collect(),
        tokens: view.total_tokens,
        context_window: view.context_window,
        threshold_tokens: view.threshold,
        leaf_id: view.leaf_id.clone(),
        thinking_level: view.thinking_level.clone(),
        models: view
            .model
            .clone()
            .map(|model| BTreeMap::from([("default".to_owned(), model)]))
            .unwrap_or_default(),
        missing_blobs: view
            .missing_blobs
            .iter()
            .map(|m| crate::protocol::MissingBlobInfo {
                entry_id: m.entry_id.clone(),
                blob: m.blob.clone(),
                pointer: m.pointer.clone(),
                reason: m.reason.clone(),
            })
            .collect(),
    }
}

/// The `session/usage` result of `view`.
pub fn usage_result(
    view: &engine::usage::UsageView,
    activity: engine::SessionActivity,
) -> SessionUsageResult {
    SessionUsageResult {
        context_tokens: view.context_tokens,
        context_window: view.context_window,
        threshold_tokens: view.threshold,
        percent: view.percent,
        is_compacting: activity.compacting,
        is_summarizing_branch: activity.summarizing_branch,
        auto_compaction_enabled: activity.auto_compaction_enabled,
        background_compaction: activity.background.map(background_status),
        auto_compaction_paused: activity.auto_compaction_paused.map(pause_reason),
    }
}

fn background_status(b: engine::BackgroundStatus) -> crate::protocol::BackgroundCompactionStatus {
    crate::protocol::BackgroundCompactionStatus {
        operation_id: b.operation_id,
        armed: b.ready,
        phase: b.phase.map(|p| p.name().to_owned()),
        chunk: b.chunk.map(|(chunk, _)| chunk as u64),
        chunks: b.chunk.map(|(_, chunks)| chunks as u64),
        started_at_ms: b.started_ms,
    }
}

/// The `session/observeTurn` result.
pub fn observe_turn_result(
    observation: engine::TurnObservation,
) -> crate::protocol::ObserveTurnResult {
    crate::protocol::ObserveTurnResult {
        leaf_id: observation.leaf_id,
        context_tokens: observation.context_tokens,
        context_window: observation.context_window,
        threshold_tokens: observation.threshold_tokens,
        started: observation.started,
        background_compaction: observation.background.map(background_status),
    }
}

pub fn prune_result(outcome: engine::prune::PruneOutcome) -> PruneResult {
    PruneResult {
        pruned_count: outcome.pruned_count as u64,
        tokens_saved: outcome.tokens_saved,
        pruned_entry_ids: outcome.entry_ids,
        dry_run: outcome.dry_run,
    }
}

/// The `session/tree` result of `view`, with the whole entry of each node found in `entries`
/// (empty unless `includeEntries`).
pub fn tree_result(
    view: engine::usage::TreeView,
    mut entries: HashMap<String, WireEntry>,
) -> SessionTreeResult {
    let ids: HashSet<&str> = view.nodes.iter().map(|n| n.id.as_str()).collect();
    let active: HashSet<&str> = view.active_path.iter().map(String::as_str).collect();
    let mut children: HashMap<&str, Vec<String>> = HashMap::new();
    let mut roots = Vec::new();
    for node in &view.nodes {
        match node.parent_id.as_deref().filter(|p| ids.contains(p)) {
            Some(parent) => children.entry(parent).or_default().push(node.id.clone()),
            None => roots.push(node.id.clone()),
        }
    }
    let nodes = view
        .nodes
        .iter()
        .map(|node| TreeNode {
            id: node.id.clone(),
            parent_id: node.parent_id.clone(),
            entry_type: node.entry_type.clone(),
            role: node.role.clone(),
            timestamp: node.timestamp.clone(),
            preview: (!node.preview.is_empty()).then(|| node.preview.clone()),
            label: node.label.clone(),
            children: children.remove(node.id.as_str()).unwrap_or_default(),
            on_active_path: active.contains(node.id.as_str()),
            entry: entries.remove(&node.id),
        })
        .collect();
    SessionTreeResult {
        leaf_id: view.leaf_id,
        roots,
        nodes,
    }
}

/// The `session/undoCompaction` result (also `compactd undo --json`).
pub fn undo_result(outcome: &engine::UndoOutcome) -> crate::protocol::UndoCompactionResult {
    crate::protocol::UndoCompactionResult {
        entry_ids: outcome.entries.iter().map(|e| e.id.clone()).collect(),
        undo_entry_id: outcome.undo_entry_id().to_owned(),
        undone_entry_id: outcome.undone_entry_id.clone(),
        compaction_id: outcome.compaction_id.clone(),
        restored: outcome.restored,
        leaf_id: outcome.leaf_id().to_owned(),
        old_leaf_id: outcome.old_leaf_id.clone(),
    }
}

/// The `session/navigateTree` result of a navigation.
pub fn navigate_result(outcome: engine::NavigateOutcome) -> NavigateTreeResult {
    let summarizers = branch_reports(outcome.report.as_ref());
    let summarizer = branch_summarizer(outcome.from_extension, outcome.report.as_ref());
    NavigateTreeResult {
        editor_text: outcome.editor_text,
        cancelled: outcome.cancelled,
        aborted: outcome.aborted.then_some(true),
        summary_entry: outcome.summary_entry.as_ref().map(entry),
        summary: outcome
            .preview_summary
            .map(|preview| branch_summary_preview(preview, summarizers.clone())),
        leaf_id: outcome.leaf_id,
        summarizer,
        summarizers,
    }
}

/// The branch summary a previewed navigation would attach.
pub fn branch_summary_preview(
    preview: engine::BranchSummaryPreview,
    summarizers: Vec<SummarizerReport>,
) -> BranchSummaryPreview {
    BranchSummaryPreview {
        summary: preview.summary,
        details: preview.details,
        from_extension: preview.from_extension,
        summarizer: preview.summarizer,
        summarizers,
    }
}

/// Which summarizer wrote a branch summary: `hook` for a hook's, else the report's.
pub fn branch_summarizer(
    from_extension: Option<bool>,
    report: Option<&SummaryReport>,
) -> Option<String> {
    match (from_extension, report) {
        (Some(true), _) => Some("hook".to_owned()),
        (_, Some(report)) => Some(report.summarizer.clone()),
        _ => None,
    }
}

/// The wire report of a branch summary (empty without one compactd wrote).
pub fn branch_reports(report: Option<&SummaryReport>) -> Vec<SummarizerReport> {
    report
        .map(|report| vec![summarizer_report(Purpose::Branch, report)])
        .unwrap_or_default()
}

/// Which summarizer wrote one summary part and why the rungs before it failed, on the wire.
pub fn summarizer_report(part: Purpose, report: &SummaryReport) -> SummarizerReport {
    SummarizerReport {
        part: part.name().to_owned(),
        summarizer: report.summarizer.clone(),
        checks: report.checks.clone(),
        chunks: report.chunks as u64,
        failures: report
            .failures
            .iter()
            .map(|failure| SummarizerFailure {
                summarizer: failure.summarizer.clone(),
                reason: failure.reason.clone(),
            })
            .collect(),
    }
}

fn messages(span: &EntrySpan) -> Vec<WireMessage> {
    span.messages().map(|m| message(&m)).collect()
}

/// The params of `hooks/beforeCompact`.
pub fn before_compact_params(req: &BeforeCompactRequest<'_>) -> BeforeCompactParams {
    BeforeCompactParams {
        session_id: req.session_id.to_owned(),
        operation_id: req.operation_id.to_owned(),
        reason: compaction_reason(req.reason),
        preparation: CompactionPreparation {
            first_kept_entry_id: req.first_kept_entry_id.to_owned(),
            messages_to_summarize: messages(req.messages_to_summarize),
            turn_prefix_messages: messages(req.turn_prefix_messages),
            recent_messages: messages(req.recent_messages),
            is_split_turn: req.is_split_turn,
            tokens_before: req.tokens_before,
            previous_summary: req.previous_summary.map(str::to_owned),
            file_ops: FileOps {
                read: req.file_ops.read.iter().cloned().collect(),
                written: req.file_ops.written.iter().cloned().collect(),
                edited: req.file_ops.edited.iter().cloned().collect(),
            },
        },
        branch_entries: req.branch_entries.iter().map(entry).collect(),
        custom_instructions: req.custom_instructions.map(str::to_owned),
    }
}

/// The params of `hooks/compacting`.
pub fn compacting_params(req: &CompactingRequest<'_>) -> CompactingParams {
    CompactingParams {
        session_id: req.session_id.to_owned(),
        operation_id: req.operation_id.to_owned(),
        messages: messages(req.messages),
    }
}

/// The params of `hooks/beforeTree`.
pub fn before_tree_params(req: &BeforeTreeRequest<'_>) -> BeforeTreeParams {
    BeforeTreeParams {
        session_id: req.session_id.to_owned(),
        preparation: TreePreparation {
            target_id: req.target_id.to_owned(),
            old_leaf_id: req.old_leaf_id.map(str::to_owned),
            common_ancestor_id: req.common_ancestor_id.map(str::to_owned),
            entries_to_summarize: req.entries_to_summarize.iter().map(entry).collect(),
            user_wants_summary: req.user_wants_summary,
        },
    }
}

/// The params of `summarizer/summarize` for session `session_id`.
pub fn summarize_params(session_id: &str, req: ClientSummaryRequest) -> SummarizeParams {
    SummarizeParams {
        session_id: session_id.to_owned(),
        purpose: summary_purpose(req.purpose),
        system_prompt: req.system_prompt,
        prompt: req.prompt,
        max_tokens: u64::from(req.max_tokens),
    }
}

/// The `$/progress` report of a step of loading a session: its message and percentage.
pub fn load_step(step: LoadStep) -> (String, u32) {
    let megabytes = |bytes: u64| format!("{:.1} MB", bytes as f64 / 1e6);
    match step {
        LoadStep::Reading { bytes } => (format!("reading {}", megabytes(bytes)), 5),
        LoadStep::Parsing { bytes } => (format!("parsing {}", megabytes(bytes)), 30),
        LoadStep::Migrating { from_version } => {
            (format!("migrating from version {from_version}"), 70)
        }
        LoadStep::Linking { entries } => (format!("linking {entries} entries"), 85),
    }
}

/// `session/search`'s result.
pub fn search_result(page: crate::session::SearchPage) -> crate::protocol::SessionSearchResult {
    crate::protocol::SessionSearchResult {
        hits: page
            .hits
            .into_iter()
            .map(|h| crate::protocol::SearchHit {
                entry_id: h.entry_id,
                role: h.role,
                snippet: h.snippet,
                compacted: h.compacted,
                timestamp: h.timestamp,
            })
            .collect(),
        next_cursor: page.next_after,
        missing_blobs: page.missing_blobs,
    }
}

/// `session/readEntry`'s result.
pub fn read_entry_result(
    recalled: crate::session::RecalledEntry,
) -> crate::protocol::SessionReadEntryResult {
    let entry = match recalled.entry {
        serde_json::Value::Object(map) => WireEntry(map),
        // An entry line is always an object; anything else is kept under `value`.
        other => WireEntry(serde_json::Map::from_iter([("value".to_owned(), other)])),
    };
    crate::protocol::SessionReadEntryResult {
        entry,
        restored_full_texts: recalled.restored_full_texts,
        restored_pruned: recalled.restored_pruned,
        compacted: recalled.compacted,
    }
}

pub fn background_state(
    state: crate::engine::BackgroundState,
) -> crate::protocol::BackgroundCompactionState {
    use crate::engine::BackgroundState as S;
    use crate::protocol::BackgroundCompactionState as P;
    match state {
        S::Started => P::Started,
        S::Armed => P::Armed,
        S::Committed => P::Committed,
        S::Previewed => P::Previewed,
        S::Discarded => P::Discarded,
    }
}

pub fn discard_reason(
    reason: crate::engine::DiscardReason,
) -> crate::protocol::BackgroundDiscardReason {
    use crate::engine::DiscardReason as D;
    use crate::protocol::BackgroundDiscardReason as P;
    match reason {
        D::LeafLeftBranch => P::LeafLeftBranch,
        D::CompactedSince => P::CompactedSince,
        D::DoesNotFit => P::DoesNotFit,
        D::Aborted => P::Aborted,
        D::Failed => P::Failed,
        D::ManualCompaction => P::ManualCompaction,
    }
}

pub fn pause_reason(
    reason: crate::engine::PauseReason,
) -> crate::protocol::AutoCompactionPauseReason {
    match reason {
        crate::engine::PauseReason::Thrashing => {
            crate::protocol::AutoCompactionPauseReason::Thrashing
        }
        crate::engine::PauseReason::RepeatedFailures => {
            crate::protocol::AutoCompactionPauseReason::RepeatedFailures
        }
    }
}

/// The progress ledger as `session/ledger` (and `compactd ledger --json`) returns it.
pub fn ledger(l: &engine::Ledger) -> crate::protocol::SessionLedgerResult {
    use crate::protocol as p;
    let status = |s: engine::RequestStatus| match s {
        engine::RequestStatus::Current => p::RequestStatus::Current,
        engine::RequestStatus::Answered => p::RequestStatus::Answered,
        engine::RequestStatus::Superseded => p::RequestStatus::Superseded,
    };
    let file = |f: &engine::LedgerFile| p::LedgerFile {
        path: f.path.clone(),
        last_op: match f.last_op {
            engine::FileOp::Read => p::FileOp::Read,
            engine::FileOp::Write => p::FileOp::Write,
            engine::FileOp::Edit => p::FileOp::Edit,
        },
    };
    p::SessionLedgerResult {
        requests: l
            .requests
            .iter()
            .map(|r| p::LedgerRequest {
                entry_id: r.entry_id.clone(),
                text: r.text.clone(),
                status: status(r.status),
            })
            .collect(),
        files: p::LedgerFiles {
            read: l.files.read.iter().map(file).collect(),
            modified: l.files.modified.iter().map(file).collect(),
        },
        errors: l
            .errors
            .iter()
            .map(|e| p::LedgerError {
                entry_id: e.entry_id.clone(),
                command: e.command.clone(),
                text: e.text.clone(),
                resolved: e.resolved,
            })
            .collect(),
        pins: l
            .pins
            .iter()
            .map(|pin| p::LedgerPin {
                pin_id: pin.pin_id.clone(),
                text: pin.text.clone(),
            })
            .collect(),
        next_step: l.next_step.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Details read as they would be whole (`serde_json::from_value` of the object): the
    /// fields the wire names, everything else in order under its own key; details of another
    /// shape (a hook's own) kept whole.
    #[test]
    fn details_reach_the_wire_as_a_whole_read_would_give_them() {
        let whole = |v: &Value| {
            serde_json::from_value::<SummaryDetails>(v.clone()).unwrap_or_else(|_| SummaryDetails {
                other: match v {
                    Value::Object(map) => map.clone(),
                    Value::Null => Map::new(),
                    other => Map::from_iter([("value".to_owned(), other.clone())]),
                },
                ..SummaryDetails::default()
            })
        };
        let cases = [
            serde_json::json!({"readFiles": ["a.rs"], "ledger": {"requests": [{"text": "x"}]},
                "modifiedFiles": [], "reason": "manual", "edited": true, "z": 1}),
            serde_json::json!({"summarizers": [{"part": "history", "summarizer": "extractive"}],
                "retainedFacts": [{"kind": "error", "text": "e"}], "a": null}),
            serde_json::json!({"b": 1, "readFiles": 5, "c": 2}),
            serde_json::json!({"edited": "yes"}),
            serde_json::json!({}),
            Value::Null,
            serde_json::json!([1, 2]),
            serde_json::json!("text"),
        ];
        for v in cases {
            let moved = summary_details(v.clone());
            assert_eq!(moved, whole(&v), "{v}");
            let (a, b) = (
                serde_json::to_string(&moved),
                serde_json::to_string(&whole(&v)),
            );
            assert_eq!(
                a.unwrap(),
                b.unwrap(),
                "the same keys in the same order: {v}"
            );
        }
    }

    /// ENOSPC, EACCES, EROFS and EFBIG on a session file are `ioError` with the OS error in
    /// `data`; a file that is not a session stays `sessionFileInvalid`.
    #[test]
    fn os_errors_are_io_errors_and_bad_content_stays_session_file_invalid() {
        for (errno, name) in [
            (libc::ENOSPC, "ENOSPC"),
            (libc::EACCES, "EACCES"),
            (libc::EROFS, "EROFS"),
            (libc::EFBIG, "EFBIG"),
        ] {
            let e = error(EngineError::SessionFile(SessionError::Io {
                path: "/s/x.jsonl".into(),
                source: std::io::Error::from_raw_os_error(errno),
            }));
            assert_eq!(e.kind(), Some("ioError"), "{e:?}");
            assert_eq!(e.code, ErrorKind::IoError.code());
            let data = e.data.as_deref().expect("data");
            assert_eq!(data["osError"], name);
            assert_eq!(data["errno"], errno);
            assert_eq!(data["path"], "/s/x.jsonl");
            assert!(e.message.starts_with("/s/x.jsonl: "), "{}", e.message);
        }
        let bad = error(EngineError::SessionFile(SessionError::InvalidHeader {
            path: "/s/y.jsonl".into(),
            line: 1,
            reason: "not a session".into(),
        }));
        assert_eq!(bad.kind(), Some("sessionFileInvalid"));
        assert_eq!(bad.data.as_deref().expect("data")["path"], "/s/y.jsonl");
    }

    /// An OS error wrapped with its path (as `tempfile` and the blob store do) still gives
    /// `osError` (issue 35, minor: a blob-store `ioError` had none).
    #[test]
    fn a_wrapped_os_error_keeps_its_name() {
        let wrapped = std::io::Error::new(
            std::io::ErrorKind::StorageFull,
            crate::session::size_controls::BlobReadError {
                path: "/b/abc".into(),
                source: std::io::Error::from_raw_os_error(libc::ENOSPC),
            },
        );
        assert_eq!(wrapped.raw_os_error(), None);
        let e = error(EngineError::SessionFile(SessionError::Io {
            path: "/b".into(),
            source: wrapped,
        }));
        let data = e.data.as_deref().expect("data");
        assert_eq!(data["osError"], "ENOSPC", "{e:?}");
        assert_eq!(data["errno"], libc::ENOSPC);
    }
}
