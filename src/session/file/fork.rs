//! New session files made from an existing one (spec §1.3): a branch of it
//! (`createBranchedSession`) or a whole copy (`fork`). The source is only read; the new file is
//! written whole, through the same atomic rewrite as every other full write.

use std::path::Path;

use super::{CreateOptions, Entry, Result, Session};
use crate::session::catalog::Catalog;
use crate::session::tree;

/// Where a new session is made.
#[derive(Clone, Copy, Debug)]
pub enum Destination<'a> {
    /// A new `.jsonl` file.
    File(&'a Path),
    /// A new session in a backend that keeps sessions by id (a database).
    Store(&'a dyn Catalog),
}

impl Session {
    /// A new session (in a file or a database) holding the root→`leaf` path of this one, as
    /// the reference's `createBranchedSession`: `compactd_leaf` markers and label entries are
    /// left out (each entry's `parentId` then names the entry before it on the path), and a
    /// label entry for every labelled entry of the path is appended at the end. Fails with
    /// `EntryNotFound` for an unknown or hidden `leaf`.
    pub fn create_branched(
        &self,
        leaf: &str,
        path: Destination<'_>,
        options: CreateOptions,
    ) -> Result<Session> {
        debug_assert!(
            !self.is_partial(),
            "load a stored session whole before forking it"
        );
        self.visible(leaf)?;
        let labels = tree::labels_of(&self.entries);
        let mut kept: Vec<Entry> = Vec::new();
        for entry in self.path_to(leaf) {
            if entry.type_name() == "label" {
                continue;
            }
            let mut entry = entry.clone();
            entry.parent_id = kept.last().map(|e| e.id.clone());
            kept.push(entry);
        }
        let to_label: Vec<(String, String)> = kept
            .iter()
            .filter_map(|e| {
                labels
                    .get(e.id.as_str())
                    .map(|l| (e.id.clone(), l.to_string()))
            })
            .collect();
        let mut branched = new_with(&self.header.cwd, path, options, kept)?;
        for (target, label) in to_label {
            branched.set_label(&target, Some(&label))?;
        }
        Ok(branched)
    }

    /// A new session (in a file or a database) with a copy of every entry of this one, as the reference's
    /// `fork`: same entries and ids, same leaf, a new header.
    pub fn fork(&self, path: Destination<'_>, options: CreateOptions) -> Result<Session> {
        debug_assert!(
            !self.is_partial(),
            "load a stored session whole before forking it"
        );
        let mut forked = new_with(&self.header.cwd, path, options, self.entries.clone())?;
        if forked.leaf != self.leaf {
            // Navigated here without an append since: keep the position.
            forked.move_leaf(self.leaf.as_deref())?;
        }
        Ok(forked)
    }
}

/// A new session in `path` for `cwd`: creates it (header only), rewrites it with `entries`,
/// and opens it again so the leaf is what the store implies. A file that fails after it was
/// created is removed again, so nothing half-made is left behind.
fn new_with(
    cwd: &str,
    path: Destination<'_>,
    options: CreateOptions,
    entries: Vec<Entry>,
) -> Result<Session> {
    let path = match path {
        Destination::File(path) => path,
        Destination::Store(store) => {
            let mut session = store.create_session(cwd, options)?;
            session.replace_entries(|all| *all = entries)?;
            let id = session.header.id.clone();
            return store.open_session(&id).map(|(session, _)| session);
        }
    };
    let sync = options.sync;
    let mut session = Session::create(path, cwd, options)?;
    let written = session
        .replace_entries(|all| *all = entries)
        .and_then(|()| Session::open(path));
    match written {
        Ok((mut session, _)) => {
            session.set_sync_policy(sync);
            Ok(session)
        }
        Err(e) => {
            let _ = std::fs::remove_file(path);
            Err(e)
        }
    }
}
