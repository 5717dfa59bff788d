//! The previews a session keeps for `session/commitCompaction`: each previewed compaction
//! (`session/compact` with `preview: true` at the session's leaf) under a `previewId`.
//!
//! Memory is bounded: a session keeps at most [`MAX_PREVIEWS`] (the oldest goes first) and a
//! preview expires [`PREVIEW_TTL`] after it was made. A kept preview holds the entry it would
//! append (summary, details, the kept messages for the token estimate), not the branch.
//! Closing the session drops them all. A prune or navigation of the session marks them stale
//! (they stay, so committing one reports `leafMoved`, not "unknown id"); an append moves the
//! leaf, which the commit checks.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::compact::PreviewedCompaction;

/// Previews kept per session.
pub const MAX_PREVIEWS: usize = 8;
/// How long a preview can be committed.
pub const PREVIEW_TTL: Duration = Duration::from_secs(30 * 60);

#[derive(Debug)]
struct Kept {
    id: String,
    made: Instant,
    preview: PreviewedCompaction,
    stale: bool,
}

/// A taken preview, and whether the branch changed since (a prune or navigation).
#[derive(Debug)]
pub struct TakenPreview {
    pub preview: PreviewedCompaction,
    pub stale: bool,
}

/// The previews of one session.
#[derive(Debug, Default)]
pub struct PreviewStore {
    kept: VecDeque<Kept>,
}

impl PreviewStore {
    /// Keeps `preview`; returns its id.
    pub fn insert(&mut self, preview: PreviewedCompaction) -> String {
        self.insert_at(preview, Instant::now())
    }

    fn insert_at(&mut self, preview: PreviewedCompaction, now: Instant) -> String {
        self.expire(now);
        while self.kept.len() >= MAX_PREVIEWS {
            self.kept.pop_front();
        }
        let id = format!("preview-{}", crate::session::ids::new_session_id());
        self.kept.push_back(Kept {
            id: id.clone(),
            made: now,
            preview,
            stale: false,
        });
        id
    }

    /// Takes preview `id` out; `None` when unknown or expired.
    pub fn take(&mut self, id: &str) -> Option<TakenPreview> {
        self.take_at(id, Instant::now())
    }

    fn take_at(&mut self, id: &str, now: Instant) -> Option<TakenPreview> {
        self.expire(now);
        let at = self.kept.iter().position(|k| k.id == id)?;
        let kept = self.kept.remove(at)?;
        Some(TakenPreview {
            preview: kept.preview,
            stale: kept.stale,
        })
    }

    /// Puts a taken preview back (a commit refused before it looked at the branch).
    pub fn put_back(&mut self, id: String, taken: TakenPreview) {
        if self.kept.len() < MAX_PREVIEWS {
            self.kept.push_back(Kept {
                id,
                made: Instant::now(),
                preview: taken.preview,
                stale: taken.stale,
            });
        }
    }

    /// The branch changed without moving the leaf's id (a prune), or the leaf moved: no kept
    /// preview may be committed any more.
    pub fn mark_stale(&mut self) {
        self.kept.iter_mut().for_each(|k| k.stale = true);
    }

    /// How many are kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    /// Whether none is kept.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    fn expire(&mut self, now: Instant) {
        self.kept
            .retain(|k| now.saturating_duration_since(k.made) < PREVIEW_TTL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn preview() -> PreviewedCompaction {
        PreviewedCompaction::for_tests(Some("leaf".into()))
    }

    #[test]
    fn at_most_max_previews_are_kept_oldest_first_out() {
        let mut store = PreviewStore::default();
        let now = Instant::now();
        let ids: Vec<String> = (0..MAX_PREVIEWS + 2)
            .map(|_| store.insert_at(preview(), now))
            .collect();
        assert_eq!(store.len(), MAX_PREVIEWS);
        assert!(store.take_at(&ids[0], now).is_none());
        assert!(store.take_at(&ids[1], now).is_none());
        let last = ids.last().unwrap();
        assert!(store.take_at(last, now).is_some());
        // Taken once: gone.
        assert!(store.take_at(last, now).is_none());
        assert_eq!(store.len(), MAX_PREVIEWS - 1);
    }

    #[test]
    fn a_preview_expires_after_the_ttl() {
        let mut store = PreviewStore::default();
        let now = Instant::now();
        let id = store.insert_at(preview(), now);
        let other = store.insert_at(preview(), now);
        let just_before = now + PREVIEW_TTL - Duration::from_secs(1);
        assert!(store.take_at(&id, just_before).is_some());
        assert!(store.take_at(&other, now + PREVIEW_TTL).is_none());
        assert!(store.is_empty());
    }

    #[test]
    fn marked_stale_previews_say_so() {
        let mut store = PreviewStore::default();
        let id = store.insert(preview());
        store.mark_stale();
        let taken = store.take(&id).expect("still kept");
        assert!(taken.stale);
        assert_eq!(taken.preview.leaf(), Some("leaf"));
    }
}
