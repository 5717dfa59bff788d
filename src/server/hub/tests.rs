use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::operation::PROGRESS_INTERVAL;
use super::*;
use crate::engine::{AutoResult, CompactReason};
use crate::summarize::SummaryState;

/// A hub whose clock reads `millis` after a fixed start, with a client that shows progress.
fn hub_at(millis: Arc<AtomicU64>) -> Arc<Hub> {
    let start = Instant::now();
    let hub = Hub::with_clock(Box::new(move || {
        start + Duration::from_millis(millis.load(Ordering::SeqCst))
    }));
    let capabilities: ClientCapabilities =
        serde_json::from_value(serde_json::json!({"window": {"workDoneProgress": true}}))
            .expect("capabilities");
    hub.set_capabilities(capabilities);
    Arc::new(hub)
}

fn message(progress: &WorkDoneProgress) -> &str {
    match progress {
        WorkDoneProgress::Begin { message, .. }
        | WorkDoneProgress::Report { message, .. }
        | WorkDoneProgress::End { message } => message.as_deref().unwrap_or(""),
    }
}

fn token(name: &str) -> ProgressToken {
    ProgressToken::String(name.into())
}

#[test]
fn a_slow_stream_is_reported_four_times_a_second_and_its_last_count_arrives() {
    // A local model: one token every 60 ms for 2,048 tokens (about two minutes). One report
    // per delta was 2,048 reports; throttled, at most one per 250 ms.
    let clock = Arc::new(AtomicU64::new(0));
    let hub = hub_at(clock.clone());
    let kind = OperationKind::BranchSummary;
    hub.begin("s", kind, Some(token("tok")), CancellationToken::new());
    let observer = hub.observer("s", kind);
    observer.phase(Phase::Summarizing, "", None);
    for i in 0..2_048u64 {
        clock.store(i * 60, Ordering::SeqCst);
        observer.delta(Purpose::Branch, "abcd");
    }
    hub.end("s", kind, "done".into());
    let sent: Vec<WorkDoneProgress> = hub
        .outbox
        .queued_progress()
        .into_iter()
        .map(|p| p.value)
        .collect();
    let counts: Vec<&str> = sent
        .iter()
        .map(message)
        .filter(|m| m.starts_with("summarizing ("))
        .collect();
    let most = 2_048 * 60 / PROGRESS_INTERVAL.as_millis() as usize + 2;
    assert!(
        counts.len() <= most && counts.len() > most / 2,
        "{} reports",
        counts.len()
    );
    // The count held back by the throttle goes out before the end.
    assert_eq!(counts.last(), Some(&"summarizing (8192 characters)"));
    assert!(matches!(sent.last(), Some(WorkDoneProgress::End { .. })));
}

#[test]
fn statuses_are_reported_at_once_with_their_chunk() {
    let clock = Arc::new(AtomicU64::new(0));
    let hub = hub_at(clock.clone());
    let kind = OperationKind::Compaction;
    hub.begin("s", kind, Some(token("tok")), CancellationToken::new());
    let observer = hub.observer("s", kind);
    let status = |state, chunk| SummaryStatus {
        summarizer: "local/m".into(),
        chunk,
        chunks: 3,
        state,
    };
    observer.status(
        Purpose::TurnPrefix,
        &status(SummaryState::Queued { ahead: 0 }, 1),
    );
    observer.status(Purpose::History, &status(SummaryState::WaitingForModel, 2));
    observer.delta(Purpose::History, "text");
    hub.end("s", kind, "done".into());
    let sent: Vec<String> = hub
        .outbox
        .queued_progress()
        .iter()
        .map(|p| message(&p.value).to_owned())
        .collect();
    assert_eq!(
        sent,
        [
            "preparing",
            "turn prefix: queued for local/m while its server is busy (chunk 1 of 3)",
            "history: waiting for the model local/m (chunk 2 of 3)",
            "summarizing (4 characters), chunk 2 of 3",
            "done",
        ]
    );
}

/// A branch summary and an auto-compaction on one session at once: each reports on its own
/// token, and neither's end ends the other.
#[test]
fn a_branch_summary_and_an_auto_compaction_keep_their_own_progress() {
    let hub = hub_at(Arc::new(AtomicU64::new(0)));
    let branch = OperationKind::BranchSummary;
    hub.begin("s", branch, Some(token("branch")), CancellationToken::new());
    hub.emit(EngineEvent::AutoCompactionStarted {
        session_id: "s".into(),
        operation_id: "auto-1".into(),
        reason: CompactReason::Threshold,
    });
    hub.observer("s", branch)
        .phase(Phase::Summarizing, "", None);
    hub.end("s", branch, "done".into());
    hub.observer("s", OperationKind::Compaction)
        .phase(Phase::Persisting, "", None);
    hub.emit(EngineEvent::AutoCompactionFinished {
        session_id: "s".into(),
        operation_id: "auto-1".into(),
        result: Box::new(AutoResult::new(CompactReason::Threshold)),
    });
    let sent: Vec<String> = hub
        .outbox
        .queued_progress()
        .iter()
        .map(|p| {
            let token = match &p.token {
                ProgressToken::String(s) => s.clone(),
                ProgressToken::Number(n) => n.to_string(),
            };
            format!("{token}: {}", message(&p.value))
        })
        .collect();
    assert_eq!(
        sent,
        [
            "branch: preparing",
            "compactd-auto-1: preparing",
            "branch: summarizing",
            "branch: done",
            "compactd-auto-1: persisting",
            "compactd-auto-1: done",
        ]
    );
}
