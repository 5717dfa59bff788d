//! Per-session state kept by the registry: the shared session, its settings stack (with the
//! session's project layer), a token cache, the running operations and the auto-compaction
//! memory.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio_util::sync::CancellationToken;

use crate::session::{Session, SyncPolicy};
use crate::settings::{Settings, SettingsStack, StorageSync};
use crate::tokens::{TokenCache, TokenCounter};

use super::background::run::BackgroundRun;
use super::events::PauseReason;
use super::preview::PreviewStore;
use super::usage::UsageView;
use super::{EngineError, SharedSession};

/// What auto-compaction remembers between runs on one session.
#[derive(Debug, Default, Clone)]
pub struct AutoMemory {
    /// Ids of the compaction entries written by overflow recovery.
    pub overflow_recoveries: HashSet<String>,
    /// Assistant replies since the latest automatic compaction (`None`: none yet).
    pub replies_since_auto: Option<u32>,
    /// How many automatic compactions in a row were due again within
    /// [`THRASH_TURNS`] replies of the one before.
    pub quick_refills: u32,
    /// How many automatic compactions in a row failed.
    pub consecutive_failures: u32,
    /// Set when automatic compaction paused for this session, until the user acts.
    pub paused: Option<PauseReason>,
}

/// A compaction due again within this many replies of the one before counts as a quick refill.
pub const THRASH_TURNS: u32 = 3;
/// Quick refills in a row, or failed automatic compactions in a row, that pause automatic
/// compaction.
pub const PAUSE_AFTER: u32 = 3;

impl AutoMemory {
    /// An assistant reply was appended.
    pub fn count_reply(&mut self) {
        if let Some(n) = &mut self.replies_since_auto {
            *n = n.saturating_add(1);
        }
    }

    /// An automatic compaction is due: counts a quick refill (or resets the count); returns
    /// the pause it leads to, if any.
    pub fn compaction_due(&mut self) -> Option<PauseReason> {
        match self.replies_since_auto {
            Some(n) if n <= THRASH_TURNS => self.quick_refills += 1,
            _ => self.quick_refills = 0,
        }
        if self.quick_refills >= PAUSE_AFTER {
            self.paused = Some(PauseReason::Thrashing);
        }
        self.paused
    }

    /// An automatic compaction ended: written (`true`) or failed (`false`). Returns the pause
    /// it leads to, if any.
    pub fn compaction_ended(&mut self, written: bool) -> Option<PauseReason> {
        if written {
            self.consecutive_failures = 0;
            self.replies_since_auto = Some(0);
        } else {
            self.consecutive_failures += 1;
            if self.consecutive_failures >= PAUSE_AFTER {
                self.paused = Some(PauseReason::RepeatedFailures);
            }
        }
        self.paused
    }

    /// The user acted (a manual compaction, a settings change): automatic compaction resumes
    /// with fresh counts.
    pub fn resume(&mut self) {
        self.quick_refills = 0;
        self.consecutive_failures = 0;
        self.replies_since_auto = None;
        self.paused = None;
    }
}

/// Which slot a running operation occupies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Manual,
    Auto,
    Branch,
}

#[derive(Debug, Default)]
struct Slots {
    manual: Option<(u64, CancellationToken)>,
    auto: Option<(u64, CancellationToken)>,
    branch: Option<(u64, CancellationToken)>,
}

impl Slots {
    fn slot(&mut self, kind: OpKind) -> &mut Option<(u64, CancellationToken)> {
        match kind {
            OpKind::Manual => &mut self.manual,
            OpKind::Auto => &mut self.auto,
            OpKind::Branch => &mut self.branch,
        }
    }
}

/// The operations running on one session, each with its own cancellation token (spec §13 #4:
/// a run never clears another run's token).
#[derive(Debug, Default)]
pub struct RunningOps {
    slots: Mutex<Slots>,
    next: AtomicU64,
}

