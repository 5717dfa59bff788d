//! Undoing a compaction without rewriting the file (issue 33).
//!
//! The reference agent does not persist its leaf: on load its leaf is the last entry of the
//! file and its context the root→leaf path, from the latest compaction on it (spec §1.3,
//! §3.1). So an undo cannot just move the leaf back: it appends a branch that does not go
//! through the compaction. Undoing compaction `C` (whose parent is `P`, the leaf it was
//! appended at) on a branch whose entries after `C` are `E1..En` appends
//!
//! * a `custom` entry `compactd.undo` as a child of `P`: metadata the reference keeps and
//!   leaves out of the context, recording what was undone (see [`UndoRecord`]); then
//! * copies `E1'..En'` of the entries after `C` (new ids, same content and fields), chained
//!   below it. The last one is the new leaf.
//!
//! The new path `root..P, undo, E1'..En'` has no `C` on it, so compactd and the reference both
//! rebuild every message `C` summarised (the context at `P`) followed by everything appended
//! after `C`, in order.
//!
//! Rules:
//! * Copies leave out compaction entries and earlier undo records. Undoing an older compaction
//!   while later ones are on the branch therefore drops those too: their summaries were built
//!   on the one undone.
//! * Ids inside copies that name copied entries are remapped: a `label`'s `targetId`, a
//!   `branch_summary`'s `fromId` (set to the copy's new parent when it named its old one).
//! * Copies keep their fields, so blob-store references (`compactdFullText`) stay valid.
//! * Undo of an undo (its `entryId` names the `compactd.undo` entry) restores the compaction:
//!   what was appended after the undo's copies is copied below the leaf the undo started
//!   from (`fromLeaf`), behind a new `compactd.undo` record. When the branch no longer holds
//!   all of the undo's copies (the user navigated into them), the restored branch hangs from
//!   the original of the last copy still on it, or from `base` when none is.

use std::collections::{HashMap, HashSet};

use super::entry::{BranchSummaryEntry, Entry, EntryKind};
use super::file::Session;
use super::ids;
use serde::{Deserialize, Serialize};

/// The `customType` of an undo record.
pub const UNDO_CUSTOM_TYPE: &str = "compactd.undo";

/// The `data` of a `compactd.undo` entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UndoRecord {
    /// The entry undone: a compaction, or an earlier undo record.
    pub undid: String,
    /// The compaction this record takes off the branch (`restored: false`) or puts back on it
    /// (`restored: true`, an undo of an undo).
    pub compaction_id: String,
    #[serde(default)]
    pub restored: bool,
    /// The leaf before this undo.
    pub from_leaf: Option<String>,
    /// The entry of `fromLeaf`'s path after which the copied originals started.
    pub base: String,
    /// `[original id, copy id]` for every copy this undo wrote, in order.
    pub copies: Vec<(String, String)>,
}

impl UndoRecord {
    /// The record an entry holds, if it is a `compactd.undo` entry.
    pub fn of(entry: &Entry) -> Option<UndoRecord> {
        match entry.kind() {
            EntryKind::Custom {
                custom_type,
                data: Some(data),
            } if custom_type == UNDO_CUSTOM_TYPE => serde_json::from_value(data.clone()).ok(),
            _ => None,
        }
    }
}

/// Why nothing can be undone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UndoError {
    /// No compaction on the session's branch (and no `entryId` given).
    #[error("there is no compaction on the session's branch to undo")]
    NoCompaction,
    /// `entryId` is not an entry of the session.
    #[error("Entry {0} not found")]
    EntryNotFound(String),
    /// `entryId` is an entry, but not on the session's branch.
    #[error("entry {0} is not on the session's branch")]
    NotOnBranch(String),
    /// `entryId` is on the branch but is neither a compaction nor an undo.
    #[error("entry {id} is a {type_name} entry, neither a compaction nor an undo")]
    NotUndoable { id: String, type_name: String },
    /// The undo record names a leaf the session no longer has.
    #[error("undo entry {record} names leaf {leaf}, which is not in the session")]
    LeafGone { record: String, leaf: String },
}

/// What an undo will write (see [`plan_undo`]) or wrote.
#[derive(Debug, Clone)]
pub struct UndoPlan {
    /// The `compactd.undo` record, then the copies; chained, the last is the new leaf.
    pub entries: Vec<Entry>,
    /// The compaction taken off the branch, or (`restored`) put back on it.
    pub compaction_id: String,
    /// The entry undone: the compaction, or the undo record named by `entryId`.
    pub undid: String,
    pub restored: bool,
    /// The leaf before the undo.
    pub old_leaf_id: Option<String>,
}

impl UndoPlan {
    /// The leaf after the undo.
    pub fn leaf_id(&self) -> Option<&str> {
        self.entries.last().map(|e| e.id.as_str())
    }
}

