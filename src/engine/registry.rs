//! The [`Engine`]: the open sessions by id, each with its state (see [`super::state`]), the
//! settings stack, the event sink, the hooks and the client summarizer. Every session-level
//! operation of the protocol goes through here.
//!
//! Paths: a session path given by a client must name a `.jsonl` file; a session id used to
//! build a path must be plain (`[A-Za-z0-9_-]+`). Anything else is refused with
//! [`EngineError::PathOutsideAllowed`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use tokio_util::sync::CancellationToken;

use crate::session::entry::CURRENT_SESSION_VERSION;
use crate::session::listing;
use crate::session::{
    CreateOptions, Entry, EntryKind, LoadReport, Session, SessionError, SyncPolicy,
};
use crate::settings::{Settings, SettingsStack, StorageSync};

use crate::tokens::{TokenCounter, counter_by_name};

use super::auto::{self, AutoResult, PendingAuto};
use super::prune::{self, PruneOutcome};
use super::state::{OpKind, SessionState};
use super::usage::{self, ContextView, TreeView, UsageView};
use super::{
    CompactEnv, CompactOptions, CompactOutcome, EngineError, EngineEvent, EngineHooks, EventSink,
    NavigateOptions, NavigateOutcome, NoHooks, OperationObserver, Prompts, SharedSession,
    Summarizer, summarizers_from_settings,
};

/// An open session as the protocol reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionInfo {
    pub id: String,
    pub path: PathBuf,
    pub cwd: String,
    pub title: Option<String>,
    pub leaf_id: Option<String>,
    /// Entries in the file (leaf markers excluded).
    pub entry_count: usize,
    /// The file's format version as found on disk (1 or 2 for a file migrated in memory; the
    /// next write saves the current version).
    pub version: u64,
    /// What loading found (skipped lines, torn tail, migration), one line each.
    pub warnings: Vec<String>,
    /// Opened read-only (see [`Engine::open`]).
    pub read_only: bool,
}

/// A session file found by [`Engine::list`].
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSummary {
    pub id: String,
    pub path: PathBuf,
    pub cwd: String,
    pub title: Option<String>,
    /// The header's creation time (ISO-8601).
    pub created: String,
    /// Whether the session is open in this engine.
    pub open: bool,
    /// Lines after the header (estimated for very large files).
    pub entry_count: usize,
}

/// What the client should do after an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendAction {
    /// Nothing to do.
    Continue,
    /// A threshold compaction ran; with auto-continue, a synthetic prompt was appended: run a
    /// turn on the new context.
    Compacted,
    /// An overflow was recovered: re-send the request with the new context.
    Retry,
    /// Auto-compaction failed (see the auto result's `error_message`).
    Failed,
    /// A threshold compaction runs in the background ([`AppendOutcome::pending`]).
    Compacting,
    /// An overflow recovery runs in the background ([`AppendOutcome::pending`]).
    Recovering,
}

/// One entry to append: its kind and any extra top-level fields to keep as given.
#[derive(Debug, Clone)]
pub struct NewEntry {
    pub kind: EntryKind,
    pub extra: crate::session::message::Extra,
}

impl From<EntryKind> for NewEntry {
    fn from(kind: EntryKind) -> Self {
        NewEntry {
            kind,
            extra: Default::default(),
        }
    }
}

/// How [`Engine::append_with`] behaves.
#[derive(Debug, Clone)]
pub struct AppendOptions {
    /// Fail with `LeafMoved` unless the leaf is this.
    pub expected_leaf: Option<Option<String>>,
    /// Run the auto-compaction check when the batch contains an assistant message.
    pub check_compaction: bool,
    /// Run a due auto-compaction before returning; otherwise return it as
    /// [`AppendOutcome::pending`] for the caller to run.
    pub wait_for_compaction: bool,
}

impl Default for AppendOptions {
    fn default() -> Self {
        AppendOptions {
            expected_leaf: None,
            check_compaction: true,
            wait_for_compaction: true,
        }
    }
}

/// The result of [`Engine::append`].
#[derive(Debug)]
pub struct AppendOutcome {
    /// Ids of the appended entries, in order.
    pub appended: Vec<String>,
    /// The leaf after the append and any auto-compaction.
    pub leaf_id: Option<String>,
    pub action: AppendAction,
    /// Set when auto-compaction ran (with `wait_for_compaction`).
    pub auto: Option<AutoResult>,
    /// The auto-compaction left to run (without `wait_for_compaction`): the caller runs it
    /// with [`PendingAuto::run`]; until then later mutating calls on the session wait.
    pub pending: Option<PendingAuto>,
}

