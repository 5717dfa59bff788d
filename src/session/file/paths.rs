//! The last root→entry path a session walked, kept so that asking for it again costs a copy
//! of its indices and asking for an entry a few steps below it (after an append) walks only
//! those steps; with it, the branch state of that path, brought up to date rather than read
//! again from the root.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::session::context::BranchState;
use crate::session::entry::Entry;
use crate::session::tree;

/// A root→`end` path as entry indices (markers excluded). Entries are only ever added after
/// existing ones, and a parent never changes, so the path of an entry stays valid until the
/// entries are replaced (a prune, a reload), which clears it.
#[derive(Debug, Default)]
pub(super) struct Paths(Mutex<PathCache>);

#[derive(Debug, Default)]
struct PathCache {
    end: Option<usize>,
    indices: Arc<Vec<usize>>,
    /// The branch state of the first `.0` entries of the path: kept when the path is extended
    /// (a prefix's state stays valid), brought up to date by the next context.
    state: Option<(usize, BranchState)>,
}

/// How far above a new end a walk looks for the cached one before walking to the root: an
/// append adds one or a few entries below the leaf.
const PATH_EXTENSION_STEPS: usize = 64;

impl Paths {
    fn cache(&self) -> MutexGuard<'_, PathCache> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The root→`entries[end]` path as indices: the cached one, the cached one extended by
    /// the entries below it (their parents found by `lookup(child, parent_id)`), or `walk()`.
    pub(super) fn indices(
        &self,
        entries: &[Entry],
        end: usize,
        lookup: impl Fn(usize, &str) -> Option<usize>,
        walk: impl FnOnce() -> Vec<usize>,
    ) -> Arc<Vec<usize>> {
        let mut cache = self.cache();
        if cache.end == Some(end) {
            return Arc::clone(&cache.indices);
        }
        let (indices, state) = match cache
            .end
            .and_then(|old| extension(entries, old, end, lookup))
        {
            Some(below) => {
                let mut path = Vec::with_capacity(cache.indices.len() + below.len());
                path.extend_from_slice(&cache.indices);
                path.extend(below.into_iter().rev());
                (path, cache.state.take())
            }
            None => (walk(), None),
        };
        *cache = PathCache {
            end: Some(end),
            indices: Arc::new(indices),
            state,
        };
        Arc::clone(&cache.indices)
    }

    /// The branch state of `path`, the root→`entries[end]` path: the cached state of the path
    /// extended by the entries added below it since, or (another path) read from the path.
    pub(super) fn branch_state(&self, end: usize, path: &[&Entry]) -> BranchState {
        let mut cache = self.cache();
        let same_path = cache.end == Some(end) && cache.indices.len() == path.len();
        if !same_path {
            return BranchState::of_path(path);
        }
        let state = match cache.state.take() {
            Some((covered, mut state)) if covered <= path.len() => {
                state.extend(path, path.len() - covered);
                state
            }
            _ => BranchState::of_path(path),
        };
        cache.state = Some((path.len(), state.clone()));
        state
    }

    /// Forgets the cached path; for when entries are replaced rather than added.
    pub(super) fn clear(&mut self) {
        *self
            .0
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = PathCache::default();
    }
}

/// The non-marker entries from `end` up to (not including) `old`, newest first, when `old` is
/// at most [`PATH_EXTENSION_STEPS`] above `end`.
fn extension(
    entries: &[Entry],
    old: usize,
    end: usize,
    lookup: impl Fn(usize, &str) -> Option<usize>,
) -> Option<Vec<usize>> {
    let mut below = Vec::new();
    let mut current = end;
    for _ in 0..PATH_EXTENSION_STEPS {
        if current == old {
            return Some(below);
        }
        let entry = &entries[current];
        if !tree::is_marker(entry) {
            below.push(current);
        }
        current = entry
            .parent_id
            .as_deref()
            .and_then(|p| lookup(current, p))?;
    }
    None
}
