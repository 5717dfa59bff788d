use pretty_assertions::assert_eq;

use super::*;
use crate::session::file::CreateOptions;
use crate::session::message::AgentMessage;
use crate::session::{CompactionEntry, SessionContext};

fn user(text: &str) -> EntryKind {
    EntryKind::Message(AgentMessage::user_text(text, 1))
}

fn compaction(first_kept: &str, summary: &str) -> EntryKind {
    EntryKind::Compaction(CompactionEntry {
        summary: summary.into(),
        short_summary: None,
        first_kept_entry_id: first_kept.into(),
        tokens_before: 100,
        details: None,
        preserve_data: None,
        from_extension: None,
        extra: Default::default(),
    })
}

fn texts(c: &SessionContext) -> Vec<String> {
    c.messages
        .iter()
        .map(|m| match m {
            AgentMessage::User(u) => u.content.joined_text(""),
            AgentMessage::CompactionSummary(s) => format!("summary: {}", s.summary),
            other => format!("{other:?}"),
        })
        .collect()
}

fn session() -> (tempfile::TempDir, Session) {
    let dir = tempfile::tempdir().unwrap();
    let s = Session::create(dir.path().join("s.jsonl"), "/w", CreateOptions::default()).unwrap();
    (dir, s)
}

fn id_of(s: &mut Session, kind: EntryKind) -> String {
    s.append(kind).unwrap().id.clone()
}

fn undo(s: &mut Session, entry: Option<&str>) -> UndoPlan {
    let plan = plan_undo(s, entry).unwrap();
    let written = s
        .append_planned(plan.entries.clone(), plan.old_leaf_id.clone())
        .unwrap()
        .to_vec();
    assert_eq!(written.len(), plan.entries.len());
    plan
}

/// The context of the session as the file says, read again from disk.
fn reopened(s: &Session) -> Vec<String> {
    let (again, _) = Session::open(s.path()).unwrap();
    assert_eq!(again.leaf_id(), s.leaf_id(), "the file implies the leaf");
    texts(&again.context())
}

#[test]
fn undo_gives_the_context_before_the_compaction_then_what_came_after() {
    let (_dir, mut s) = session();
    id_of(&mut s, user("a"));
    let b = id_of(&mut s, user("b"));
    id_of(&mut s, user("c"));
    let before = texts(&s.context());
    let c = id_of(&mut s, compaction(&b, "S"));
    id_of(&mut s, user("d"));
    id_of(&mut s, user("e"));
    assert_eq!(texts(&s.context()), ["summary: S", "b", "c", "d", "e"]);

    let plan = undo(&mut s, None);
    assert_eq!(plan.compaction_id, c);
    assert!(!plan.restored);
    let mut expected = before.clone();
    expected.extend(["d".to_owned(), "e".to_owned()]);
    assert_eq!(texts(&s.context()), expected);
    assert_eq!(reopened(&s), expected);
    assert_eq!(s.leaf_id(), plan.leaf_id());

    // Undo of the undo: the compaction is back, with everything after it.
    let record = plan.entries[0].id.clone();
    id_of(&mut s, user("f"));
    let again = undo(&mut s, Some(&record));
    assert!(again.restored);
    assert_eq!(again.compaction_id, c);
    assert_eq!(texts(&s.context()), ["summary: S", "b", "c", "d", "e", "f"]);
    assert_eq!(reopened(&s), ["summary: S", "b", "c", "d", "e", "f"]);

    // And the default undo takes it off again.
    let third = undo(&mut s, None);
    assert_eq!(third.compaction_id, c);
    assert_eq!(texts(&s.context()), ["a", "b", "c", "d", "e", "f"]);
}

#[test]
fn undo_right_after_a_compaction_writes_only_the_record() {
    let (_dir, mut s) = session();
    let a = id_of(&mut s, user("a"));
    id_of(&mut s, user("b"));
    id_of(&mut s, compaction(&a, "S"));
    let plan = undo(&mut s, None);
    assert_eq!(plan.entries.len(), 1);
    assert_eq!(texts(&s.context()), ["a", "b"]);
    assert_eq!(reopened(&s), ["a", "b"]);
    id_of(&mut s, user("c"));
    assert_eq!(reopened(&s), ["a", "b", "c"]);
}