/// Holds an operation's slot; frees it on drop, only if the slot still holds this run.
#[derive(Debug)]
pub struct OpGuard {
    ops: Arc<RunningOps>,
    kind: OpKind,
    run: u64,
    token: CancellationToken,
}

impl OpGuard {
    /// The run's token: cancelled by the abort calls, or by the caller's own token.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }
}

impl Drop for OpGuard {
    fn drop(&mut self) {
        let mut slots = self.ops.lock();
        let slot = slots.slot(self.kind);
        if slot.as_ref().is_some_and(|(run, _)| *run == self.run) {
            *slot = None;
        }
    }
}

impl RunningOps {
    fn lock(&self) -> MutexGuard<'_, Slots> {
        // The slots are plain data: a panic while holding the lock leaves them consistent.
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts an operation of `kind` whose token is a child of `parent` (so cancelling the
    /// caller's request cancels the run too). `None` when a compaction (manual or auto) is
    /// already running and `kind` is a compaction, or a branch summary runs and `kind` is one.
    pub fn start(self: &Arc<Self>, kind: OpKind, parent: &CancellationToken) -> Option<OpGuard> {
        let mut slots = self.lock();
        let busy = match kind {
            OpKind::Manual | OpKind::Auto => slots.manual.is_some() || slots.auto.is_some(),
            OpKind::Branch => slots.branch.is_some(),
        };
        if busy {
            return None;
        }
        let run = self.next.fetch_add(1, Ordering::Relaxed);
        let token = parent.child_token();
        *slots.slot(kind) = Some((run, token.clone()));
        Some(OpGuard {
            ops: Arc::clone(self),
            kind,
            run,
            token,
        })
    }

    /// Cancels the running manual and auto compactions; whether there was one.
    pub fn abort_compaction(&self) -> bool {
        let slots = self.lock();
        let mut any = false;
        for (_, token) in [&slots.manual, &slots.auto].into_iter().flatten() {
            token.cancel();
            any = true;
        }
        any
    }

    /// Cancels the running branch summary; whether there was one.
    pub fn abort_branch(&self) -> bool {
        let slots = self.lock();
        slots.branch.as_ref().map(|(_, t)| t.cancel()).is_some()
    }

    /// Whether a manual or auto compaction is running.
    pub fn is_compacting(&self) -> bool {
        let slots = self.lock();
        slots.manual.is_some() || slots.auto.is_some()
    }

    /// Whether a branch summary (navigation) is running.
    pub fn is_summarizing_branch(&self) -> bool {
        self.lock().branch.is_some()
    }
}

/// One open session.
pub struct SessionState {
    pub id: String,
    pub path: PathBuf,
    /// The header's working directory (its project settings layer).
    pub cwd: String,
    pub session: SharedSession,
    /// The engine's stack with this session's project layer (`<cwd>/.compactd/settings.json`),
    /// and its effective settings.
    settings: Mutex<(SettingsStack, Option<Settings>)>,
    /// Token counts per entry, one cache per counter name.
    caches: Mutex<HashMap<String, Arc<TokenCache>>>,
    pub ops: Arc<RunningOps>,
    auto: Mutex<AutoMemory>,
    /// The background (speculative) compaction, at most one.
    background: Mutex<Option<BackgroundRun>>,
    /// Previewed compactions kept for `session/commitCompaction` (bounded; dropped on close).
    previews: Mutex<PreviewStore>,
    /// Serialises mutating calls (append + auto-compaction, prune, label) on this session so
    /// they apply in arrival order. Shared so a background auto-compaction can hold it.
    pub write_gate: Arc<tokio::sync::Mutex<()>>,
    /// The file's format version when it was opened (before any in-memory migration).
    pub original_version: u64,
    /// Opened read-only: another program owns the file (an agent that appends to it), and
    /// every request that would write it fails with [`EngineError::ReadOnly`].
    pub read_only: bool,
    /// The last usage view computed, so repeated `session/usage` calls on an unchanged
    /// session cost a comparison instead of a walk of the whole branch.
    usage_memo: Mutex<Option<UsageMemo>>,
    /// Cancelled when the session is dropped (closed): ends its follower (`follow.rs`).
    pub(crate) stop: CancellationToken,
}

impl Drop for SessionState {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// What a [`UsageView`] was computed from, and the view.
struct UsageMemo {
    revision: u64,
    tokenizer: String,
    settings: Settings,
    view: UsageView,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain data replaced whole: a panic while holding the lock cannot leave it half-updated.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl SessionState {
    pub fn new(
        id: String,
        path: PathBuf,
        cwd: String,
        session: SharedSession,
        settings: SettingsStack,
    ) -> Self {
        SessionState {
            id,
            path,
            cwd,
            session,
            settings: Mutex::new((settings, None)),
            caches: Mutex::new(HashMap::new()),
            ops: Arc::new(RunningOps::default()),
            auto: Mutex::new(AutoMemory::default()),
            background: Mutex::new(None),
            previews: Mutex::new(PreviewStore::default()),
            write_gate: Arc::new(tokio::sync::Mutex::new(())),
            original_version: crate::session::CURRENT_SESSION_VERSION,
            read_only: false,
            usage_memo: Mutex::new(None),
            stop: CancellationToken::new(),
        }
    }

    /// The previewed compactions kept for `session/commitCompaction`.
    pub fn previews(&self) -> MutexGuard<'_, PreviewStore> {
        lock(&self.previews)
    }

