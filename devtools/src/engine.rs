//! Helpers for the engine tests: sessions built in temp dirs, fake summarizers and hooks.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use compactd::engine::{
    BeforeCompactReply, BeforeCompactRequest, BeforeTreeReply, BeforeTreeRequest, CompactEnv,
    CompactingReply, CompactingRequest, EngineHooks, NoHooks, SharedSession, SummarizerSet,
};
use compactd::session::{AgentMessage, CreateOptions, EntryKind, Session};
use compactd::settings::Settings;
use compactd::summarize::ExtractiveSummarizer;
use compactd::summarize::{
    DeltaSink, Prompts, Purpose, RetryPolicy, SummarizeError, Summarizer, SummaryOutput,
    SummaryRequest,
};
use compactd::tokens::counter_by_name;
use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

pub fn open(path: &Path) -> SharedSession {
    let (session, _) = Session::open(path).expect("session opens");
    Arc::new(tokio::sync::RwLock::new(session))
}

/// A new session file in `dir` holding `messages` (JSON) in one chain; returns its path.
pub fn build_session(dir: &Path, messages: &[Value]) -> PathBuf {
    let path = dir.join("built.jsonl");
    let mut session =
        Session::create(&path, "/tmp/project", CreateOptions::default()).expect("create");
    for m in messages {
        let msg = AgentMessage::from_value(m.clone()).expect("valid message");
        session.append(EntryKind::Message(msg)).expect("append");
    }
    path
}

pub fn user(text: &str) -> Value {
    json!({"role": "user", "content": text, "timestamp": 1})
}

pub fn assistant(text: &str) -> Value {
    json!({"role": "assistant", "content": [{"type": "text", "text": text}], "stopReason": "stop",
        "timestamp": 1})
}

pub fn tool_call(id: &str, name: &str, path: &str) -> Value {
    json!({"role": "assistant", "content": [{"type": "toolCall", "id": id, "name": name,
        "arguments": {"path": path}}], "stopReason": "toolUse", "timestamp": 1})
}

pub fn tool_result(id: &str, name: &str, text: &str) -> Value {
    json!({"role": "toolResult", "toolCallId": id, "toolName": name,
        "content": [{"type": "text", "text": text}], "isError": false, "timestamp": 1})
}

/// An engine environment with the chars4 counter, default settings (`keep` recent tokens),
/// `summarizer` as the only candidate (no fallback) and `hooks`.
pub fn env_with(
    summarizer: Arc<dyn Summarizer>,
    hooks: Arc<dyn EngineHooks>,
    keep: u64,
) -> CompactEnv {
    let mut settings = Settings::default();
    settings.compaction.keep_recent_tokens = keep;
    CompactEnv {
        settings,
        counter: counter_by_name("chars4").expect("chars4 exists"),
        summarizers: SummarizerSet {
            candidates: vec![summarizer],
            fallback: None,
            retry: RetryPolicy {
                enabled: false,
                ..RetryPolicy::default()
            },
            breaker: Default::default(),
        },
        hooks,
        prompts: Arc::new(Prompts::embedded()),
        context_window: 128_000,
        session_id: "test".into(),
        operation_id: "op-test".into(),
    }
}

pub fn extractive_env(keep: u64) -> CompactEnv {
    env_with(
        Arc::new(ExtractiveSummarizer::new()),
        Arc::new(NoHooks),
        keep,
    )
}

/// Answers every request with a fixed text (`short` for short summaries) and records them.
#[derive(Default)]
pub struct Recording {
    pub text: String,
    pub requests: Mutex<Vec<SummaryRequest>>,
}

impl Recording {
    pub fn new(text: &str) -> Arc<Self> {
        Arc::new(Recording {
            text: text.to_owned(),
            requests: Mutex::new(Vec::new()),
        })
    }

    pub fn prompts(&self, purpose: Purpose) -> Vec<String> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.purpose == purpose)
            .map(|r| r.prompt.clone())
            .collect()
    }
}

impl Summarizer for Recording {
    fn id(&self) -> String {
        "test/recording".into()
    }
    fn context_window(&self) -> u64 {
        1_000_000
    }
    fn summarize<'a>(
        &'a self,
        req: &'a SummaryRequest,
        _cancel: CancellationToken,
        on_delta: DeltaSink<'a>,
    ) -> BoxFuture<'a, Result<SummaryOutput, SummarizeError>> {
        Box::pin(async move {
            self.requests.lock().unwrap().push(req.clone());
            let text = match req.purpose {
                Purpose::Short => "short".to_owned(),
                Purpose::TurnPrefix => format!("prefix: {}", self.text),
                _ => self.text.clone(),
            };
            on_delta(&text);
            Ok(SummaryOutput {
                text,
                short_summary: None,
                usage: None,
                model: self.id(),
            })
        })
    }
}

/// Signals when a request starts, then waits until cancelled.
pub struct WaitsForCancel {
    pub started: tokio::sync::Notify,
}

impl Summarizer for WaitsForCancel {
    fn id(&self) -> String {
        "test/waits".into()
    }
    fn context_window(&self) -> u64 {
        1_000_000
    }
    fn summarize<'a>(
        &'a self,
        _req: &'a SummaryRequest,
        cancel: CancellationToken,
        _on_delta: DeltaSink<'a>,
    ) -> BoxFuture<'a, Result<SummaryOutput, SummarizeError>> {
        Box::pin(async move {
            self.started.notify_one();
            cancel.cancelled().await;
            Err(SummarizeError::Cancelled)
        })
    }
}

/// Hooks with canned replies; records what they saw.
#[derive(Default)]
pub struct CannedHooks {
    pub before_compact: Option<BeforeCompactReply>,
    pub compacting: Option<CompactingReply>,
    pub before_tree: Option<BeforeTreeReply>,
    pub seen_tree_entries: Mutex<Option<usize>>,
}

impl EngineHooks for CannedHooks {
    fn before_compact<'a>(
        &'a self,
        _req: BeforeCompactRequest<'a>,
    ) -> BoxFuture<'a, Option<BeforeCompactReply>> {
        Box::pin(async move { self.before_compact.clone() })
    }
    fn compacting<'a>(
        &'a self,
        _req: CompactingRequest<'a>,
    ) -> BoxFuture<'a, Option<CompactingReply>> {
        Box::pin(async move { self.compacting.clone() })
    }
    fn before_tree<'a>(
        &'a self,
        req: BeforeTreeRequest<'a>,
    ) -> BoxFuture<'a, Option<BeforeTreeReply>> {
        *self.seen_tree_entries.lock().unwrap() = Some(req.entries_to_summarize.len());
        Box::pin(async move { self.before_tree.clone() })
    }
}

/// Runs `fut` with a 30 s limit.
pub async fn timed<T>(fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(std::time::Duration::from_secs(30), fut)
        .await
        .expect("test timed out")
}
