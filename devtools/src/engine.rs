//! Helpers for the engine tests: sessions built in temp dirs, fake summarizers and hooks.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use compactd::engine::{
    BeforeCompactReply, BeforeCompactRequest, BeforeTreeReply, BeforeTreeRequest, CompactEnv,
    CompactingReply, CompactingRequest, EngineHooks, OperationObserver, Phase, SharedSession,
    SummarizerSet, SummaryObserver,
};
use compactd::session::{
    AgentMessage, Catalog, CreateOptions, EntryKind, LoadReport, Session, now_ms,
};
use compactd::settings::Settings;
use compactd::summarize::{
    DeltaSink, Prompts, Purpose, RetryPolicy, SummarizeError, Summarizer, SummaryOutput,
    SummaryRequest,
};
use compactd::testkit::{
    ExtractiveSummarizer, NoHooks, PgOptions, PgStore, import_file, postgres_path,
};
use compactd::tokens::counter_by_name;
use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

// ---- where the sessions live ------------------------------------------------------------
//
// The engine suite runs on both storage backends: on session files (the default) and, with
// `COMPACTD_TEST_BACKEND=postgres`, on sessions in a database of the shared test server. A
// test names a session by a path either way: a file's, or `postgres:ID` (what the engine
// itself shows for a stored session), and the helpers below open, reload and read it back
// from where it lives.

/// The storage backend the engine tests run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    File,
    Postgres,
}

/// The backend `COMPACTD_TEST_BACKEND` names (`file` or unset: files; `postgres`).
pub fn backend() -> Backend {
    match std::env::var("COMPACTD_TEST_BACKEND").as_deref() {
        Ok("postgres") => Backend::Postgres,
        Ok("file") | Err(_) => Backend::File,
        Ok(other) => panic!("COMPACTD_TEST_BACKEND={other}: expected file or postgres"),
    }
}

/// The database of this test process on the shared server (made on first use): its URL,
/// for an engine's `storage.postgres.url`.
pub fn test_database_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| crate::postgres::shared().create_database())
}

/// A connection of its own to [`test_database_url`]: a writer other than any engine's.
pub fn test_store() -> &'static Arc<PgStore> {
    static STORE: OnceLock<Arc<PgStore>> = OnceLock::new();
    STORE.get_or_init(|| {
        PgStore::connect(&PgOptions {
            url: test_database_url().to_owned(),
            pool_size: 4,
            timeout: Duration::from_secs(30),
            fresh_reads: true,
        })
        .expect("the test database accepts connections")
    })
}

/// The id of a stored session named by `path` (`postgres:ID`), or `None` for a file.
fn stored_id(path: &Path) -> Option<&str> {
    path.to_str()?.strip_prefix("postgres:")
}

/// `copy` (a session file in a temp dir, e.g. `demo_copy()`) where the tests run: the file
/// itself, or the session imported into the test database and named `postgres:ID`. Every
/// import gets a session id of its own (written into the copy's header first): tests share
/// the database, and many import the same fixture.
pub fn on_backend(copy: (tempfile::TempDir, PathBuf)) -> (tempfile::TempDir, PathBuf) {
    match backend() {
        Backend::File => copy,
        Backend::Postgres => {
            let (dir, file) = copy;
            let text = std::fs::read_to_string(&file).expect("the copy reads");
            let (first, rest) = text.split_once('\n').unwrap_or((&text, ""));
            let mut header: Value = serde_json::from_str(first).expect("a JSON header");
            header["id"] = json!(fresh_session_id());
            std::fs::write(&file, format!("{header}\n{rest}")).expect("the copy writes");
            let (report, _) =
                import_file(test_store(), &file, false, |_, _| {}).expect("the file imports");
            (dir, postgres_path(&report.id))
        }
    }
}

/// A session id no other test of any process uses.
fn fresh_session_id() -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    format!("t{:x}-{}-{seq}", now_ms(), std::process::id())
}

/// Loads the session named by `path` afresh (a second reader, as another process would),
/// every entry of it (a stored session opens with only what its context needs).
pub fn load(path: &Path) -> (Session, LoadReport) {
    let (mut session, report) = open_where_it_lives(path);
    session.load_whole().expect("the whole session loads");
    (session, report)
}

/// The session named by `path` opened as the engine opens it (a stored one partly).
fn open_where_it_lives(path: &Path) -> (Session, LoadReport) {
    match stored_id(path) {
        Some(id) => test_store().open_session(id),
        None => Session::open(path),
    }
    .expect("session opens")
}

/// [`load`] without the report.
pub fn reopen(path: &Path) -> Session {
    load(path).0
}

/// The session named by `path`, opened as the engine opens it, to hand to the engine.
pub fn open(path: &Path) -> SharedSession {
    Arc::new(tokio::sync::RwLock::new(open_where_it_lives(path).0))
}

/// Everything stored for the session named by `path`, as JSONL: the file's bytes, or the
/// export of the stored session (the same bytes a file would hold). Tests compare it before
/// and after an operation that must write nothing.
pub fn stored_bytes(path: &Path) -> Vec<u8> {
    match stored_id(path) {
        Some(id) => {
            let mut out = Vec::new();
            test_store()
                .export(id, &mut out, &mut |_, _| {})
                .expect("the session exports");
            out
        }
        None => std::fs::read(path).expect("the session file reads"),
    }
}

/// A new session in `dir` (a file; or in the test database) holding `messages` (JSON) in one
/// chain; returns its path (`postgres:ID` for a stored one).
pub fn build_session(dir: &Path, messages: &[Value]) -> PathBuf {
    let path = dir.join("built.jsonl");
    let mut session = match backend() {
        Backend::File => Session::create(&path, "/tmp/project", CreateOptions::default()),
        Backend::Postgres => test_store().create_session("/tmp/project", CreateOptions::default()),
    }
    .expect("create");
    for m in messages {
        let msg = AgentMessage::from_value(m.clone()).expect("valid message");
        session.append(EntryKind::Message(msg)).expect("append");
    }
    session.path().to_path_buf()
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

/// An operation observer that ignores everything (the engine tests that do not look at
/// progress).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopObserver;

impl OperationObserver for NoopObserver {
    fn phase(&self, _phase: Phase, _message: &str, _percentage: Option<u32>) {}
}

impl SummaryObserver for NoopObserver {
    fn delta(&self, _part: Purpose, _text: &str) {}
}