    /// `Err(ReadOnly)` when the session was opened read-only.
    pub fn check_writable(&self) -> Result<(), EngineError> {
        if self.read_only {
            return Err(EngineError::ReadOnly(self.id.clone()));
        }
        Ok(())
    }

    /// The usage view of the session at `revision` with `settings` and `tokenizer`: the one
    /// computed last when those are unchanged, else `compute()` (remembered for next time).
    pub fn usage_view(
        &self,
        revision: u64,
        tokenizer: &str,
        settings: &Settings,
        compute: impl FnOnce() -> UsageView,
    ) -> UsageView {
        if let Some(memo) = lock(&self.usage_memo).as_ref()
            && memo.revision == revision
            && memo.tokenizer == tokenizer
            && memo.settings == *settings
        {
            return memo.view.clone();
        }
        let view = compute();
        *lock(&self.usage_memo) = Some(UsageMemo {
            revision,
            tokenizer: tokenizer.to_owned(),
            settings: settings.clone(),
            view: view.clone(),
        });
        view
    }

    /// The session's settings stack.
    pub fn settings_stack(&self) -> SettingsStack {
        lock(&self.settings).0.clone()
    }

    /// Replaces the settings stack (after a settings update); a paused automatic compaction
    /// resumes.
    pub fn set_settings(&self, stack: SettingsStack) {
        *lock(&self.settings) = (stack, None);
        self.auto_memory().resume();
    }

    /// The background compaction slot.
    pub(crate) fn background(&self) -> MutexGuard<'_, Option<BackgroundRun>> {
        lock(&self.background)
    }

    /// The effective settings, computed once per stack.
    pub fn effective_settings(&self) -> Result<Settings, EngineError> {
        let mut guard = lock(&self.settings);
        if let Some(s) = &guard.1 {
            return Ok(s.clone());
        }
        let settings = guard
            .0
            .effective()
            .map_err(|e| EngineError::Settings(e.to_string()))?;
        guard.1 = Some(settings.clone());
        Ok(settings)
    }

    /// The token cache of `counter` for this session.
    pub fn cache_for(&self, counter: &Arc<dyn TokenCounter>) -> Arc<TokenCache> {
        let mut caches = lock(&self.caches);
        let cache = caches
            .entry(counter.name().to_owned())
            .or_insert_with(|| Arc::new(TokenCache::new(Arc::clone(counter))));
        Arc::clone(cache)
    }

