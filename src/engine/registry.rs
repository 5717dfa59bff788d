//! The [`Engine`]: every session-level operation of the protocol and the command line goes
//! through here. It owns the settings stack, the event sink, what environments are built from
//! ([`EnvSource`]) and the open sessions ([`SessionTable`]), and delegates: appending to
//! [`super::append`], auto-compaction to [`super::auto`], a compaction with its events to
//! [`super::run`], the algorithms to [`super::compact`], [`super::navigate`] and
//! [`super::prune`].

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use tokio_util::sync::CancellationToken;

use crate::compaction::{Ledger, PIN_CUSTOM_TYPE, UNPIN_CUSTOM_TYPE};
use crate::session::listing::{self, ListCursor};
use crate::session::recall::{self, RecalledEntry, SearchPage, SearchQuery};
use crate::session::{Catalog, ConnectError, Entry, EntryKind};
use crate::settings::{Settings, SettingsStack, StorageBackend};

use super::append::{self, AppendOptions, AppendOutcome, NewEntry};
use super::background::{self, BackgroundStatus};
use super::compact::ArmedCompaction;
use super::env::{ClientSummarizerFactory, EnvSource, token_counter};
use super::events::{BackgroundState, DiscardReason, PauseReason, new_operation_id};
use super::prune::{self, PruneOutcome};
use super::run::{run_armed_preview, run_commit, run_commit_preview, run_compaction};
use super::sessions::{
    Home, ListPage, LoadProgress, SessionInfo, SessionSummary, SessionTable, project_warnings,
    session_stack,
};
use super::state::{OpGuard, OpKind, SessionState, check_leaf};
use super::usage::{self, ContextView, TreeView, UsageView};
use super::{
    CompactEnv, CompactOptions, CompactOutcome, EngineError, EngineEvent, EngineHooks, EventSink,
    NavigateOptions, NavigateOutcome, OperationObserver, SummaryEdit,
};

/// What an agent tells compactd after a turn (`session/observeTurn`); each field absent means
/// "as compactd sees it".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObservedTurn {
    /// The agent's leaf (default: the session's).
    pub leaf_id: Option<String>,
    /// The context size the turn's reply reported (default: the usage of the last reply on
    /// the branch after the latest compaction).
    pub context_tokens: Option<u64>,
    pub context_window: Option<u64>,
    /// The agent's compaction threshold (default: compactd's, from the window).
    pub threshold_tokens: Option<u64>,
}

/// What compactd made of an [`ObservedTurn`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnObservation {
    pub leaf_id: Option<String>,
    pub context_tokens: Option<u64>,
    pub context_window: u64,
    pub threshold_tokens: Option<u64>,
    /// This turn started a background compaction.
    pub started: bool,
    /// The session's background compaction, if one runs or is armed.
    pub background: Option<BackgroundStatus>,
}

/// The context size the latest reply on `path` reported: the last assistant message after the
/// latest compaction that carries usage (an aborted or failed reply does not count).
fn reply_tokens(path: &[&Entry]) -> Option<u64> {
    for entry in path.iter().rev() {
        if matches!(entry.kind(), EntryKind::Compaction(_)) {
            return None;
        }
        if let Some(reply) = entry.message().and_then(|m| m.as_assistant())
            && !reply.is_aborted()
            && !reply.is_error()
            && let Some(usage) = &reply.usage
        {
            return Some(usage.context_tokens());
        }
    }
    None
}

