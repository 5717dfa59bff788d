//! Opening a stored session reads only what the context at its leaf needs (the lines from the
//! newest compaction's first kept entry on, and a few entries before it), counted by the
//! store's line counter, and everything computed from it is what the whole file gives: the
//! context, usage, the compaction plan, the auto-compaction decision, navigation anywhere;
//! the rest is read on demand (the tree, an old entry).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use compactd::compaction::{CompactionParams, prepare_compaction};
use compactd::session::{Catalog, EntryKind, EntrySpan, Session};
use compactd::settings::Settings;
use compactd::testkit::{AutoMemory, PgOptions, PgStore, decide, import_file, usage_view};
use compactd::tokens::{Chars4, TokenCache};
use devtools::daemon::{assistant, user};
use devtools::{GenerateOptions, generate_session};
use serde_json::{Value, json};

use crate::support::daemon_on;

fn store(url: &str) -> Arc<PgStore> {
    PgStore::connect(&PgOptions {
        url: url.to_owned(),
        pool_size: 2,
        timeout: Duration::from_secs(30),
        fresh_reads: true,
    })
    .expect("the test database is reachable")
}

/// A generated session with many compactions (a small context window), branches, labels,
/// model and thinking-level changes.
fn generate(path: &Path, seed: u64, bytes: u64) -> devtools::GenerateStats {
    let mut options = GenerateOptions::for_target(seed, bytes);
    options.context_window = 24_000;
    options.reserve_tokens = 4_000;
    options.keep_recent_tokens = 3_000;
    options.model_change_every = 3;
    options.branch_every = 7;
    generate_session(std::fs::File::create(path).unwrap(), &options).unwrap()
}

/// What a client sees of a session at its leaf, with everything that depends on the path.
fn views(session: &Session) -> Value {
    let settings = Settings::default();
    let cache = TokenCache::new(Arc::new(Chars4));
    let path = session.path_to_leaf();
    // Everything but positions in the path, which a partly loaded session does not hold whole.
    let plan = prepare_compaction(&path, &CompactionParams::default(), &Chars4).map(|p| {
        let messages = |span: &EntrySpan| serde_json::to_value(span.to_vec()).unwrap();
        json!({
            "firstKeptEntryId": p.first_kept_entry_id,
            "messagesToSummarize": messages(&p.messages_to_summarize),
            "turnPrefixMessages": messages(&p.turn_prefix_messages),
            "recentMessages": messages(&p.recent_messages),
            "summarizedEntryIds": p.summarized.message_ids().collect::<Vec<_>>(),
            "isSplitTurn": p.is_split_turn,
            "tokensBefore": p.tokens_before,
            "previousSummary": p.previous_summary,
            "reusePreviousSummary": p.reuse_previous_summary,
            "fileOps": serde_json::to_value(&p.file_ops).unwrap(),
            "keepRecentTokens": p.keep_recent_tokens,
        })
    });
    let owned: Vec<_> = path.iter().map(|e| (*e).clone()).collect();
    let decision = owned.last().map(|last| {
        format!(
            "{:?}",
            decide(&owned, last, &settings, 24_000, 0, &AutoMemory::default())
        )
    });
    json!({
        "leaf": session.leaf_id(),
        "entries": session.visible_entry_count(),
        "context": session.context(),
        "usage": usage_view(session, &settings, &cache),
        "plan": plan,
        "decision": decision,
    })
}

#[test]
fn opening_a_long_compacted_session_reads_only_what_its_context_needs() {
    let url = devtools::postgres::shared().create_database();
    let store = store(&url);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("long.jsonl");
    let stats = generate(&file, 3, 3_000_000);
    assert!(stats.compactions >= 20, "{stats:?}");
    let (report, _) = import_file(&store, &file, false, |_, _| {}).unwrap();
    let lines = report.lines as u64;
    let (from_file, _) = Session::open(&file).unwrap();

    // The file's newest compaction on the leaf's path keeps from `first_kept`: what the
    // context needs is every line from there on, and a handful of entries before it.
    let path = from_file.path_to_leaf();
    let first_kept = path
        .iter()
        .rev()
        .find_map(|e| match e.kind() {
            EntryKind::Compaction(c) => Some(c.first_kept_entry_id.clone()),
            _ => None,
        })
        .expect("the leaf's path is compacted");
    let from_line = from_file
        .entries()
        .iter()
        .position(|e| e.id == first_kept)
        .unwrap() as u64;
    let tail = lines - from_line;

    let before = store.lines_read();
    let (mut stored, load_report) = store.open_session(&report.id).unwrap();
    let read = store.lines_read() - before;
    assert!(stored.is_partial());
    assert!(load_report.skipped.is_empty());
    assert!(
        read >= tail && read <= tail + 10,
        "read {read} lines; {tail} from the first kept entry on, of {lines}"
    );
    assert!(
        read * 10 < lines,
        "read {read} of {lines} lines: not far fewer"
    );
    assert_eq!(views(&stored), views(&from_file));

    // The tree needs the rest: read once, then the same session as the file's.
    let before = store.lines_read();
    stored.load_whole().unwrap();
    assert!(!stored.is_partial());
    assert_eq!(store.lines_read() - before, lines - tail);
    assert_eq!(stored.entries(), from_file.entries());
    assert_eq!(stored.tree().flat_nodes(), from_file.tree().flat_nodes());
    assert_eq!(views(&stored), views(&from_file));
}

