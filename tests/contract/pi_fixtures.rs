//! The reference's real session fixtures (`tests/fixtures/pi-sessions/`, MIT, see the note
//! there): both are version 1 and must migrate in memory.

use compactd::session::EntryKind;
use compactd::session::{AgentMessage, Session};
use devtools::fixtures::pi_session;

fn count(s: &Session, pred: impl Fn(&EntryKind) -> bool) -> usize {
    s.entries().iter().filter(|e| pred(e.kind())).count()
}

#[test]
fn large_session_loads_and_migrates() {
    let path = pi_session("large-session.jsonl");
    let before = std::fs::read(&path).unwrap();
    let (s, report) = Session::open(&path).unwrap();
    assert_eq!(report.migrated_from, Some(1));
    assert!(report.skipped.is_empty() && report.duplicate_ids.is_empty());
    assert_eq!(s.header().version, Some(3));
    assert_eq!(s.entries().len(), 1018);
    assert_eq!(count(&s, |k| matches!(k, EntryKind::Message(_))), 914);
    assert_eq!(
        count(&s, |k| matches!(k, EntryKind::ThinkingLevelChange { .. })),
        103
    );
    assert_eq!(count(&s, |k| matches!(k, EntryKind::ModelChange { .. })), 1);
    let roles = |role: &str| {
        s.entries()
            .iter()
            .filter(|e| e.message().is_some_and(|m| m.role() == role))
            .count()
    };
    assert_eq!(
        (roles("assistant"), roles("toolResult"), roles("user")),
        (453, 373, 88)
    );
    assert_eq!(s.path_to_leaf().len(), 1018, "one linear chain");
    assert!(s.context().messages.len() > 100);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "opening never writes"
    );
}

#[test]
fn before_compaction_context_starts_with_the_latest_summary() {
    let (s, report) = Session::open(pi_session("before-compaction.jsonl")).unwrap();
    assert_eq!(report.migrated_from, Some(1));
    assert_eq!(s.entries().len(), 1002);
    assert_eq!(count(&s, |k| matches!(k, EntryKind::Message(_))), 990);
    let compactions: Vec<_> = s
        .entries()
        .iter()
        .filter_map(|e| match e.kind() {
            EntryKind::Compaction(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(compactions.len(), 2);
    assert_eq!(
        compactions
            .iter()
            .map(|c| c.tokens_before)
            .collect::<Vec<_>>(),
        [175_004, 185_014]
    );
    // firstKeptEntryIndex 293 and 551 count the header: entries 292 and 550.
    assert_eq!(compactions[0].first_kept_entry_id, s.entries()[292].id);
    assert_eq!(compactions[1].first_kept_entry_id, s.entries()[550].id);

    let ctx = s.context();
    let AgentMessage::CompactionSummary(first) = &ctx.messages[0] else {
        panic!("message 0 is {}", ctx.messages[0].role())
    };
    assert_eq!(first.summary, compactions[1].summary);
    assert_eq!(first.tokens_before, 185_014);
    assert_eq!(
        ctx.entry_ids[1],
        s.entries()[550].id,
        "kept region starts at the first kept entry"
    );
    assert!(
        ctx.messages[1..]
            .iter()
            .all(|m| m.role() != "compactionSummary")
    );
}