/// A fresh operation id with `prefix` (`compact-…`, `auto-…`).
pub(crate) fn new_operation_id(prefix: &str) -> String {
    format!("{prefix}-{}", crate::session::ids::new_session_id())
}

/// Builds the client summarizer for one session (its requests name the session).
pub type ClientSummarizerFactory = Arc<dyn Fn(&str) -> Arc<dyn Summarizer> + Send + Sync>;

/// The daemon's (or the CLI's) session registry and operations.
pub struct Engine {
    settings: RwLock<SettingsStack>,
    events: Arc<dyn EventSink>,
    hooks: RwLock<Arc<dyn EngineHooks>>,
    client_summarizer: RwLock<Option<ClientSummarizerFactory>>,
    prompts: Arc<Prompts>,
    sessions: Mutex<HashMap<String, Arc<SessionState>>>,
    /// Where new sessions go and ids are looked up; `None`: from settings or the platform.
    sessions_dir: Option<PathBuf>,
}

fn read_lock<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    // The guarded values are replaced whole; a panicking writer cannot leave them half-set.
    lock.read().unwrap_or_else(|p| p.into_inner())
}

fn write_lock<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|p| p.into_inner())
}

/// Whether `id` may become part of a file name.
pub fn is_plain_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Checks a client-given session path: it must name a `.jsonl` file.
pub fn check_session_path(path: &Path) -> Result<(), EngineError> {
    let ok = path.extension().is_some_and(|e| e == "jsonl")
        && path.file_name().is_some_and(|n| n != ".jsonl");
    if ok {
        Ok(())
    } else {
        Err(EngineError::PathOutsideAllowed(format!(
            "{} is not a .jsonl session file",
            path.display()
        )))
    }
}

fn load_warnings(report: &LoadReport) -> Vec<String> {
    let mut out: Vec<String> = report
        .skipped
        .iter()
        .map(|s| format!("line {}: skipped: {}", s.line, s.reason))
        .collect();
    out.extend(
        report
            .duplicate_ids
            .iter()
            .map(|d| format!("line {}: duplicate entry id {}", d.line, d.id)),
    );
    if let Some(t) = &report.torn_tail {
        out.push(format!(
            "line {}: torn last line ignored: {}",
            t.line, t.reason
        ));
    }
    if let Some(v) = report.migrated_from {
        out.push(format!(
            "migrated from version {v} in memory; the next write saves version 3"
        ));
    }
    out
}

fn settings_err(e: impl std::fmt::Display) -> EngineError {
    EngineError::Settings(e.to_string())
}

fn check_leaf(session: &Session, expected: &Option<Option<String>>) -> Result<(), EngineError> {
    if let Some(expected) = expected
        && expected.as_deref() != session.leaf_id()
    {
        return Err(EngineError::LeafMoved {
            expected: expected.clone(),
            actual: session.leaf_id().map(str::to_owned),
        });
    }
    Ok(())
}

impl Engine {
    /// An engine with `settings` (user and `initialize` layers) reporting to `events`. Prompt
    /// templates come from `<config dir>/prompts/` where the user put overrides, else the
    /// embedded ones.
    pub fn new(settings: SettingsStack, events: Arc<dyn EventSink>) -> Self {
        Engine {
            settings: RwLock::new(settings),
            events,
            hooks: RwLock::new(Arc::new(NoHooks)),
            client_summarizer: RwLock::new(None),
            prompts: Arc::new(user_prompts()),
            sessions: Mutex::new(HashMap::new()),
            sessions_dir: None,
        }
    }

