//! A stored session opened with only what the context at its leaf needs.
//!
//! The context at a leaf reads the path from the newest compaction's first kept entry `B` to
//! the leaf, and before `B` only a few entries: what [`state_entries`] picks (the newest
//! thinking level, model per role, mode, rule injections, the newest usable usage). Every
//! write stores, with the session row, the [`ContextDigest`] of the leaf it leaves: `B` and
//! those entries. Opening reads the row, the digest's entries and the lines from `B` on (the
//! *tail*): a bounded amount however long the history, instead of every line.
//!
//! In memory such a session holds the prefix entries (in path order), then the tail entries.
//! A path from a tail entry is *covered* when it reaches `B` and the newest compaction on it
//! keeps from an entry on it: then the prefix entries followed by the walked path stand for
//! the whole path in everything computed from it (context, usage, compaction plans; see
//! [`state_entries`]). Anything else loads the rest on demand, once ([`Session::load_whole`]):
//! the tree, forks, a prune, an id or a path outside the tail. Writes keep it exact: a new
//! entry's id is checked against the lines not loaded, and a write that would leave the leaf
//! on an uncovered path loads the rest first, under the writers' lock.
//!
//! A digest is written only for a session with no duplicate ids and no malformed lines, so a
//! partly loaded session has neither, and opening it reports what opening the whole would.

use std::collections::HashSet;

use super::{LoadReport, Result, Session, load, next_revision};
use crate::session::context::state_entries;
use crate::session::entry::{CURRENT_SESSION_VERSION, Entry, EntryKind, LineSource};
use crate::session::ids;
use crate::session::tree;

/// What the context at one leaf needs from a stored session, so that opening it reads only
/// that: the lines from `from` on, and the entries `prefix` before it. Valid for `leaf` only,
/// and for good (an entry's path never changes). A backend that loads sessions in part stores
/// it with the session (PostgreSQL: the `context_*` columns of the session row).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContextDigest {
    pub leaf: String,
    /// The first kept entry of the newest compaction on the leaf's path.
    pub from: String,
    /// The path's entries before `from` that the context still reads (see
    /// `session::context::state_entries`), in path order.
    pub prefix: Vec<String>,
}

/// A stored line with its position (`seq`) in the session.
pub type SeqLine = (i64, Vec<u8>);

/// A digest's `(from, prefix)` (see [`ContextDigest`]).
pub(super) type DigestPart = (String, Vec<String>);

/// What the last digests computed are remembered by: the leaf of the last one (so the next
/// append below it needs no walk), and the prefix of the last compaction asked about.
#[derive(Debug, Default)]
pub(crate) struct DigestMemo {
    leaf: String,
    part: Option<DigestPart>,
    compaction: Option<(String, Vec<String>)>,
}

/// Where the loaded part of a partly loaded session starts, and what stands for the rest.
#[derive(Debug)]
pub(crate) struct Partial {
    /// The seq of `B`, the first tail line: every line from it on is loaded.
    pub(super) from_seq: i64,
    /// `entries[tail_start]` is `B`; every entry from it on is a tail entry.
    tail_start: usize,
    /// Indices in `entries` of the prefix entries, in path order.
    prefix: Vec<usize>,
    /// Entries (markers excluded) stored before `B` and not loaded.
    unloaded_visible: usize,
    /// The revision at which the leaf's path was last found covered.
    leaf_checked: Option<u64>,
}

