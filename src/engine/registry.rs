//! The [`Engine`]: every session-level operation of the protocol and the command line goes
//! through here. It owns the settings stack, the event sink, what environments are built from
//! ([`EnvSource`]) and the open sessions ([`SessionTable`]), and delegates: appending to
//! [`super::append`], auto-compaction to [`super::auto`], a compaction with its events to
//! [`super::run`], the algorithms to [`super::compact`], [`super::navigate`] and
//! [`super::prune`].

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use tokio_util::sync::CancellationToken;

use crate::session::listing::{self, ListCursor};
use crate::session::postgres::{PgOptions, PgStore};
use crate::session::{Entry, EntryKind};
use crate::settings::{Settings, SettingsStack, StorageBackend};

use super::append::{self, AppendOptions, AppendOutcome, NewEntry};
use super::env::{ClientSummarizerFactory, EnvSource, PromptSource, token_counter};
use super::events::new_operation_id;
use super::prune::{self, PruneOutcome};
use super::run::run_compaction;
use super::sessions::{
    Home, ListPage, LoadProgress, SessionInfo, SessionSummary, SessionTable, session_stack,
};
use super::state::{OpKind, SessionState, check_leaf};
use super::usage::{self, ContextView, TreeView, UsageView};
use super::{
    CompactEnv, CompactOptions, CompactOutcome, EngineError, EngineEvent, EngineHooks, EventSink,
    NavigateOptions, NavigateOutcome, OperationObserver, Prompts,
};

/// The daemon's (or the CLI's) session registry and operations.
pub struct Engine {
    settings: RwLock<SettingsStack>,
    events: Arc<dyn EventSink>,
    env: EnvSource,
    sessions: SessionTable,
    /// Where new sessions go and ids are looked up; `None`: from settings or the platform.
    sessions_dir: Option<PathBuf>,
    /// The session database (`storage.backend = "postgres"`), connected at first use.
    store: std::sync::Mutex<Option<Arc<PgStore>>>,
}

fn read_lock<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    // The stack is replaced whole; a panicking writer cannot leave it half-set.
    lock.read().unwrap_or_else(|p| p.into_inner())
}

fn write_lock<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|p| p.into_inner())
}

impl Engine {
    /// An engine with `settings` (user and `initialize` layers) reporting to `events`. Prompt
    /// templates come from `<config dir>/prompts/` where the user put overrides, else the
    /// embedded ones.
    pub fn new(settings: SettingsStack, events: Arc<dyn EventSink>) -> Self {
        Engine {
            settings: RwLock::new(settings),
            sessions: SessionTable::new(Arc::clone(&events)),
            events,
            env: EnvSource::standalone(),
            sessions_dir: None,
            store: Default::default(),
        }
    }