/// Plans the undo of `entry_id` (a compaction or an undo record on the branch), by default of
/// the latest compaction on the branch. Writes nothing; [`Session::append_planned`] writes it.
pub fn plan_undo(session: &Session, entry_id: Option<&str>) -> Result<UndoPlan, UndoError> {
    let leaf = session.leaf_id().map(str::to_owned);
    let path = session.path_to_leaf();
    let at = match entry_id {
        None => path
            .iter()
            .rposition(|e| matches!(e.kind(), EntryKind::Compaction(_)))
            .ok_or(UndoError::NoCompaction)?,
        Some(id) => {
            if session.get(id).is_none_or(Entry::is_leaf_move) {
                return Err(UndoError::EntryNotFound(id.to_owned()));
            }
            path.iter()
                .position(|e| e.id == id)
                .ok_or_else(|| UndoError::NotOnBranch(id.to_owned()))?
        }
    };
    let target = path[at];
    let after = &path[at + 1..];
    // (compaction, restored, anchor of the new branch, base, originals to copy, copy → original)
    let mut back: HashMap<String, String> = HashMap::new();
    let (compaction_id, restored, anchor, base, originals) = match target.kind() {
        EntryKind::Compaction(_) => (
            target.id.clone(),
            false,
            real_parent(session, target),
            target.id.clone(),
            after.to_vec(),
        ),
        _ => {
            let Some(record) = UndoRecord::of(target) else {
                return Err(UndoError::NotUndoable {
                    id: target.id.clone(),
                    type_name: target.type_name().to_owned(),
                });
            };
            let copies: HashMap<&str, &str> = record
                .copies
                .iter()
                .map(|(o, c)| (c.as_str(), o.as_str()))
                .collect();
            let on_path = after
                .iter()
                .take_while(|e| copies.contains_key(e.id.as_str()))
                .count();
            for e in &after[..on_path] {
                back.insert(e.id.clone(), copies[e.id.as_str()].to_owned());
            }
            let anchor = if on_path == record.copies.len() {
                record.from_leaf.clone()
            } else if on_path > 0 {
                Some(copies[after[on_path - 1].id.as_str()].to_owned())
            } else {
                Some(record.base.clone())
            };
            if let Some(a) = &anchor
                && session.get(a).is_none_or(Entry::is_leaf_move)
            {
                return Err(UndoError::LeafGone {
                    record: target.id.clone(),
                    leaf: a.clone(),
                });
            }
            let base = after[..on_path]
                .last()
                .map_or_else(|| target.id.clone(), |e| e.id.clone());
            (
                record.compaction_id,
                !record.restored,
                anchor,
                base,
                after[on_path..].to_vec(),
            )
        }
    };

    let taken = |id: &str, fresh: &HashSet<String>| session.get(id).is_some() || fresh.contains(id);
    let mut fresh: HashSet<String> = HashSet::new();
    let mut new_id = || {
        let id = ids::new_entry_id(|c| taken(c, &fresh));
        fresh.insert(id.clone());
        id
    };
    let record_id = new_id();
    let kept: Vec<&Entry> = originals.into_iter().filter(|e| copied(e)).collect();
    // Every original's copy id first, so a reference to a later copy can be remapped too.
    let copy_ids: Vec<String> = kept.iter().map(|_| new_id()).collect();
    let mut map: HashMap<String, String> = back;
    for (o, c) in kept.iter().zip(&copy_ids) {
        map.insert(o.id.clone(), c.clone());
    }
    let mut entries = Vec::with_capacity(kept.len() + 1);
    let mut copies = Vec::with_capacity(kept.len());
    let mut parent = record_id.clone();
    for (original, id) in kept.iter().zip(copy_ids) {
        let (mut kind, extra) = (*original).clone().into_parts();
        match &mut kind {
            EntryKind::Label { target_id, .. } => {
                if let Some(to) = map.get(target_id.as_str()) {
                    *target_id = to.clone();
                }
            }
            EntryKind::BranchSummary(BranchSummaryEntry { from_id, .. }) => {
                if original.parent_id.as_deref() == Some(from_id.as_str()) {
                    *from_id = parent.clone();
                } else if let Some(to) = map.get(from_id.as_str()) {
                    *from_id = to.clone();
                }
            }
            _ => {}
        }
        copies.push((original.id.clone(), id.clone()));
        entries.push(Entry::with_extra(
            id.clone(),
            Some(parent),
            original.timestamp.clone(),
            kind,
            extra,
        ));
        parent = id;
    }
    let record = UndoRecord {
        undid: target.id.clone(),
        compaction_id: compaction_id.clone(),
        restored,
        from_leaf: leaf.clone(),
        base,
        copies,
    };
    let record_entry = Entry::new(
        record_id,
        anchor,
        ids::now_iso(),
        EntryKind::Custom {
            custom_type: UNDO_CUSTOM_TYPE.to_owned(),
            // Cannot fail: strings and a list of string pairs.
            data: Some(serde_json::to_value(&record).expect("an undo record serialises")),
        },
    );
    entries.insert(0, record_entry);
    Ok(UndoPlan {
        entries,
        compaction_id,
        undid: target.id.clone(),
        restored,
        old_leaf_id: leaf,
    })
}

/// `entry`'s parent, past any `compactd_leaf` marker (the reference appends below its leaf,
/// which may be one): the first entry above it that is a path entry.
fn real_parent(session: &Session, entry: &Entry) -> Option<String> {
    let mut parent = entry.parent_id.clone();
    // Bounded: a hand-edited file may chain markers in a loop.
    for _ in 0..64 {
        match parent.as_deref().and_then(|p| session.get(p)) {
            Some(p) if p.is_leaf_move() => parent = p.parent_id.clone(),
            _ => break,
        }
    }
    parent
}

/// Whether an undo copies `entry`: everything but compactions and undo records.
fn copied(entry: &Entry) -> bool {
    match entry.kind() {
        EntryKind::Compaction(_) => false,
        EntryKind::Custom { custom_type, .. } => custom_type != UNDO_CUSTOM_TYPE,
        _ => true,
    }
}

#[cfg(test)]
#[path = "undo_tests.rs"]
mod tests;
