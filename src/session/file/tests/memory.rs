//! The storage seam holds: a third backend, the lines of a session in memory, is this one
//! file. Two sessions on one store see each other's appends, the leaf is checked under the
//! writers' lock, a rewrite replaces the stored lines, and the stored lines load again as the
//! same session, with no file and no database.

use std::sync::{Arc, Mutex};

use pretty_assertions::assert_eq;

use super::super::cursor::TailMode;
use super::super::store::{Build, Edit, Store};
use super::*;
use crate::session::entry::{LineSource, SessionHeader};

/// A session's lines in memory, shared by every session opened on it; the mutex is the
/// writers' lock. What a session has read of it is its `disk.consumed`, as for a file.
#[derive(Debug, Clone, Default)]
struct MemoryStore {
    bytes: Arc<Mutex<Vec<u8>>>,
}

impl MemoryStore {
    /// A new store holding a header-only session.
    fn create(id: &str) -> (MemoryStore, Session) {
        let header = SessionHeader {
            version: Some(crate::session::CURRENT_SESSION_VERSION),
            id: id.to_owned(),
            title: None,
            timestamp: "2026-01-01T00:00:00.000Z".to_owned(),
            cwd: "/w".to_owned(),
            parent_session: None,
            extra: Default::default(),
            title_line: None,
        };
        let mut line = header.to_value().to_string().into_bytes();
        line.push(b'\n');
        let store = MemoryStore {
            bytes: Arc::new(Mutex::new(line)),
        };
        let session = store.open();
        (store, session)
    }

    /// The session as the store holds it now.
    fn open(&self) -> Session {
        let bytes = self.bytes.lock().unwrap().clone();
        let path = PathBuf::from("memory:s");
        let mut report = LoadReport::default();
        let mut session = load::from_bytes(
            path.clone(),
            path,
            LineSource::memory(bytes),
            None,
            &mut report,
            &|_| {},
        )
        .unwrap();
        assert_eq!(report, LoadReport::default());
        session.set_store(Box::new(self.clone()));
        session
    }

    /// Reads the lines after what `session` has read.
    fn ingest(session: &mut Session, bytes: &[u8]) -> usize {
        let before = session.entries.len();
        let new = bytes[session.disk.consumed as usize..].to_vec();
        session.ingest_lines(new, TailMode::Locked);
        session.entries.len() - before
    }

    /// The header and every entry's line: what a rewrite stores.
    fn all_bytes(session: &Session) -> Vec<u8> {
        let mut out = session.header.head_bytes();
        out.push(b'\n');
        for e in &session.entries {
            out.extend_from_slice(&e.line_bytes().unwrap());
            out.push(b'\n');
        }
        out
    }
}

impl Store for MemoryStore {
    fn refresh(&mut self, session: &mut Session) -> Result<usize> {
        let bytes = self.bytes.lock().unwrap();
        Ok(MemoryStore::ingest(session, &bytes))
    }

    fn write(&mut self, session: &mut Session, build: Build<'_>) -> Result<()> {
        let mut bytes = self.bytes.lock().unwrap();
        MemoryStore::ingest(session, &bytes);
        let new = session.controlled(build(&*session)?)?;
        for e in &new {
            bytes.extend_from_slice(&e.line_bytes().unwrap());
            bytes.push(b'\n');
        }
        session.disk.consumed = bytes.len() as u64;
        session.commit(new);
        Ok(())
    }

    fn replace(&mut self, session: &mut Session, edit: Edit<'_>) -> Result<()> {
        let mut bytes = self.bytes.lock().unwrap();
        MemoryStore::ingest(session, &bytes);
        session.rewrite_with(edit, |session| {
            *bytes = MemoryStore::all_bytes(session);
            session.disk.consumed = bytes.len() as u64;
            session.file_leaf = file_leaf_of(&session.entries);
            Ok(())
        })
    }
}

fn text(e: &Entry) -> String {
    match e.kind() {
        EntryKind::Message(AgentMessage::User(u)) => u.content.joined_text(""),
        other => format!("{other:?}"),
    }
}

fn texts(s: &Session) -> Vec<String> {
    s.path_to_leaf().into_iter().map(text).collect()
}

#[test]
fn a_session_in_a_memory_store_appends_shares_and_rewrites_through_the_seam() {
    let (store, mut a) = MemoryStore::create("mem");
    let mut b = store.open();

    a.append(user("one")).unwrap();
    assert_eq!(b.refresh().unwrap(), 1, "b sees a's append");
    assert_eq!(texts(&b), ["one"]);

    // a appends again; b, not refreshed, expects the leaf it saw: the check under the
    // writers' lock reads a's line first and refuses, writing nothing.
    let two = a.append(user("two")).unwrap().id.clone();
    let one = b.leaf_id().map(str::to_owned);
    let moved = b
        .append_expecting(vec![(user("three"), Default::default())], Some(one))
        .unwrap_err();
    assert!(matches!(moved, SessionError::LeafMoved { actual: Some(ref id), .. } if *id == two));
    b.append(user("three")).unwrap();
    a.refresh().unwrap();
    assert_eq!(texts(&a), ["one", "two", "three"]);
    assert_eq!(a.context().messages.len(), 3);

    // Navigation persists through the store like any write.
    a.move_leaf(Some(&two)).unwrap();
    a.append(user("four")).unwrap();
    assert_eq!(texts(&store.open()), ["one", "two", "four"]);

    // A rewrite drops an entry; the store holds what the session holds.
    a.replace_entries(|entries| entries.retain(|e| text(e) != "three"))
        .unwrap();
    let reopened = store.open();
    assert_eq!(reopened.entries().len(), a.entries().len());
    assert_eq!(reopened.leaf_id(), a.leaf_id());
    assert_eq!(texts(&reopened), ["one", "two", "four"]);
}

/// The rewrite every store shares ([`Session::rewrite_with`]): when the store's write fails,
/// the entries and the leaf are as they were, and the index finds them again.
#[test]
fn a_failed_rewrite_leaves_the_session_as_it_was() {
    let (_store, mut a) = MemoryStore::create("mem");
    a.append(user("one")).unwrap();
    let leaf = a.append(user("two")).unwrap().id.clone();
    let failed = a.with_store(|_, s| {
        s.rewrite_with(Box::new(|entries| entries.clear()), |s| {
            assert!(
                s.entries().is_empty(),
                "the store writes the edited entries"
            );
            Err(SessionError::Storage("the store is away".to_owned()))
        })
    });
    assert!(matches!(failed, Err(SessionError::Storage(_))));
    assert_eq!(texts(&a), ["one", "two"]);
    assert_eq!(a.leaf_id(), Some(leaf.as_str()));
    assert!(a.get(&leaf).is_some(), "the index was rebuilt");
}