impl Session {
    /// A session from a partial read: `header` and the prefix lines (path order) and tail
    /// lines (from `from_seq` on). `None` when they do not make a covered session after all
    /// (the caller then reads everything).
    pub(in crate::session) fn parse_partial(
        path: std::path::PathBuf,
        header: &[u8],
        prefix: &[SeqLine],
        tail: &[SeqLine],
        from_seq: i64,
        entry_count: i64,
    ) -> Result<Option<Session>> {
        let mut data = Vec::with_capacity(
            header.len()
                + prefix
                    .iter()
                    .chain(tail)
                    .map(|l| l.1.len() + 1)
                    .sum::<usize>()
                + 1,
        );
        data.extend_from_slice(header);
        data.push(b'\n');
        for (_, line) in prefix.iter().chain(tail) {
            data.extend_from_slice(line);
            data.push(b'\n');
        }
        let mut report = LoadReport::default();
        let mut session = load::from_bytes(
            path.clone(),
            path,
            LineSource::memory(data),
            None,
            &mut report,
            &|_| {},
        )?;
        let clean = report == LoadReport::default()
            && session.header.version == Some(CURRENT_SESSION_VERSION)
            && session.raw_lines.is_empty()
            && session.entries.len() == prefix.len() + tail.len()
            && tail.first().is_some_and(|t| t.0 == from_seq);
        if !clean {
            return Ok(None);
        }
        let loaded_visible = session.entries.iter().filter(|e| !e.is_leaf_move()).count();
        session.partial = Some(Partial {
            from_seq,
            tail_start: prefix.len(),
            prefix: (0..prefix.len()).collect(),
            unloaded_visible: usize::try_from(entry_count)
                .unwrap_or(0)
                .saturating_sub(loaded_visible),
            leaf_checked: None,
        });
        let covered = match session.leaf.as_deref() {
            None => true,
            Some(leaf) => session.index.get(leaf).is_some_and(|&i| session.covers(i)),
        };
        Ok(covered.then_some(session))
    }

    /// Whether only part of the session is loaded (see the module docs).
    pub fn is_partial(&self) -> bool {
        self.partial.is_some()
    }

    /// Entries (markers excluded), loaded or not.
    pub fn visible_entry_count(&self) -> usize {
        let loaded = self.entries.iter().filter(|e| !e.is_leaf_move()).count();
        match &self.partial {
            Some(p) => loaded + p.unloaded_visible,
            None => loaded,
        }
    }

    /// The index of `entries[child]`'s parent `id` on a path walk: on a partly loaded session
    /// only tail entries are walked (the prefix entries stand in for everything before `B`).
    pub(super) fn parent_index(&self, child: usize, id: &str) -> Option<usize> {
        // Writers append an entry right after its parent, so for most entries the one before
        // is the parent: a comparison of two short strings instead of a hash lookup (the walk
        // of a 13,677-entry path took 0.78 ms with a lookup per step, 0.36 ms with this).
        // Only without duplicate ids, where the index's first entry with an id is the only one.
        let before = child
            .checked_sub(1)
            .filter(|&b| !self.duplicate_ids && self.entries.get(b).is_some_and(|e| e.id == id));
        let i = match before {
            Some(b) => {
                debug_assert_eq!(self.index.get(id), Some(&b), "the index agrees");
                b
            }
            None => *self.index.get(id)?,
        };
        match &self.partial {
            Some(p) if i < p.tail_start => None,
            _ => Some(i),
        }
    }

    /// The root→`entries[end]` path as indices: on a partly loaded session, the prefix
    /// entries then the walk from `B` (the caller made sure the path is covered).
    pub(super) fn walk_indices(&self, end: usize) -> Vec<usize> {
        let walk = tree::walk_path_indices(&self.entries, end, |c, p| self.parent_index(c, p));
        let Some(p) = &self.partial else {
            return walk;
        };
        if walk.first() != Some(&p.tail_start) {
            debug_assert!(
                false,
                "the path of an uncovered entry of a partly loaded session"
            );
            tracing::error!(session = %self.header.id, "walked an uncovered path of a partly loaded session");
            return walk;
        }
        let mut path = Vec::with_capacity(p.prefix.len() + walk.len());
        path.extend_from_slice(&p.prefix);
        path.extend(walk);
        path
    }

    /// Whether the path to `entries[end]` is covered (always, for a whole session).
    pub(super) fn covers(&self, end: usize) -> bool {
        let Some(p) = &self.partial else {
            return true;
        };
        if end < p.tail_start {
            return false;
        }
        let walk = tree::walk_path_indices(&self.entries, end, |c, p| self.parent_index(c, p));
        if walk.first() != Some(&p.tail_start) {
            return false;
        }
        let path: Vec<&Entry> = walk.iter().map(|&i| &self.entries[i]).collect();
        let newest = path
            .iter()
            .enumerate()
            .rev()
            .find_map(|(k, e)| match e.kind() {
                EntryKind::Compaction(c) => Some((k, c)),
                _ => None,
            });
        newest.is_some_and(|(k, c)| path[..k].iter().any(|e| e.id == c.first_kept_entry_id))
    }