    /// Puts new sessions in (and looks ids up in) `dir` instead of the configured directory.
    pub fn with_sessions_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.sessions_dir = Some(dir.into());
        self
    }

    /// Uses `prompts` (e.g. with user overrides) for summaries.
    pub fn with_prompts(mut self, prompts: Arc<Prompts>) -> Self {
        self.prompts = prompts;
        self
    }

    pub fn set_hooks(&self, hooks: Arc<dyn EngineHooks>) {
        *write_lock(&self.hooks) = hooks;
    }

    /// One client summarizer for every session.
    pub fn set_client_summarizer(&self, summarizer: Option<Arc<dyn Summarizer>>) {
        let factory = summarizer
            .map(|s| -> ClientSummarizerFactory { Arc::new(move |_: &str| Arc::clone(&s)) });
        *write_lock(&self.client_summarizer) = factory;
    }

    /// A client summarizer built per session, so its requests can name the session.
    pub fn set_client_summarizer_factory(&self, factory: Option<ClientSummarizerFactory>) {
        *write_lock(&self.client_summarizer) = factory;
    }

    /// The engine-level settings stack (without any session's project layer).
    pub fn settings(&self) -> SettingsStack {
        read_lock(&self.settings).clone()
    }

    /// Applies `update` to the engine's stack (e.g. `settings/update`) and re-derives every
    /// open session's stack. On error nothing changes.
    pub fn update_settings<T>(
        &self,
        update: impl FnOnce(&mut SettingsStack) -> Result<T, EngineError>,
    ) -> Result<T, EngineError> {
        let mut guard = write_lock(&self.settings);
        let mut candidate = guard.clone();
        let out = update(&mut candidate)?;
        candidate.effective().map_err(settings_err)?;
        *guard = candidate;
        let base = guard.clone();
        drop(guard);
        for state in self.open_states() {
            let (stack, _) = session_stack(&base, &state.cwd);
            state.set_settings(stack);
        }
        Ok(out)
    }

    /// The directory new sessions go to: the override, `storage.sessionsDir`, or
    /// `<data dir>/sessions`.
    pub fn sessions_dir(&self) -> Result<PathBuf, EngineError> {
        if let Some(dir) = &self.sessions_dir {
            return Ok(dir.clone());
        }
        let settings = read_lock(&self.settings)
            .effective()
            .map_err(settings_err)?;
        if let Some(dir) = settings.storage.sessions_dir {
            return Ok(dir);
        }
        listing::sessions_dir().ok_or_else(|| {
            EngineError::Settings("no data directory; set storage.sessionsDir".into())
        })
    }

    fn lock_sessions(&self) -> MutexGuard<'_, HashMap<String, Arc<SessionState>>> {
        // A map of Arcs: a panic while holding the lock cannot leave it inconsistent.
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn open_states(&self) -> Vec<Arc<SessionState>> {
        self.lock_sessions().values().cloned().collect()
    }

    /// The open session `id`.
    pub(crate) fn state(&self, id: &str) -> Result<Arc<SessionState>, EngineError> {
        self.lock_sessions()
            .get(id)
            .cloned()
            .ok_or_else(|| EngineError::SessionNotFound(id.to_owned()))
    }

    pub(crate) fn emit(&self, event: EngineEvent) {
        self.events.emit(event);
    }

    /// The event sink, for work that outlives a call (background auto-compaction).
    pub(crate) fn events(&self) -> Arc<dyn EventSink> {
        Arc::clone(&self.events)
    }

    /// Registers a loaded session (or returns the one already open with that id and path, when
    /// it was opened the same way, read-only or not).
    fn register(
        &self,
        session: Session,
        warnings: Vec<String>,
        version: u64,
        read_only: bool,
    ) -> Result<SessionInfo, EngineError> {
        let id = session.header().id.clone();
        let cwd = session.header().cwd.clone();
        let path = session.path().to_path_buf();
        let mut sessions = self.lock_sessions();
        if let Some(existing) = sessions.get(&id) {
            if same_file(&existing.path, &path) {
                let existing = Arc::clone(existing);
                drop(sessions);
                check_open_mode(&existing, read_only)?;
                return Ok(self.info_of_state(&existing, warnings, version));
            }
            return Err(EngineError::InvalidParams(format!(
                "a different session with id {id} is already open ({})",
                existing.path.display()
            )));
        }
        let base = read_lock(&self.settings).clone();
        let (stack, settings_warning) = session_stack(&base, &cwd);
        let mut warnings = warnings;
        warnings.extend(settings_warning);
        let mut session = session;
        let settings = stack.effective().map_err(settings_err)?;
        session.set_sync_policy(sync_policy(&settings));
        let info = SessionInfo {
            id: id.clone(),
            path: path.clone(),
            cwd: cwd.clone(),
            title: session.header().title.clone(),
            leaf_id: session.leaf_id().map(str::to_owned),
            entry_count: visible_count(&session),
            warnings,
            version,
            read_only,
        };
        let shared: SharedSession = Arc::new(tokio::sync::RwLock::new(session));
        let mut state = SessionState::new(id.clone(), path, cwd, shared, stack);
        state.original_version = version;
        state.read_only = read_only;
        let state = Arc::new(state);
        sessions.insert(id, state);
        Ok(info)
    }

    fn info_of_state(
        &self,
        state: &SessionState,
        warnings: Vec<String>,
        version: u64,
    ) -> SessionInfo {
        // Only called right after registration or for an open session: a short read.
        let session = state.session.try_read();
        let (title, leaf_id, entry_count) = match session {
            Ok(s) => (
                s.header().title.clone(),
                s.leaf_id().map(str::to_owned),
                visible_count(&s),
            ),
            Err(_) => (None, None, 0),
        };
        SessionInfo {
            id: state.id.clone(),
            path: state.path.clone(),
            cwd: state.cwd.clone(),
            title,
            leaf_id,
            entry_count,
            warnings,
            version,
            read_only: state.read_only,
        }
    }

    /// Creates a session for `cwd`: at `path` (a new `.jsonl` file) or in the sessions
    /// directory under the default naming scheme.
    pub async fn create(
        &self,
        cwd: &Path,
        path: Option<PathBuf>,
        title: Option<String>,
    ) -> Result<SessionInfo, EngineError> {
        let cwd_text = cwd.to_string_lossy().into_owned();
        let (path, id) = match path {
            Some(p) => {
                check_session_path(&p)?;
                (p, crate::session::ids::new_session_id())
            }
            None => listing::new_session_path(&self.sessions_dir()?, &cwd_text),
        };
        let sync = read_lock(&self.settings)
            .effective()
            .map(|s| sync_policy(&s))
            .unwrap_or_default();
        let options = CreateOptions {
            id: Some(id),
            title,
            sync,
            ..Default::default()
        };
        let session = Session::create(&path, &cwd_text, options)?;
        self.register(session, Vec::new(), CURRENT_SESSION_VERSION, false)
    }

    /// A new session made from `session_id`, and opened: with `entry_id`, its root→entry branch
    /// (the reference's `createBranchedSession`; `parentSession` is the source's path);
    /// without, a copy of every entry (`fork`; `parentSession` is the source's id). It goes to
    /// `path` (a new `.jsonl` file) or the sessions directory; its title is `title`, else the
    /// source's. The source is only read.
    pub async fn fork(
        &self,
        session_id: &str,
        entry_id: Option<&str>,
        path: Option<PathBuf>,
        title: Option<String>,
    ) -> Result<SessionInfo, EngineError> {
        let state = self.state(session_id)?;
        self.refresh(&state).await?;
        let (path, id) = match path {
            Some(p) => {
                check_session_path(&p)?;
                (p, crate::session::ids::new_session_id())
            }
            None => listing::new_session_path(&self.sessions_dir()?, &state.cwd),
        };
        let settings = self.session_settings(&state)?;
        let source = state.session.read().await;
        let options = CreateOptions {
            id: Some(id),
            title: title.or_else(|| source.header().title.clone()),
            parent_session: Some(match entry_id {
                Some(_) => state.path.to_string_lossy().into_owned(),
                None => state.id.clone(),
            }),
            sync: sync_policy(&settings),
        };
        let made = match entry_id {
            Some(entry) => source.create_branched(entry, &path, options),
            None => source.fork_to(&path, options),
        };
        drop(source);
        let session = made.map_err(entry_error)?;
        self.register(session, Vec::new(), CURRENT_SESSION_VERSION, false)
    }

    /// Opens a session by `.jsonl` path or by id (an open session, or a file in the sessions
    /// directory). Opening never writes to the file.
    pub async fn open(&self, path_or_id: &str) -> Result<SessionInfo, EngineError> {
        self.open_with(path_or_id, false).await
    }

    /// [`Engine::open`] for a file another program owns (an agent that appends to it): the
    /// session is never written, reads and previews see the owner's appends, and every write
    /// fails with [`EngineError::ReadOnly`].
    pub async fn open_read_only(&self, path_or_id: &str) -> Result<SessionInfo, EngineError> {
        self.open_with(path_or_id, true).await
    }

    async fn open_with(
        &self,
        path_or_id: &str,
        read_only: bool,
    ) -> Result<SessionInfo, EngineError> {
        let path = if path_or_id.ends_with(".jsonl") {
            let p = PathBuf::from(path_or_id);
            check_session_path(&p)?;
            p
        } else if is_plain_id(path_or_id) {
            if let Ok(state) = self.state(path_or_id) {
                check_open_mode(&state, read_only)?;
                self.refresh(&state).await?;
                let version = state.original_version;
                return Ok(self.info_of_state(&state, Vec::new(), version));
            }
            self.find_by_id(path_or_id)?
        } else {
            return Err(EngineError::PathOutsideAllowed(format!(
                "{path_or_id:?} is neither a .jsonl path nor a plain session id"
            )));
        };
        let (session, report) = Session::open(&path)?;
        let version = report.migrated_from.unwrap_or(CURRENT_SESSION_VERSION);
        self.register(session, load_warnings(&report), version, read_only)
    }

    /// The file of session `id` in the sessions directory.
    fn find_by_id(&self, id: &str) -> Result<PathBuf, EngineError> {
        let dir = self.sessions_dir()?;
        listing::list_all_sessions(&dir)
            .ok()
            .and_then(|all| all.into_iter().find(|s| s.id == id))
            .map(|s| s.path)
            .ok_or_else(|| EngineError::SessionNotFound(id.to_owned()))
    }

    /// The sessions in the sessions directory (only those of `cwd` when given), most recently
    /// modified first.
    pub async fn list(&self, cwd: Option<&Path>) -> Result<Vec<SessionSummary>, EngineError> {
        let dir = self.sessions_dir()?;
        let open: HashMap<String, PathBuf> = self
            .open_states()
            .iter()
            .map(|s| (s.id.clone(), s.path.clone()))
            .collect();
        let io = |e: std::io::Error| {
            EngineError::SessionFile(SessionError::Io {
                path: dir.clone(),
                source: e,
            })
        };
        let found = match cwd {
            Some(c) => {
                listing::list_sessions(&listing::session_dir_for_cwd(&dir, &c.to_string_lossy()))
                    .map_err(io)?
            }
            None => listing::list_all_sessions(&dir).map_err(io)?,
        };
        Ok(found
            .into_iter()
            .map(|info| SessionSummary {
                open: open.get(&info.id).is_some_and(|p| same_file(p, &info.path)),
                id: info.id,
                path: info.path,
                cwd: info.cwd,
                title: info.title,
                created: info.timestamp,
                entry_count: info.entry_count,
            })
            .collect())
    }

    /// Forgets session `id` (running operations keep their own handle and finish).
    pub async fn close(&self, id: &str) -> Result<(), EngineError> {
        match self.lock_sessions().remove(id) {
            Some(_) => Ok(()),
            None => Err(EngineError::SessionNotFound(id.to_owned())),
        }
    }

    /// Ingests other writers' appends; drops cached counts when the file was replaced.
    pub(crate) async fn refresh(&self, state: &SessionState) -> Result<(), EngineError> {
        let mut session = state.session.write().await;
        refresh_locked(state, &mut session)
    }

    /// Effective settings of a session (engine layers + its project layer).
    pub(crate) fn session_settings(&self, state: &SessionState) -> Result<Settings, EngineError> {
        state.effective_settings()
    }

    /// The counter for `tokenizer` (a setting name), or the session's configured one.
    pub(crate) fn counter(
        &self,
        settings: &Settings,
        tokenizer: Option<&str>,
    ) -> Result<Arc<dyn TokenCounter>, EngineError> {
        let name = match tokenizer {
            Some(t) => t.to_owned(),
            None => tokenizer_name(settings),
        };
        counter_by_name(&name).ok_or_else(|| {
            EngineError::InvalidParams(format!(
                "unknown tokenizer {name:?} (expected chars4, o200k or cl100k)"
            ))
        })
    }

    /// Everything a compaction of this session needs.
    pub(crate) fn compact_env(
        &self,
        state: &SessionState,
        settings: Settings,
        context_window: u64,
    ) -> Result<CompactEnv, EngineError> {
        let counter = self.counter(&settings, None)?;
        let client = read_lock(&self.client_summarizer)
            .as_ref()
            .map(|factory| factory(&state.id));
        let summarizers = summarizers_from_settings(&settings, client)?;
        Ok(CompactEnv {
            settings,
            counter,
            summarizers,
            hooks: read_lock(&self.hooks).clone(),
            prompts: Arc::clone(&self.prompts),
            context_window,
            session_id: state.id.clone(),
            operation_id: String::new(),
        })
    }

    /// Appends `entries` at the leaf (after checking `expected_leaf`), reports them, then
    /// runs the auto-compaction check when the batch contains an assistant message, waiting
    /// for any compaction it starts. See [`Engine::append_with`].
    pub async fn append(
        &self,
        session_id: &str,
        entries: Vec<EntryKind>,
        expected_leaf: Option<Option<String>>,
        observer: &dyn OperationObserver,
    ) -> Result<AppendOutcome, EngineError> {
        let options = AppendOptions {
            expected_leaf,
            ..AppendOptions::default()
        };
        let entries = entries.into_iter().map(NewEntry::from).collect();
        self.append_with(
            session_id,
            entries,
            options,
            CancellationToken::new(),
            observer,
        )
        .await
    }

    /// Appends `entries` at the leaf and reports them. With `check_compaction`, when the batch
    /// contains an assistant message the auto-compaction check runs on the last one (tool
    /// results may follow it); a due compaction runs before returning
    /// (`wait_for_compaction`, cancelled by `cancel`) or is returned as
    /// [`AppendOutcome::pending`], holding the session's write gate until it has run.
    pub async fn append_with(
        &self,
        session_id: &str,
        entries: Vec<NewEntry>,
        options: AppendOptions,
        cancel: CancellationToken,
        observer: &dyn OperationObserver,
    ) -> Result<AppendOutcome, EngineError> {
        let state = self.state(session_id)?;
        state.check_writable()?;
        let gate = Arc::clone(&state.write_gate).lock_owned().await;
        if cancel.is_cancelled() {
            return Err(EngineError::Cancelled("request cancelled".into()));
        }
        let appended: Vec<Entry> = {
            let mut session = state.session.write().await;
            refresh_locked(&state, &mut session)?;
            check_leaf(&session, &options.expected_leaf)?;
            if entries.is_empty() {
                Vec::new()
            } else {
                let items = entries.into_iter().map(|e| (e.kind, e.extra)).collect();
                session.append_with_extra(items)?.to_vec()
            }
        };
        let ids: Vec<String> = appended.iter().map(|e| e.id.clone()).collect();
        if !appended.is_empty() {
            self.emit(EngineEvent::EntriesAppended {
                session_id: state.id.clone(),
                entries: appended.clone(),
            });
        }
        let last_reply = appended
            .iter()
            .rev()
            .find(|e| e.message().and_then(|m| m.as_assistant()).is_some());
        // A background run outlives the request: only `session/abortCompaction` stops it.
        let run_token = if options.wait_for_compaction {
            cancel.clone()
        } else {
            CancellationToken::new()
        };
        let plan = match last_reply {
            Some(reply) if options.check_compaction => {
                auto::plan(self, &state, reply, &run_token).await?
            }
            _ => None,
        };
        let (action, auto, pending) = match plan {
            None => (AppendAction::Continue, None, None),
            Some(plan) if options.wait_for_compaction => {
                let (action, result) = plan.execute(observer).await?;
                (action, Some(result), None)
            }
            Some(plan) => (
                plan.running_action(),
                None,
                Some(PendingAuto { plan, gate }),
            ),
        };
        let leaf_id = state.session.read().await.leaf_id().map(str::to_owned);
        Ok(AppendOutcome {
            appended: ids,
            leaf_id,
            action,
            auto,
            pending,
        })
    }

    /// The LLM-ready context at the leaf with token figures (`tokenizer`: one of the setting's
    /// names, default the session's).
    pub async fn context(
        &self,
        session_id: &str,
        tokenizer: Option<&str>,
    ) -> Result<ContextView, EngineError> {
        let state = self.state(session_id)?;
        self.refresh(&state).await?;
        let settings = self.session_settings(&state)?;
        let cache = state.cache_for(&self.counter(&settings, tokenizer)?);
        let session = state.session.read().await;
        Ok(usage::context_view(&session, &settings, &cache))
    }

    /// Token usage of the context at the leaf (spec §9 `getContextUsage`, plus our estimate).
    pub async fn usage(&self, session_id: &str) -> Result<UsageView, EngineError> {
        let state = self.state(session_id)?;
        self.refresh(&state).await?;
        let settings = self.session_settings(&state)?;
        let cache = state.cache_for(&self.counter(&settings, None)?);
        let session = state.session.read().await;
        let tokenizer = cache.counter().name();
        Ok(
            state.usage_view(session.revision(), tokenizer, &settings, || {
                usage::usage_view(&session, &settings, &cache)
            }),
        )
    }

    /// The whole session tree.
    pub async fn tree(&self, session_id: &str) -> Result<TreeView, EngineError> {
        let state = self.state(session_id)?;
        self.refresh(&state).await?;
        let session = state.session.read().await;
        Ok(usage::tree_view(&session))
    }

    /// Sets (or clears, `None`/empty) the label of `target`; returns the label entry.
    pub async fn set_label(
        &self,
        session_id: &str,
        target: &str,
        label: Option<&str>,
        expected_leaf: Option<Option<String>>,
    ) -> Result<Entry, EngineError> {
        let state = self.state(session_id)?;
        state.check_writable()?;
        let _gate = state.write_gate.lock().await;
        let entry = {
            let mut session = state.session.write().await;
            refresh_locked(&state, &mut session)?;
            check_leaf(&session, &expected_leaf)?;
            session
                .set_label(target, label)
                .map_err(entry_error)?
                .clone()
        };
        self.emit(EngineEvent::EntriesAppended {
            session_id: state.id.clone(),
            entries: vec![entry.clone()],
        });
        Ok(entry)
    }

    /// Reads other writers' appends, then builds the environment of an operation on `state`
    /// with the session's settings and context window.
    async fn fresh_compact_env(&self, state: &SessionState) -> Result<CompactEnv, EngineError> {
        self.refresh(state).await?;
        let settings = self.session_settings(state)?;
        let window = {
            let session = state.session.read().await;
            usage::session_window(&session, &settings)
        };
        self.compact_env(state, settings, window)
    }

    /// A manual compaction (reason from `opts`), with the in-progress guard and events.
    pub async fn compact(
        &self,
        session_id: &str,
        opts: CompactOptions,
        cancel: CancellationToken,
        observer: &dyn OperationObserver,
    ) -> Result<CompactOutcome, EngineError> {
        let state = self.state(session_id)?;
        if !opts.preview {
            state.check_writable()?;
        }
        let guard = state
            .ops
            .start(OpKind::Manual, &cancel)
            .ok_or(EngineError::CompactionInProgress)?;
        let operation_id = new_operation_id("compact");
        let mut env = self.fresh_compact_env(&state).await?;
        env.operation_id = operation_id.clone();
        self.emit(EngineEvent::CompactionStarted {
            session_id: state.id.clone(),
            operation_id: operation_id.clone(),
            reason: opts.reason,
        });
        let result =
            super::compact(&state.session, &env, opts, guard.token().clone(), observer).await;
        if let Some(event) = auto::appended_compaction(&state, &result).await {
            self.emit(event);
        }
        let (outcome, aborted, error) = auto::finished(&result);
        self.emit(EngineEvent::CompactionFinished {
            session_id: state.id.clone(),
            operation_id,
            outcome,
            aborted,
            error,
        });
        result
    }

    /// Cancels the running manual and auto compactions of the session (spec §4.17).
    pub async fn abort_compaction(&self, session_id: &str) -> bool {
        self.state(session_id)
            .is_ok_and(|state| state.ops.abort_compaction())
    }

    /// Prunes old tool outputs in the live context (`dry_run`: only report).
    pub async fn prune(
        &self,
        session_id: &str,
        dry_run: bool,
    ) -> Result<PruneOutcome, EngineError> {
        let state = self.state(session_id)?;
        if !dry_run {
            state.check_writable()?;
        }
        let _gate = state.write_gate.lock().await;
        let settings = self.session_settings(&state)?;
        let counter = self.counter(&settings, None)?;
        let mut session = state.session.write().await;
        refresh_locked(&state, &mut session)?;
        let cache = state.cache_for(&counter);
        let outcome = prune::prune_live_cached(&mut session, &cache, dry_run)?;
        if !dry_run {
            state.invalidate_counts(&outcome.entry_ids);
        }
        Ok(outcome)
    }

    /// Moves to `target` in the tree, optionally summarizing the branch left behind.
    pub async fn navigate(
        &self,
        session_id: &str,
        target: &str,
        opts: NavigateOptions,
        cancel: CancellationToken,
        observer: &dyn OperationObserver,
    ) -> Result<NavigateOutcome, EngineError> {
        let state = self.state(session_id)?;
        if !opts.preview {
            state.check_writable()?;
        }
        let guard = state
            .ops
            .start(OpKind::Branch, &cancel)
            .ok_or(EngineError::CompactionInProgress)?;
        let env = self.fresh_compact_env(&state).await?;
        let preview = opts.preview;
        let outcome = super::navigate_tree(
            &state.session,
            &env,
            target,
            opts,
            guard.token().clone(),
            observer,
        )
        .await?;
        if !outcome.cancelled && !outcome.aborted && !preview {
            if let Some(entry) = &outcome.summary_entry {
                self.emit(EngineEvent::EntriesAppended {
                    session_id: state.id.clone(),
                    entries: vec![entry.clone()],
                });
            }
            self.emit(EngineEvent::TreeNavigated {
                session_id: state.id.clone(),
                new_leaf_id: outcome.leaf_id.clone(),
                old_leaf_id: outcome.old_leaf_id.clone(),
                summary_entry: outcome.summary_entry.clone().map(Box::new),
                from_extension: outcome.summary_entry.as_ref().and_then(|e| match e.kind() {
                    EntryKind::BranchSummary(b) => b.from_extension,
                    _ => None,
                }),
            });
        }
        Ok(outcome)
    }

    /// Cancels the running branch summary of the session.
    pub async fn abort_branch_summary(&self, session_id: &str) -> bool {
        self.state(session_id)
            .is_ok_and(|state| state.ops.abort_branch())
    }
}