/// Sessions of several shapes, opened partly and moved around: after each move (to entries
/// of the loaded part, and to old ones, which load the rest) and each append, the stored
/// session's views are the file's.
#[test]
fn a_partly_loaded_session_behaves_as_the_whole_file() {
    let url = devtools::postgres::shared().create_database();
    let store = store(&url);
    let dir = tempfile::tempdir().unwrap();
    let (mut partly_opened, mut moves_while_partial) = (0, 0);
    for seed in 1..=6u64 {
        let file = dir.path().join(format!("s{seed}.jsonl"));
        generate(&file, seed, 250_000 + seed * 60_000);
        let (report, _) = import_file(&store, &file, false, |_, _| {}).unwrap();
        let (mut from_file, _) = Session::open(&file).unwrap();
        let (mut stored, _) = store.open_session(&report.id).unwrap();
        partly_opened += usize::from(stored.is_partial());
        assert_eq!(views(&stored), views(&from_file), "seed {seed}: at open");

        // Targets: recent entries first (mostly in the loaded part), then older ones.
        let ids: Vec<String> = from_file
            .entries()
            .iter()
            .filter(|e| !e.is_leaf_move())
            .map(|e| e.id.clone())
            .collect();
        let recent = ids.iter().rev().step_by(2).take(12);
        let older = ids.iter().rev().skip(30).step_by(37).take(5);
        let targets: Vec<&String> = recent.chain(older).collect();
        for (k, target) in targets.iter().enumerate() {
            from_file.move_leaf(Some(target)).unwrap();
            let was_partial = stored.is_partial();
            stored.move_leaf(Some(target)).unwrap();
            moves_while_partial += usize::from(was_partial && stored.is_partial());
            assert_eq!(
                views(&stored),
                views(&from_file),
                "seed {seed}: after moving to {target}"
            );
            if k % 2 == 1 {
                let note = EntryKind::ThinkingLevelChange {
                    thinking_level: format!("level-{k}"),
                };
                from_file.append(note.clone()).unwrap();
                stored.append(note).unwrap();
                assert_eq!(
                    views(&stored).get("context"),
                    views(&from_file).get("context"),
                    "seed {seed}: after an append at {target}"
                );
            }
        }
        stored.load_whole().unwrap();
        assert_eq!(
            stored.tree().flat_nodes().len(),
            from_file.tree().flat_nodes().len()
        );
    }
    assert!(
        partly_opened >= 3,
        "only {partly_opened} of 6 sessions were opened partly"
    );
    assert!(
        moves_while_partial >= 6,
        "only {moves_while_partial} moves stayed in the loaded part"
    );
}