    /// Whether the current leaf's path is covered.
    pub(in crate::session) fn leaf_covered(&self) -> bool {
        match self.leaf.as_deref() {
            None => true,
            Some(leaf) => self.index.get(leaf).is_some_and(|&i| self.covers(i)),
        }
    }

    /// Whether the rest of a partly loaded session must be loaded for the leaf's path to be
    /// covered (checked again only after the entries or the leaf changed).
    pub(in crate::session) fn leaf_needs_rest(&mut self) -> bool {
        let revision = self.revision;
        let Some(p) = &self.partial else {
            return false;
        };
        if p.leaf_checked == Some(revision) {
            return false;
        }
        if self.leaf_covered() {
            if let Some(p) = &mut self.partial {
                p.leaf_checked = Some(revision);
            }
            false
        } else {
            true
        }
    }

    /// Where the loaded part of a partly loaded session starts (`None`: loaded whole).
    pub(in crate::session) fn partial_from(&self) -> Option<i64> {
        self.partial.as_ref().map(|p| p.from_seq)
    }

    /// Makes sure `id`'s path can be walked as on the whole session: loads the rest of a
    /// partly loaded session unless `id` is a loaded entry with a covered path.
    pub fn ensure_path(&mut self, id: &str) -> Result<()> {
        if self.partial.is_none() {
            return Ok(());
        }
        match self.index.get(id) {
            Some(&i) if self.covers(i) => Ok(()),
            _ => self.load_whole(),
        }
    }

    /// The (first) entry with this id, loading the rest of a partly loaded session when it
    /// is not among the loaded entries.
    pub fn find(&mut self, id: &str) -> Result<Option<&Entry>> {
        if self.partial.is_some() && !self.index.contains_key(id) {
            self.load_whole()?;
        }
        Ok(self.get(id))
    }

    /// Loads every line of a partly loaded session (nothing to do otherwise).
    pub fn load_whole(&mut self) -> Result<()> {
        if self.partial.is_none() {
            return Ok(());
        }
        self.with_store(|store, s| store.load_rest(s))
    }

    /// Puts the lines before `B` in front of the tail: the session is whole.
    pub(in crate::session) fn absorb_prefix(&mut self, lines: Vec<SeqLine>) -> Result<()> {
        let Some(p) = self.partial.take() else {
            return Ok(());
        };
        let mut data = self.header.head_bytes();
        data.push(b'\n');
        for (_, line) in &lines {
            data.extend_from_slice(line);
            data.push(b'\n');
        }
        let mut report = LoadReport::default();
        let before = match load::from_bytes(
            self.path.clone(),
            self.file.clone(),
            LineSource::memory(data),
            None,
            &mut report,
            &|_| {},
        ) {
            Ok(s) => s,
            Err(e) => {
                self.partial = Some(p);
                return Err(e);
            }
        };
        let shift = before.entries.len();
        let tail: Vec<Entry> = self.entries.drain(p.tail_start..).collect();
        let mut raw_lines = before.raw_lines;
        raw_lines.extend(self.raw_lines.drain(..).map(|mut r| {
            r.before_entry = r.before_entry.saturating_sub(p.tail_start) + shift;
            r
        }));
        self.entries = before.entries;
        self.entries.extend(tail);
        self.raw_lines = raw_lines;
        self.revision = next_revision();
        self.rebuild_index();
        tracing::debug!(session = %self.header.id, lines = lines.len(), "loaded the rest of the session");
        Ok(())
    }