    /// Puts new sessions in (and looks ids up in) `dir` instead of the configured directory.
    pub fn with_sessions_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.sessions_dir = Some(dir.into());
        self
    }

    /// Uses exactly `prompts` for summaries instead of the user's overrides.
    pub fn with_prompts(self, prompts: Arc<Prompts>) -> Self {
        self.env.set_prompts(PromptSource::Fixed(prompts));
        self
    }

    pub fn set_hooks(&self, hooks: Arc<dyn EngineHooks>) {
        self.env.set_hooks(hooks);
    }

    /// A client summarizer built per session, so its requests can name the session.
    pub fn set_client_summarizer_factory(&self, factory: Option<ClientSummarizerFactory>) {
        self.env.set_client_summarizer_factory(factory);
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
        candidate
            .effective()
            .map_err(|e| EngineError::Settings(e.to_string()))?;
        *guard = candidate;
        let base = guard.clone();
        drop(guard);
        for state in self.sessions.all() {
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
            .map_err(|e| EngineError::Settings(e.to_string()))?;
        if let Some(dir) = settings.storage.sessions_dir {
            return Ok(dir);
        }
        listing::sessions_dir().ok_or_else(|| {
            EngineError::Settings("no data directory; set storage.sessionsDir".into())
        })
    }

    /// Where new sessions go and plain ids are found: the sessions directory, or the database
    /// of `storage.backend = "postgres"` (connected, and migrated, at first use).
    pub(crate) fn home(&self) -> Result<Home, EngineError> {
        let settings = read_lock(&self.settings)
            .effective()
            .map_err(|e| EngineError::Settings(e.to_string()))?;
        match settings.storage.backend {
            StorageBackend::File => Ok(Home::Dir(self.sessions_dir()?)),
            StorageBackend::Postgres => Ok(Home::Store(self.store(&settings)?)),
        }
    }

    /// The session database, connecting on first use; a failed connection is retried by the
    /// next call.
    pub fn store(&self, settings: &Settings) -> Result<Arc<PgStore>, EngineError> {
        let mut store = self.store.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(store) = &*store {
            return Ok(Arc::clone(store));
        }
        let connected = connect_store(settings)?;
        *store = Some(Arc::clone(&connected));
        Ok(connected)
    }

    /// The open session `id`.
    pub(crate) fn state(&self, id: &str) -> Result<Arc<SessionState>, EngineError> {
        self.sessions.get(id)
    }

    /// Effective settings of a session (engine layers + its project layer).
    pub(crate) fn session_settings(&self, state: &SessionState) -> Result<Settings, EngineError> {
        state.effective_settings()
    }

    /// Creates a session for `cwd`: at `path` (a new `.jsonl` file) or in the sessions
    /// directory under the default naming scheme.
    pub async fn create(
        &self,
        cwd: &Path,
        path: Option<PathBuf>,
        title: Option<String>,
    ) -> Result<SessionInfo, EngineError> {
        let base = self.settings();
        self.sessions
            .create(&base, &|| self.home(), cwd, path, title)
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
        let source = self.state(session_id)?;
        let base = self.settings();
        let dir = || self.home();
        self.sessions
            .fork(&base, &dir, &source, entry_id, path, title)
            .await
    }

    /// Opens a session by `.jsonl` path or by id (an open session, or a file in the sessions
    /// directory). Opening never writes to the file.
    pub async fn open(&self, path_or_id: &str) -> Result<SessionInfo, EngineError> {
        self.open_with(path_or_id, false, Arc::new(|_| {})).await
    }

    /// [`Engine::open`] for a file another program owns (an agent that appends to it): the
    /// session is never written, reads and previews see the owner's appends, and every write
    /// fails with [`EngineError::ReadOnly`].
    pub async fn open_read_only(&self, path_or_id: &str) -> Result<SessionInfo, EngineError> {
        self.open_with(path_or_id, true, Arc::new(|_| {})).await
    }

    /// [`Engine::open`] or, with `read_only`, [`Engine::open_read_only`], telling `progress`
    /// each step of loading the file while it runs (on a blocking thread).
    pub async fn open_with(
        &self,
        path_or_id: &str,
        read_only: bool,
        progress: LoadProgress,
    ) -> Result<SessionInfo, EngineError> {
        let base = self.settings();
        self.sessions
            .open(&base, &|| self.home(), path_or_id, read_only, progress)
            .await
    }

    /// A page of the sessions in the sessions directory or the database (only those of `cwd`
    /// when given), most recently modified first, with the cursor of the next page when more
    /// follow.
    pub async fn list(
        &self,
        cwd: Option<&Path>,
        page: ListPage,
    ) -> Result<(Vec<SessionSummary>, Option<ListCursor>), EngineError> {
        self.sessions.list(self.home()?, cwd, page)
    }

    /// Forgets session `id` (running operations keep their own handle and finish).
    pub async fn close(&self, id: &str) -> Result<(), EngineError> {
        self.sessions.close(id)
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
        append::append(
            &state,
            entries,
            options,
            cancel,
            observer,
            &self.env,
            &self.events,
        )
        .await
    }

    /// The LLM-ready context at the leaf with token figures (`tokenizer`: one of the setting's
    /// names, default the session's).
    pub async fn context(
        &self,
        session_id: &str,
        tokenizer: Option<&str>,
    ) -> Result<ContextView, EngineError> {
        let state = self.state(session_id)?;
        state.refresh().await?;
        let settings = state.effective_settings()?;
        let cache = state.cache_for(&token_counter(&settings, tokenizer)?);
        // Seconds on a large session: built on a blocking thread, under the read lock.
        let session = Arc::clone(&state.session).read_owned().await;
        Ok(super::off_runtime(move || usage::context_view(&session, &settings, &cache)).await)
    }

    /// About how many bytes of memory building the session's context as JSON takes, for a
    /// caller that must budget memory before building it: its estimated tokens at 32 bytes
    /// each (about 4 characters a token, and the messages copied, then as JSON values, then
    /// as text); images count as their token cost.
    pub async fn context_size_hint(&self, session_id: &str) -> Result<u64, EngineError> {
        let usage = self.usage(session_id).await?;
        Ok(usage.estimated_tokens.saturating_mul(32))
    }

    /// Token usage of the context at the leaf (the reference's `getContextUsage`, plus our
    /// estimate).
    pub async fn usage(&self, session_id: &str) -> Result<UsageView, EngineError> {
        let state = self.state(session_id)?;
        state.refresh().await?;
        let settings = state.effective_settings()?;
        let cache = state.cache_for(&token_counter(&settings, None)?);
        // Counting a large session's tokens the first time takes seconds: off the runtime.
        let session = Arc::clone(&state.session).read_owned().await;
        Ok(super::off_runtime(move || {
            let tokenizer = cache.counter().name();
            state.usage_view(session.revision(), tokenizer, &settings, || {
                usage::usage_view(&session, &settings, &cache)
            })
        })
        .await)
    }

    /// The whole session tree.
    pub async fn tree(&self, session_id: &str) -> Result<TreeView, EngineError> {
        let state = self.state(session_id)?;
        state.load_whole().await?;
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
            state.refresh_locked(&mut session)?;
            check_leaf(&session, &expected_leaf)?;
            session
                .set_label(target, label)
                .map_err(EngineError::from_lookup)?
                .clone()
        };
        self.events.emit(EngineEvent::EntriesAppended {
            session_id: state.id.clone(),
            entries: vec![entry.clone()],
        });
        Ok(entry)
    }

    /// Reads other writers' appends, then builds the environment of an operation on `state`
    /// with the session's settings and context window.
    async fn fresh_env(&self, state: &SessionState) -> Result<CompactEnv, EngineError> {
        state.refresh().await?;
        let settings = state.effective_settings()?;
        let window = {
            let session = state.session.read().await;
            usage::session_window(&session, &settings)
        };
        self.env.env(&state.id, settings, window, None)
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
        let mut env = self.fresh_env(&state).await?;
        env.operation_id = new_operation_id("compact");
        run_compaction(self.events.as_ref(), &state, &env, opts, guard, observer).await
    }

    /// Cancels the running manual and auto compactions of the session.
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
        let settings = state.effective_settings()?;
        let counter = token_counter(&settings, None)?;
        let mut session = state.session.write().await;
        state.refresh_locked(&mut session)?;
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
        let env = self.fresh_env(&state).await?;
        // The paths from both ends to where they meet (the rest of a partly loaded session
        // when they leave the loaded part).
        let mut ends = vec![target];
        ends.extend(opts.from_leaf_id.as_deref());
        state.ensure_paths(&ends).await?;
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
                self.events.emit(EngineEvent::EntriesAppended {
                    session_id: state.id.clone(),
                    entries: vec![entry.clone()],
                });
            }
            self.events.emit(EngineEvent::TreeNavigated {
                session_id: state.id.clone(),
                new_leaf_id: outcome.leaf_id.clone(),
                old_leaf_id: outcome.old_leaf_id.clone(),
                summary_entry: outcome.summary_entry.clone().map(Box::new),
                from_extension: outcome.summary_entry.as_ref().and_then(|e| match e.kind() {
                    EntryKind::BranchSummary(b) => b.from_extension,
                    _ => None,
                }),
                report: outcome.report.clone().map(Box::new),
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

/// Connects to the database the settings name (`storage.postgres`).
pub fn connect_store(settings: &Settings) -> Result<Arc<PgStore>, EngineError> {
    let pg = &settings.storage.postgres;
    let url = pg.resolved_url().ok_or_else(|| {
        EngineError::Settings(format!(
            "storage.backend is \"postgres\" but neither storage.postgres.url nor ${} is set",
            pg.url_env
        ))
    })?;
    let options = PgOptions {
        url,
        pool_size: pg.pool_size,
        timeout: std::time::Duration::from_millis(pg.timeout_ms.max(1)),
        fresh_reads: pg.fresh_reads,
    };
    PgStore::connect(&options)
        .map_err(|e| crate::session::SessionError::Storage(e.to_string()).into())
}