/// An open session is reused only in the mode it was opened in: a read-only open must not
/// hand out a writable session, nor the reverse.
fn check_open_mode(state: &SessionState, read_only: bool) -> Result<(), EngineError> {
    if state.read_only == read_only {
        return Ok(());
    }
    let mode = if state.read_only {
        "read-only"
    } else {
        "for writing"
    };
    Err(EngineError::InvalidParams(format!(
        "session {} is already open {mode}",
        state.id
    )))
}

/// `Entry <id> not found` from the store becomes the engine's typed error.
fn entry_error(e: SessionError) -> EngineError {
    match e {
        SessionError::EntryNotFound(id) => EngineError::EntryNotFound(id),
        other => EngineError::SessionFile(other),
    }
}

/// Refresh under a held write lock, before every write. Cached token counts stay valid: an
/// entry's content only changes in place when it is pruned, and the cache key includes that.
/// The sync policy is re-read here so a `settings/update` of `storage.sync` applies to
/// sessions that are already open.
pub(crate) fn refresh_locked(
    state: &SessionState,
    session: &mut Session,
) -> Result<(), EngineError> {
    if let Ok(settings) = state.effective_settings() {
        session.set_sync_policy(sync_policy(&settings));
    }
    session.refresh()?;
    Ok(())
}