    /// Forgets the counts of rewritten entries, in every counter's cache.
    pub fn invalidate_counts(&self, entry_ids: &[String]) {
        for cache in lock(&self.caches).values() {
            for id in entry_ids {
                cache.invalidate(id);
            }
        }
    }

    /// The auto-compaction memory.
    pub fn auto_memory(&self) -> MutexGuard<'_, AutoMemory> {
        lock(&self.auto)
    }

    /// Ingests other writers' appends (see [`SessionState::refresh_locked`]).
    pub async fn refresh(&self) -> Result<(), EngineError> {
        let mut session = self.session.write().await;
        self.refresh_locked(&mut session)
    }

    /// Ingests other writers' appends, then loads the rest of a partly loaded stored session
    /// (for what needs every entry: the tree, a fork).
    pub async fn load_whole(&self) -> Result<(), EngineError> {
        let mut session = self.session.write().await;
        self.refresh_locked(&mut session)?;
        session.load_whole()?;
        Ok(())
    }

    /// Ingests other writers' appends, then makes sure the paths to `ids` can be walked as
    /// on the whole session (loading the rest of a partly loaded stored session if not).
    pub async fn ensure_paths(&self, ids: &[&str]) -> Result<(), EngineError> {
        let mut session = self.session.write().await;
        self.refresh_locked(&mut session)?;
        for id in ids {
            session.ensure_path(id)?;
        }
        Ok(())
    }

    /// Ingests other writers' appends under a held write lock, before every write. Cached
    /// token counts stay valid: an entry's content only changes in place when it is pruned,
    /// and the cache key includes that. The sync policy is re-read here so a
    /// `settings/update` of `storage.sync` applies to sessions that are already open.
    pub fn refresh_locked(&self, session: &mut Session) -> Result<(), EngineError> {
        if let Ok(settings) = self.effective_settings() {
            session.set_sync_policy(sync_policy(&settings));
            session.set_blob_store(blob_store(&settings));
        }
        session.refresh()?;
        Ok(())
    }
}

/// Fails with `LeafMoved` unless `expected` is `None` or names `session`'s leaf.
pub(crate) fn check_leaf(
    session: &Session,
    expected: &Option<Option<String>>,
) -> Result<(), EngineError> {
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

/// The blob store of `storage.blobDir`, or the reference agent's.
pub fn blob_store(settings: &Settings) -> Option<crate::session::size_controls::BlobStore> {
    match &settings.storage.blob_dir {
        Some(dir) => Some(crate::session::size_controls::BlobStore::new(dir)),
        None => crate::session::size_controls::default_store(),
    }
}

/// The store's sync policy for `storage.sync`.
pub fn sync_policy(settings: &Settings) -> SyncPolicy {
    match settings.storage.sync {
        StorageSync::Fsync => SyncPolicy::Fsync,
        StorageSync::Os => SyncPolicy::Os,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_compaction_at_a_time_and_each_run_owns_its_slot() {
        let ops = Arc::new(RunningOps::default());
        let root = CancellationToken::new();
        let manual = ops.start(OpKind::Manual, &root).unwrap();
        assert!(ops.start(OpKind::Auto, &root).is_none());
        assert!(ops.start(OpKind::Manual, &root).is_none());
        let branch = ops.start(OpKind::Branch, &root).unwrap();
        assert!(ops.abort_compaction());
        assert!(manual.token().is_cancelled());
        assert!(!branch.token().is_cancelled());
        drop(manual);
        assert!(!ops.is_compacting());
        let auto = ops.start(OpKind::Auto, &root).unwrap();
        assert!(!auto.token().is_cancelled());
        assert!(ops.abort_branch());
        assert!(branch.token().is_cancelled());
        root.cancel();
        assert!(auto.token().is_cancelled());
    }
}