    /// The digest of the leaf the session has once `new` is written (see the module docs);
    /// `None` when opening must read everything.
    pub(in crate::session) fn digest_after(&self, new: &[Entry]) -> Option<ContextDigest> {
        if self.duplicate_ids || !self.raw_lines.is_empty() {
            return None;
        }
        let last = new.last().or(self.entries.last())?;
        let leaf = if last.is_leaf_move() {
            last.parent_id.clone()?
        } else {
            last.id.clone()
        };
        // The leaf's path: new entries up to the first one whose parent is already stored.
        let mut chain: Vec<&Entry> = Vec::new();
        let mut current = Some(leaf.clone());
        while let Some(id) = &current {
            let Some(e) = new.iter().find(|e| &e.id == id && !e.is_leaf_move()) else {
                break;
            };
            if chain.len() == new.len() {
                return None; // a cycle
            }
            chain.push(e);
            current = e.parent_id.clone();
        }
        chain.reverse();
        let compacts = chain
            .iter()
            .any(|e| matches!(e.kind(), EntryKind::Compaction(_)));
        let mut memo = self.digest_memo.lock().unwrap_or_else(|p| p.into_inner());
        // Entries without a compaction below a path change nothing of what it needs: the
        // digest of the stored end is the digest of the new leaf (an append costs no walk).
        let part = match (&*memo, &current) {
            (Some(m), Some(base)) if !compacts && &m.leaf == base => m.part.clone(),
            _ => {
                let mut path: Vec<&Entry> = match &current {
                    None => Vec::new(),
                    Some(id) => {
                        let &i = self.index.get(id)?;
                        if !self.covers(i) {
                            return None;
                        }
                        self.path_to(id)
                    }
                };
                path.extend(chain);
                self.digest_part(&mut memo, &path)
            }
        };
        let memo = memo.get_or_insert_with(Default::default);
        memo.leaf = leaf.clone();
        memo.part = part.clone();
        let (from, prefix) = part?;
        Some(ContextDigest { leaf, from, prefix })
    }

    /// `(from, prefix)` of a digest for `path`: the newest compaction's first kept entry, and
    /// the ids of [`state_entries`] of the path before it (remembered per compaction, since
    /// that part of a path never changes).
    fn digest_part(&self, memo: &mut Option<DigestMemo>, path: &[&Entry]) -> Option<DigestPart> {
        let (k, first_kept) = path
            .iter()
            .enumerate()
            .rev()
            .find_map(|(k, e)| match e.kind() {
                EntryKind::Compaction(c) => Some((k, c.first_kept_entry_id.as_str())),
                _ => None,
            })?;
        let from = path[..k].iter().rposition(|e| e.id == first_kept)?;
        let compaction = &path[k].id;
        let prefix = match memo {
            Some(m) if m.compaction.as_ref().is_some_and(|(c, _)| c == compaction) => m
                .compaction
                .as_ref()
                .map(|(_, p)| p.clone())
                .unwrap_or_default(),
            _ => {
                let before = &path[..from];
                let prefix: Vec<String> = state_entries(before)
                    .into_iter()
                    .map(|k| before[k].id.clone())
                    .collect();
                memo.get_or_insert_with(Default::default).compaction =
                    Some((compaction.clone(), prefix.clone()));
                prefix
            }
        };
        Some((path[from].id.clone(), prefix))
    }

    /// Gives the new entries of a write on a partly loaded session ids no stored line has
    /// (the loaded ones were avoided when they were made; the others are asked of the store
    /// with `taken`, which returns those of the ids it holds, under the writers' lock). A
    /// renamed entry's children in `new` follow it.
    pub(in crate::session) fn avoid_unloaded_ids(
        &self,
        mut taken: impl FnMut(Vec<String>) -> Result<Vec<String>>,
        new: &mut [Entry],
    ) -> Result<()> {
        if self.partial.is_none() || new.is_empty() {
            return Ok(());
        }
        let mut refused: HashSet<String> = HashSet::new();
        loop {
            let ids: Vec<String> = new.iter().map(|e| e.id.clone()).collect();
            let taken = taken(ids)?;
            if taken.is_empty() {
                return Ok(());
            }
            refused.extend(taken.iter().cloned());
            for old in taken {
                let fresh = ids::new_entry_id(|c| {
                    self.index.contains_key(c)
                        || refused.contains(c)
                        || new.iter().any(|e| e.id == c)
                });
                for e in new.iter_mut() {
                    if e.id == old {
                        e.id = fresh.clone();
                    } else if e.parent_id.as_deref() == Some(old.as_str()) {
                        e.parent_id = Some(fresh.clone());
                    }
                }
            }
        }
    }
}