/// The daemon's (or the CLI's) session registry and operations.
pub struct Engine {
    settings: RwLock<SettingsStack>,
    events: Arc<dyn EventSink>,
    env: EnvSource,
    sessions: SessionTable,
    /// Where new sessions go and ids are looked up; `None`: from settings or the platform.
    sessions_dir: Option<PathBuf>,
    /// The sessions' catalog when `storage.backend` names one (a database), connected at
    /// first use.
    store: std::sync::Mutex<Option<Arc<dyn Catalog>>>,
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
        if settings.storage.backend == StorageBackend::File {
            return Ok(Home::Dir(self.sessions_dir()?));
        }
        // A catalog, connected on first use; a failed connection is retried by the next call.
        let mut store = self.store.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(store) = &*store {
            return Ok(Home::Store(Arc::clone(store)));
        }
        let connected = connect_catalog(&settings)?;
        *store = Some(Arc::clone(&connected));
        Ok(Home::Store(connected))
    }

    /// The open session `id`.
    fn state(&self, id: &str) -> Result<Arc<SessionState>, EngineError> {
        self.sessions.get(id)
    }

    /// The settings stack of the open session `id`: the engine's layers and its project layer.
    pub fn session_settings_stack(&self, id: &str) -> Result<SettingsStack, EngineError> {
        Ok(self.state(id)?.settings_stack())
    }

    /// What runs on the open session `id` now, and whether auto-compaction is on for it.
    pub fn activity(&self, id: &str) -> Result<SessionActivity, EngineError> {
        let state = self.state(id)?;
        Ok(SessionActivity {
            compacting: state.ops.is_compacting(),
            summarizing_branch: state.ops.is_summarizing_branch(),
            auto_compaction_enabled: state.effective_settings()?.compaction.enabled,
            background: background::status(&state),
            auto_compaction_paused: state.auto_memory().paused,
        })
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

    /// [`Engine::open`], telling `progress` each step of loading the file while it runs (on a
    /// blocking thread). With `read_only` the file is another program's (an agent that
    /// appends to it): the session is never written, reads and previews see the owner's
    /// appends, and every write fails with [`EngineError::ReadOnly`].
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
    pub async fn tree(
        &self,
        session_id: &str,
        include_entries: bool,
    ) -> Result<TreeView, EngineError> {
        let state = self.state(session_id)?;
        state.load_whole().await?;
        let session = state.session.read().await;
        let mut view = usage::tree_view(&session);
        if include_entries {
            view.entries = view
                .nodes
                .iter()
                .filter_map(|node| session.get(&node.id).cloned())
                .collect();
        }
        Ok(view)
    }

    /// A page of `query`'s hits in session `session_id`, behind compactions and in the blob
    /// store's full texts included (DESIGN §8 "Nothing is gone").
    pub async fn search(
        &self,
        session_id: &str,
        query: SearchQuery,
    ) -> Result<SearchPage, EngineError> {
        let state = self.state(session_id)?;
        // Compacted history is what a partly loaded stored session left on disk.
        state.load_whole().await?;
        let store = super::state::blob_store(&state.effective_settings()?);
        let session = Arc::clone(&state.session).read_owned().await;
        // A pass over every line of a large session: off the runtime.
        super::off_runtime(move || recall::search(&session, store.as_ref(), &query))
            .await
            .map_err(EngineError::from)
    }

    /// Entry `entry_id` of session `session_id` as written, full texts restored; a missing
    /// blob is an error naming it.
    pub async fn read_entry(
        &self,
        session_id: &str,
        entry_id: &str,
    ) -> Result<RecalledEntry, EngineError> {
        let state = self.state(session_id)?;
        state.load_whole().await?;
        let store = super::state::blob_store(&state.effective_settings()?);
        let session = Arc::clone(&state.session).read_owned().await;
        let entry_id = entry_id.to_owned();
        super::off_runtime(move || recall::read_entry(&session, store.as_ref(), &entry_id))
            .await
            .map_err(EngineError::from)
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
        let label = EntryKind::Label {
            target_id: target.to_owned(),
            label: label.filter(|l| !l.is_empty()).map(str::to_owned),
        };
        let entry = {
            let mut session = state.session.write().await;
            let written =
                append::write_batch(&state, &mut session, vec![label.into()], expected_leaf)?;
            written
                .into_iter()
                .next()
                .ok_or_else(|| EngineError::EntryNotFound(target.to_owned()))?
        };
        self.events.emit(EngineEvent::EntriesAppended {
            session_id: state.id.clone(),
            entries: vec![entry.clone()],
        });
        Ok(entry)
    }

    /// Undoes a compaction or an undo (`session::undo`): appends the undo's branch at the
    /// session's position under the write gate and reports the entries written.
    pub async fn undo_compaction(
        &self,
        session_id: &str,
        entry_id: Option<&str>,
        expected_leaf: Option<Option<String>>,
    ) -> Result<super::UndoOutcome, EngineError> {
        let state = self.state(session_id)?;
        state.check_writable()?;
        let _gate = state.write_gate.lock().await;
        let outcome = {
            let mut session = state.session.write().await;
            state.refresh_locked(&mut session)?;
            super::undo_compaction(&mut session, entry_id, &expected_leaf)?
        };
        self.events.emit(EngineEvent::EntriesAppended {
            session_id: state.id.clone(),
            entries: outcome.entries.clone(),
        });
        Ok(outcome)
    }

    /// The progress ledger of the session's branch (`compaction::Ledger`), derived from the
    /// newest compaction's snapshot and the entries after it.
    pub async fn ledger(&self, session_id: &str) -> Result<Ledger, EngineError> {
        let state = self.state(session_id)?;
        state.refresh().await?;
        let session = Arc::clone(&state.session).read_owned().await;
        Ok(super::off_runtime(move || Ledger::derive(&session.path_to_leaf())).await)
    }

    /// Pins `text`: a `custom` entry (`compactd.pin`) at the leaf, which the reference keeps
    /// but leaves out of the context. The pin's id is the entry's id.
    pub async fn pin(&self, session_id: &str, text: &str) -> Result<Entry, EngineError> {
        if text.trim().is_empty() {
            return Err(EngineError::InvalidParams("a pin needs some text".into()));
        }
        let kind = EntryKind::Custom {
            custom_type: PIN_CUSTOM_TYPE.to_owned(),
            data: Some(serde_json::json!({ "text": text })),
        };
        self.append_one(session_id, kind).await
    }

    /// Unpins `pin_id` (a pin on the branch): a `custom` entry (`compactd.unpin`) at the leaf.
    pub async fn unpin(&self, session_id: &str, pin_id: &str) -> Result<Entry, EngineError> {
        let pinned = self
            .ledger(session_id)
            .await?
            .pins
            .iter()
            .any(|p| p.pin_id == pin_id);
        if !pinned {
            return Err(EngineError::InvalidParams(format!(
                "{pin_id} is not a pin on the session's branch"
            )));
        }
        let kind = EntryKind::Custom {
            custom_type: UNPIN_CUSTOM_TYPE.to_owned(),
            data: Some(serde_json::json!({ "pinId": pin_id })),
        };
        self.append_one(session_id, kind).await
    }

    /// Appends one entry at the leaf under the write gate and reports it.
    async fn append_one(&self, session_id: &str, kind: EntryKind) -> Result<Entry, EngineError> {
        let state = self.state(session_id)?;
        state.check_writable()?;
        let _gate = state.write_gate.lock().await;
        let entry = {
            let mut session = state.session.write().await;
            let written = append::write_batch(&state, &mut session, vec![kind.into()], None)?;
            written
                .into_iter()
                .next()
                .ok_or_else(|| EngineError::SessionNotFound(session_id.to_owned()))?
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

    /// Takes session `session_id`'s compaction slot for a manual compaction (only a
    /// `preview` may run on a read-only session), before anything of it starts: the
    /// compaction runs with [`Engine::compact`]; `cancel` cancels it, as does
    /// `session/abortCompaction`. `CompactionInProgress` while another compaction runs.
    pub fn claim_compaction(
        &self,
        session_id: &str,
        preview: bool,
        cancel: &CancellationToken,
    ) -> Result<CompactionClaim, EngineError> {
        self.claim(session_id, OpKind::Manual, preview, cancel)
            .map(CompactionClaim)
    }

    /// Takes session `session_id`'s branch-summary slot for a navigation (see
    /// [`Engine::claim_compaction`]); it runs with [`Engine::navigate`].
    pub fn claim_navigation(
        &self,
        session_id: &str,
        preview: bool,
        cancel: &CancellationToken,
    ) -> Result<NavigationClaim, EngineError> {
        self.claim(session_id, OpKind::Branch, preview, cancel)
            .map(NavigationClaim)
    }

    fn claim(
        &self,
        session_id: &str,
        kind: OpKind,
        preview: bool,
        cancel: &CancellationToken,
    ) -> Result<Claim, EngineError> {
        let state = self.state(session_id)?;
        if !preview {
            state.check_writable()?;
        }
        let guard = state
            .ops
            .start(kind, cancel)
            .ok_or(EngineError::CompactionInProgress)?;
        Ok(Claim { state, guard })
    }

    /// A manual compaction (reason from `opts`) in the slot `claim` holds, with its events.
    pub async fn compact(
        &self,
        claim: CompactionClaim,
        opts: CompactOptions,
        observer: &dyn OperationObserver,
    ) -> Result<CompactOutcome, EngineError> {
        let Claim { state, guard } = claim.0;
        let mut env = self.fresh_env(&state).await?;
        env.operation_id = new_operation_id("compact");
        let preview = opts.preview;
        if opts.armed_can_serve() && (preview || opts.leaf_id.is_none()) {
            let leaf = opts.leaf_id.as_deref();
            if let Some((background_id, armed)) =
                self.armed_for(&state, &env, leaf, guard.token()).await
            {
                let events = self.events.as_ref();
                let run = if preview {
                    let keep = opts.leaf_id.is_none() && !state.read_only;
                    run_armed_preview(events, &state, &env, armed, opts.leaf_id, keep, guard).await
                } else {
                    run_commit(events, &state, &env, armed, guard).await
                };
                let report = match &run {
                    Ok(_) if preview => Ok(BackgroundState::Previewed),
                    Ok(_) => Ok(BackgroundState::Committed),
                    Err(EngineError::Cancelled(_)) => Err((DiscardReason::Aborted, None)),
                    Err(e) => Err((DiscardReason::Failed, Some(e.to_string()))),
                };
                background::report(&state, events, &background_id, report);
                let mut outcome = run?;
                outcome.background_operation_id = Some(background_id);
                if !preview {
                    state.auto_memory().resume();
                }
                outcome.warnings = project_warnings(&state.settings_stack());
                return Ok(outcome);
            }
            if guard.token().is_cancelled() {
                return Err(EngineError::compaction_cancelled());
            }
        }
        if !preview {
            // The armed result would summarise what this compaction summarises.
            background::discard(
                &state,
                self.events.as_ref(),
                DiscardReason::ManualCompaction,
            );
        }
        let mut outcome =
            run_compaction(self.events.as_ref(), &state, &env, opts, guard, observer).await?;
        if !preview {
            // The user acted: a paused automatic compaction resumes.
            state.auto_memory().resume();
        }
        outcome.warnings = project_warnings(&state.settings_stack());
        Ok(outcome)
    }

    /// The session's armed background compaction, taken for a compaction at `leaf` (the
    /// session's leaf when `None`), waiting for it while it runs, when it fits there: the
    /// leaf extends its snapshot with no compaction since, and the context after it stays
    /// within the target after a threshold compaction. Otherwise it is discarded (with the
    /// reason) and `None`.
    async fn armed_for(
        &self,
        state: &SessionState,
        env: &CompactEnv,
        leaf: Option<&str>,
        cancel: &CancellationToken,
    ) -> Option<(String, ArmedCompaction)> {
        let events = self.events.as_ref();
        let (background_id, armed) =
            background::take_for_commit(state, events, leaf, cancel).await?;
        let limit = env
            .settings
            .threshold_tokens(env.context_window)
            .map(super::auto::target_after);
        let fits = {
            let session = state.session.read().await;
            let path = match leaf {
                Some(id) => session.path_to(id),
                None => session.path_to_leaf(),
            };
            armed.fits(&path).and_then(|()| {
                let after = armed.tokens_after_on(&path, env.counter.as_ref());
                match limit {
                    Some(limit) if after > limit => Err(DiscardReason::DoesNotFit),
                    _ => Ok(()),
                }
            })
        };
        match fits {
            Ok(()) => Some((background_id, armed)),
            Err(why) => {
                background::report(state, events, &background_id, Err((why, None)));
                None
            }
        }
    }

    /// An agent's turn (`session/observeTurn`): reads what the agent wrote since, measures the
    /// context at its leaf (the turn's reported size, else the last reply's usage), and starts
    /// a background compaction of the agent's branch when that size is in the lead band
    /// `[threshold - lead, threshold)` (the agent's threshold when given) and none runs.
    pub async fn observe_turn(
        &self,
        session_id: &str,
        turn: ObservedTurn,
    ) -> Result<TurnObservation, EngineError> {
        let state = self.state(session_id)?;
        let settings = state.effective_settings()?;
        if let Some(id) = &turn.leaf_id {
            state.ensure_paths(&[id.as_str()]).await?;
        }
        let (leaf, tokens, window) = {
            let mut session = state.session.write().await;
            state.refresh_locked(&mut session)?;
            if let Some(id) = &turn.leaf_id
                && session.get(id).is_none_or(Entry::is_leaf_move)
            {
                return Err(EngineError::EntryNotFound(id.clone()));
            }
            let leaf = turn
                .leaf_id
                .clone()
                .or_else(|| session.leaf_id().map(str::to_owned));
            let path = leaf
                .as_deref()
                .map(|id| session.path_to(id))
                .unwrap_or_default();
            let window = turn
                .context_window
                .unwrap_or_else(|| usage::session_window(&session, &settings));
            (
                leaf,
                turn.context_tokens.or_else(|| reply_tokens(&path)),
                window,
            )
        };
        // The agent's threshold and window contradict each other; against compactd's own
        // window (a guess when the agent did not say) the agent's threshold stands.
        if let (Some(threshold), Some(window)) = (turn.threshold_tokens, turn.context_window)
            && threshold > window
        {
            return Err(EngineError::InvalidParams(format!(
                "thresholdTokens ({threshold}) is above contextWindow ({window}): the context \
                 would overflow before it reached the threshold; give the agent's threshold \
                 (its window minus its reserve) or leave it out for compactd's"
            )));
        }
        let threshold = turn
            .threshold_tokens
            .or_else(|| settings.threshold_tokens(window));
        let background_settings = &settings.compaction.background;
        let in_band = match (tokens, threshold) {
            (Some(tokens), Some(threshold)) => {
                tokens < threshold
                    && tokens >= threshold.saturating_sub(background_settings.lead(threshold))
            }
            _ => false,
        };
        let may_start = in_band
            && settings.compaction.enabled
            && background_settings.enabled
            && !state.ops.is_compacting()
            && state.auto_memory().paused.is_none();
        let started = if may_start {
            let env = self.env.env(&state.id, settings.clone(), window, None)?;
            background::start(&state, leaf.clone(), true, env, Arc::clone(&self.events))
        } else {
            false
        };
        Ok(TurnObservation {
            leaf_id: leaf,
            context_tokens: tokens,
            context_window: window,
            threshold_tokens: threshold,
            started,
            background: background::status(&state),
        })
    }

    /// Writes the compaction previewed as `preview_id` (see [`super::preview`]) in the slot
    /// `claim` holds, with the user's text when `edit` has some, bracketed by the events of a
    /// manual compaction. `PreviewNotFound` for an unknown or expired id; `LeafMoved` (and
    /// nothing written) when the branch changed since the preview.
    pub async fn commit_compaction(
        &self,
        claim: CompactionClaim,
        preview_id: &str,
        edit: SummaryEdit,
    ) -> Result<CompactOutcome, EngineError> {
        if edit.summary.as_deref().is_some_and(|s| s.trim().is_empty()) {
            return Err(EngineError::InvalidParams(
                "summary is empty: give the text to write, or leave summary out to keep the \
                 previewed one"
                    .into(),
            ));
        }
        let Claim { state, guard } = claim.0;
        let taken = state
            .previews()
            .take(preview_id)
            .ok_or_else(|| EngineError::PreviewNotFound(preview_id.to_owned()))?;
        let mut env = match self.fresh_env(&state).await {
            Ok(env) => env,
            Err(e) => {
                state.previews().put_back(preview_id.to_owned(), taken);
                return Err(e);
            }
        };
        env.operation_id = new_operation_id("compact");
        let mut outcome =
            run_commit_preview(self.events.as_ref(), &state, &env, taken, edit, guard).await?;
        // As after a manual compaction: an armed background result summarises what this one
        // did, and a paused automatic compaction resumes.
        background::discard(
            &state,
            self.events.as_ref(),
            DiscardReason::ManualCompaction,
        );
        state.auto_memory().resume();
        outcome.warnings = project_warnings(&state.settings_stack());
        Ok(outcome)
    }

    /// Cancels the running manual and auto compactions of the session and drops its
    /// background one; whether one ran.
    pub fn abort_compaction(&self, session_id: &str) -> Result<bool, EngineError> {
        let state = self.state(session_id)?;
        let running = state.ops.abort_compaction();
        let background = background::discard(&state, self.events.as_ref(), DiscardReason::Aborted);
        Ok(running || background)
    }

    /// Prunes old tool outputs in the live context (`dry_run`: only report). Refused while a
    /// compaction runs; `expected_leaf` is checked under the writers' lock, after other
    /// writers' appends are read, as an append checks it.
    pub async fn prune(
        &self,
        session_id: &str,
        dry_run: bool,
        expected_leaf: Option<Option<String>>,
    ) -> Result<PruneOutcome, EngineError> {
        let state = self.state(session_id)?;
        if state.ops.is_compacting() {
            return Err(EngineError::CompactionInProgress);
        }
        if !dry_run {
            state.check_writable()?;
        }
        let _gate = state.write_gate.lock().await;
        let settings = state.effective_settings()?;
        let counter = token_counter(&settings, None)?;
        let mut session = state.session.write().await;
        state.refresh_locked(&mut session)?;
        check_leaf(&session, &expected_leaf)?;
        let cache = state.cache_for(&counter);
        let outcome = prune::prune_live_cached(&mut session, &cache, dry_run)?;
        if !dry_run && !outcome.entry_ids.is_empty() {
            state.invalidate_counts(&outcome.entry_ids);
            // The branch changed under the previews.
            state.previews().mark_stale();
        }
        Ok(outcome)
    }

    /// Moves to `target` in the tree in the slot `claim` holds, optionally summarizing the
    /// branch left behind.
    pub async fn navigate(
        &self,
        claim: NavigationClaim,
        target: &str,
        opts: NavigateOptions,
        observer: &dyn OperationObserver,
    ) -> Result<NavigateOutcome, EngineError> {
        let Claim { state, guard } = claim.0;
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
            state.previews().mark_stale();
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

    /// Cancels the running branch summary of the session; whether one ran.
    pub fn abort_branch_summary(&self, session_id: &str) -> Result<bool, EngineError> {
        Ok(self.state(session_id)?.ops.abort_branch())
    }
}

/// An operation's place on its session, taken before anything of it starts: the session is
/// open, writable unless the operation only previews, and no operation of its kind runs on it.
/// The slot is freed when the claim (or the operation it went to) is dropped.
struct Claim {
    state: Arc<SessionState>,
    guard: OpGuard,
}

/// The slot of a manual compaction ([`Engine::claim_compaction`]).
pub struct CompactionClaim(Claim);

/// The slot of a navigation and its branch summary ([`Engine::claim_navigation`]).
pub struct NavigationClaim(Claim);

/// What runs on a session, as `session/usage` reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionActivity {
    /// A manual or automatic compaction.
    pub compacting: bool,
    pub summarizing_branch: bool,
    /// `compaction.enabled` in the session's settings.
    pub auto_compaction_enabled: bool,
    /// The background (speculative) compaction, running or armed.
    pub background: Option<BackgroundStatus>,
    /// Why automatic compaction is paused for the session, if it is.
    pub auto_compaction_paused: Option<PauseReason>,
}

/// Connects to the catalog the settings choose (`storage.backend`); an error when they choose
/// session files.
pub fn connect_catalog(settings: &Settings) -> Result<Arc<dyn Catalog>, EngineError> {
    match crate::session::connect(settings) {
        Ok(Some(catalog)) => Ok(catalog),
        Ok(None) => Err(EngineError::Settings(
            "storage.backend is \"file\": session files have no catalog to connect to".into(),
        )),
        Err(ConnectError::Settings(message)) => Err(EngineError::Settings(message)),
        Err(ConnectError::Session(e)) => Err(e.into()),
    }
}
