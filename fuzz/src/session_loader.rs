//! `session_loader`: arbitrary bytes as a session file, opened with [`Session::open`].
//!
//! Invariants: opening never panics or hangs; a refused file is refused with an error that
//! names the file; a file that opens can build its context, tree and leaf path; and rewriting
//! it (as version 3) then opening it again gives the same header, entries and leaf, with the
//! same malformed lines kept and nothing left to migrate or repair.

use std::cell::RefCell;
use std::fs;
use std::path::PathBuf;

use compactd::session::{CURRENT_SESSION_VERSION, Session, SessionError};
use tempfile::TempDir;

thread_local! {
    /// One directory for the whole fuzzing process: creating one per input would dominate.
    static DIR: RefCell<Option<TempDir>> = const { RefCell::new(None) };
}

fn session_file() -> PathBuf {
    DIR.with(|dir| {
        dir.borrow_mut()
            .get_or_insert_with(|| tempfile::tempdir().expect("a temp dir can be created"))
            .path()
            .join("session.jsonl")
    })
}

pub fn check(data: &[u8]) {
    let file = session_file();
    fs::write(&file, data).expect("the temp file can be written");
    let (mut session, report) = match Session::open(&file) {
        Ok(opened) => opened,
        Err(error @ SessionError::InvalidHeader { line: 1, .. }) => {
            let text = error.to_string();
            assert!(text.contains(&file.display().to_string()), "{text}");
            return;
        }
        Err(other) => panic!("a file that exists should open or be refused: {other}"),
    };
    let _ = session.context();
    let _ = session.tree();
    let _ = session.path_to_leaf();

    let mut header = session.header().clone();
    // A rewrite lifts older versions to the current one and leaves newer ones alone.
    header.version = Some(
        header
            .version
            .map_or(CURRENT_SESSION_VERSION, |v| v.max(CURRENT_SESSION_VERSION)),
    );
    let entries = session.entries().to_vec();
    let leaf = session.leaf_id().map(str::to_owned);

    session
        .rewrite()
        .expect("a session in a temp dir can be rewritten");
    assert_eq!(
        session.entries(),
        entries,
        "the rewrite changed the entries in memory"
    );
    let (reloaded, second) = Session::open(&file).expect("a rewritten session opens");
    assert_eq!(reloaded.header(), &header, "the header changed on reload");
    assert_eq!(reloaded.entries(), entries, "the entries changed on reload");
    assert_eq!(
        reloaded.leaf_id(),
        leaf.as_deref(),
        "the leaf changed on reload"
    );
    assert_eq!(
        second.skipped.len(),
        report.skipped.len(),
        "{second:?} vs {report:?}"
    );
    assert_eq!(second.duplicate_ids.len(), report.duplicate_ids.len());
    assert_eq!(second.torn_tail, None, "the rewrite left a torn tail");
    assert_eq!(second.migrated_from, None, "the rewrite did not migrate");
}