/// The store's sync policy for `storage.sync`.
pub fn sync_policy(settings: &Settings) -> SyncPolicy {
    match settings.storage.sync {
        StorageSync::Fsync => SyncPolicy::Fsync,
        StorageSync::Os => SyncPolicy::Os,
    }
}

/// The engine stack with `cwd`'s project layer; a broken project file is skipped with a warning.
fn session_stack(base: &SettingsStack, cwd: &str) -> (SettingsStack, Option<String>) {
    if cwd.is_empty() {
        return (base.clone(), None);
    }
    match base.with_project_dir(Path::new(cwd)) {
        Ok(stack) => (stack, None),
        Err(e) => (base.clone(), Some(format!("project settings ignored: {e}"))),
    }
}

/// The `tokenizer` setting's name.
pub fn tokenizer_name(settings: &Settings) -> String {
    match serde_json::to_value(settings.tokenizer) {
        Ok(serde_json::Value::String(s)) => s,
        _ => "o200k".to_owned(),
    }
}

fn visible_count(session: &Session) -> usize {
    session
        .entries()
        .iter()
        .filter(|e| !e.is_leaf_move())
        .count()
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The prompt templates with the user's overrides from `<config dir>/prompts/`; an unreadable
/// override is logged and the embedded templates are used, so a bad file cannot stop the daemon.
fn user_prompts() -> Prompts {
    let dir = crate::settings::config_dir().map(|d| d.join("prompts"));
    Prompts::load(dir.as_deref()).unwrap_or_else(|error| {
        tracing::warn!("prompt overrides not loaded, using the embedded prompts: {error}");
        Prompts::embedded()
    })
}