#[test]
fn undoing_twice_peels_both_compactions_and_an_older_one_drops_the_later() {
    let (_dir, mut s) = session();
    let a = id_of(&mut s, user("a"));
    id_of(&mut s, user("b"));
    let c1 = id_of(&mut s, compaction(&a, "S1"));
    let c = id_of(&mut s, user("c"));
    id_of(&mut s, user("d"));
    let c2 = id_of(&mut s, compaction(&c, "S2"));
    id_of(&mut s, user("e"));
    let top = s.leaf_id().unwrap().to_owned();
    assert_eq!(texts(&s.context()), ["summary: S2", "c", "d", "e"]);

    assert_eq!(undo(&mut s, None).compaction_id, c2);
    assert_eq!(
        texts(&s.context()),
        ["summary: S1", "a", "b", "c", "d", "e"]
    );
    assert_eq!(undo(&mut s, None).compaction_id, c1);
    assert_eq!(texts(&s.context()), ["a", "b", "c", "d", "e"]);
    assert_eq!(reopened(&s), ["a", "b", "c", "d", "e"]);
    assert_eq!(
        plan_undo(&s, None).unwrap_err(),
        UndoError::NoCompaction,
        "nothing left to undo"
    );

    // Back at the top, undoing the older one directly drops the later one too.
    s.move_leaf(Some(&top)).unwrap();
    let plan = undo(&mut s, Some(&c1));
    assert!(
        plan.entries
            .iter()
            .all(|e| !matches!(e.kind(), EntryKind::Compaction(_))),
        "copies leave compactions out"
    );
    assert_eq!(texts(&s.context()), ["a", "b", "c", "d", "e"]);
}

#[test]
fn ids_inside_copies_are_remapped() {
    let (_dir, mut s) = session();
    let a = id_of(&mut s, user("a"));
    let c = id_of(&mut s, compaction(&a, "S"));
    let d = id_of(&mut s, user("d"));
    id_of(
        &mut s,
        EntryKind::Label {
            target_id: d.clone(),
            label: Some("here".into()),
        },
    );
    let label_on_c = id_of(
        &mut s,
        EntryKind::Label {
            target_id: c.clone(),
            label: Some("compacted".into()),
        },
    );
    let leaf = s.leaf_id().unwrap().to_owned();
    s.branch_with_summary(Some(&leaf), "left a branch", None, None)
        .unwrap();
    let plan = undo(&mut s, None);
    let copy_of = |id: &str| {
        let record = UndoRecord::of(&plan.entries[0]).unwrap();
        record
            .copies
            .iter()
            .find(|(o, _)| o == id)
            .map(|(_, c)| c.clone())
            .unwrap()
    };
    let kinds: Vec<&EntryKind> = plan.entries.iter().map(Entry::kind).collect();
    match kinds[2] {
        EntryKind::Label { target_id, .. } => assert_eq!(target_id, &copy_of(&d)),
        other => panic!("{other:?}"),
    }
    match kinds[3] {
        // A label on an entry that is not copied keeps its target.
        EntryKind::Label { target_id, .. } => assert_eq!(target_id, &c),
        other => panic!("{other:?}"),
    }
    match kinds[4] {
        EntryKind::BranchSummary(b) => assert_eq!(b.from_id, copy_of(&label_on_c)),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        plan.entries[4].parent_id.as_deref(),
        Some(copy_of(&label_on_c).as_str())
    );
    let record = UndoRecord::of(&plan.entries[0]).unwrap();
    assert_eq!(record.undid, c);
    assert_eq!(record.from_leaf, plan.old_leaf_id);
    assert_eq!(plan.entries[0].parent_id.as_deref(), Some(a.as_str()));
}

#[test]
fn bad_targets_are_refused() {
    let (_dir, mut s) = session();
    let a = id_of(&mut s, user("a"));
    assert_eq!(plan_undo(&s, None).unwrap_err(), UndoError::NoCompaction);
    assert_eq!(
        plan_undo(&s, Some("nope")).unwrap_err(),
        UndoError::EntryNotFound("nope".into())
    );
    assert!(matches!(
        plan_undo(&s, Some(&a)).unwrap_err(),
        UndoError::NotUndoable { .. }
    ));
    let c = id_of(&mut s, compaction(&a, "S"));
    s.move_leaf(Some(&a)).unwrap();
    assert_eq!(
        plan_undo(&s, Some(&c)).unwrap_err(),
        UndoError::NotOnBranch(c.clone())
    );
}