/// Through the daemons: one writes a session (compactions, branches, labels, model, thinking,
/// mode and rule entries), another opens it (partly) and answers every read as the writer
/// does, compaction previews and navigation included; its tree loads the rest.
#[tokio::test]
async fn a_daemon_opening_a_compacted_session_answers_as_its_writer() {
    let url = devtools::postgres::shared().create_database();
    let settings = json!({"tokenizer": "chars4",
        "compaction": {"enabled": false, "keepRecentTokens": 150}});
    let mut a = daemon_on(&url, settings.clone()).await;
    let s = a.create_session().await;
    let mut early = Vec::new();
    for i in 0..24 {
        let words = "words ".repeat(25);
        let r = a
            .append(
                &s,
                json!([
                    user(&format!("question {i}: {words}")),
                    assistant(&format!("answer {i}: {words}"), 400 + i * 40)
                ]),
            )
            .await;
        early.push(r["appended"][0].as_str().unwrap().to_owned());
        let extra = match i % 6 {
            0 => json!({"type": "thinkingLevelChange", "thinkingLevel": format!("t{i}")}),
            1 => json!({"type": "modelChange", "model": format!("p/m{i}"), "role": "smol"}),
            2 => {
                json!({"type": "raw", "entry": {"type": "ttsr_injection", "injectedRules": [format!("rule-{}", i % 4)]}})
            }
            3 => json!({"type": "modeChange", "mode": format!("mode-{i}")}),
            4 => json!({"type": "label", "targetId": early[0], "label": format!("l{i}")}),
            _ => json!({"type": "custom", "customType": "note", "data": {"i": i}}),
        };
        a.append(&s, json!([extra])).await;
        if i % 7 == 6 {
            a.ok("session/compact", json!({"sessionId": s})).await;
            a.take_all("session/compactionStarted");
            a.take_all("session/compactionFinished");
            a.take_all("session/compactionDelta");
            a.take_all("session/entriesAppended");
        }
        if i == 10 {
            // A branch: back to an early answer, then on from there.
            a.ok(
                "session/navigateTree",
                json!({"sessionId": s, "targetId": early[8]}),
            )
            .await;
            a.take_all("session/treeNavigated");
        }
    }
    a.ok("session/compact", json!({"sessionId": s})).await;
    a.take_all("session/compactionStarted");
    a.take_all("session/compactionFinished");
    a.take_all("session/compactionDelta");
    a.take_all("session/entriesAppended");
    a.append(&s, json!([user("after the last compaction")]))
        .await;

    // What B reads, counted by the server (pg_stat_statements: rows each statement returned).
    let server = devtools::postgres::shared();
    let db = devtools::postgres::PgServer::database_of(&url);
    server.query(db, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
    let total: u64 = server
        .query(
            db,
            &format!("SELECT count(*) FROM compactd_lines WHERE session_id = '{s}'"),
        )
        .parse()
        .unwrap();
    let mut b = daemon_on(&url, settings).await;
    server.query(db, "SELECT pg_stat_statements_reset()");
    let opened = b.ok("session/open", json!({"sessionId": s})).await;
    b.ok("session/context", json!({"sessionId": s})).await;
    let lines_read = |server: &devtools::postgres::PgServer| -> u64 {
        server
            .query(
                db,
                "SELECT coalesce(sum(rows), 0) FROM pg_stat_statements
                 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                   AND query ILIKE '%compactd_lines%'",
            )
            .parse()
            .unwrap()
    };
    let read = lines_read(server);
    assert!(
        read > 0 && read * 4 < total,
        "opening read {read} rows of lines; the session has {total}"
    );
    let own = a.ok("session/tree", json!({"sessionId": s})).await;
    assert_eq!(opened["leafId"], own["leafId"]);
    for (method, params) in [
        ("session/context", json!({"sessionId": s})),
        ("session/usage", json!({"sessionId": s})),
        ("session/compact", json!({"sessionId": s, "preview": true})),
    ] {
        let mut theirs = b.ok(method, params.clone()).await;
        let mut ours = a.ok(method, params).await;
        // A preview's id names it in the daemon that drafted it: each daemon has its own.
        for answer in [&mut theirs, &mut ours] {
            if let Some(id) = answer.as_object_mut().and_then(|o| o.remove("previewId")) {
                assert!(id.is_string(), "{method}: previewId {id}");
            }
        }
        assert_eq!(theirs, ours, "{method}");
    }
    for d in [&mut a, &mut b] {
        d.take_all("session/compactionStarted");
        d.take_all("session/compactionFinished");
        d.take_all("session/compactionDelta");
    }
    // B prunes nothing more than A would, compacts (on what it loaded) and appends; A hears
    // of both, and both contexts agree; so does a navigation between loaded entries.
    let prune = json!({"sessionId": s, "dryRun": true});
    assert_eq!(
        b.ok("session/prune", prune.clone()).await,
        a.ok("session/prune", prune).await
    );
    let compacted = b.ok("session/compact", json!({"sessionId": s})).await;
    heard_of(&mut a, &compacted["entryId"]).await;
    let from_b = b.append(&s, json!([user("from b")])).await;
    heard_of(&mut a, &from_b["appended"][0]).await;
    for d in [&mut a, &mut b] {
        d.take_all("session/compactionStarted");
        d.take_all("session/compactionFinished");
        d.take_all("session/compactionDelta");
        d.take_all("session/entriesAppended");
    }
    assert_eq!(
        a.ok("session/context", json!({"sessionId": s})).await,
        b.ok("session/context", json!({"sessionId": s})).await
    );
    let back = json!({"sessionId": s, "targetId": opened["leafId"], "summarize": true,
                      "preview": true});
    assert_eq!(
        b.ok("session/navigateTree", back.clone()).await,
        a.ok("session/navigateTree", back).await
    );
    assert!(
        lines_read(server) < total,
        "nothing so far needed the rest of the session"
    );
    // A navigation to the first answer reads the rest, and is A's.
    let nav = json!({"sessionId": s, "targetId": early[1], "summarize": true, "preview": true});
    assert_eq!(
        b.ok("session/navigateTree", nav.clone()).await,
        a.ok("session/navigateTree", nav).await
    );
    assert!(
        lines_read(server) >= total,
        "navigating to an entry before the loaded part read the rest"
    );
    // A label written by B on the first entry; then the trees agree.
    b.ok(
        "session/setLabel",
        json!({"sessionId": s, "targetId": early[0], "label": "first"}),
    )
    .await;
    let label = b.take_all("session/entriesAppended");
    heard_of(&mut a, &label[0]["entries"][0]["id"]).await;
    let tree = b.ok("session/tree", json!({"sessionId": s})).await;
    assert_eq!(tree, a.ok("session/tree", json!({"sessionId": s})).await);
    assert_eq!(
        tree["nodes"].as_array().unwrap().len(),
        own["nodes"].as_array().unwrap().len() + 3
    );
    a.finish().await;
    b.finish().await;
}

/// Waits until `d`'s client is told of another daemon's entry `id`.
async fn heard_of(d: &mut devtools::daemon::DaemonProcess, id: &Value) {
    loop {
        let note = d.expect_notification("session/entriesAppended").await;
        if note["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| &e["id"] == id)
        {
            assert_eq!(note["external"], true, "{note}");
            return;
        }
    }
}
