//! Several daemons on one database and one session: appends and compactions in flight from
//! all of them at once; every acknowledged entry is stored, once, in one chain; a daemon
//! sees another's appends without writing itself, and tells its client of them unasked.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use devtools::daemon::{DaemonProcess, user};
use serde_json::{Value, json};

use crate::support::daemon_on;

fn settings() -> Value {
    json!({"tokenizer": "chars4", "compaction": {"enabled": false, "keepRecentTokens": 80}})
}

/// The stored tree as a fresh daemon loads it: `(id → parent)` of every node.
async fn stored_nodes(url: &str, session: &str) -> HashMap<String, Option<String>> {
    let mut d = daemon_on(url, settings()).await;
    d.ok("session/open", json!({"sessionId": session})).await;
    let tree = d.ok("session/tree", json!({"sessionId": session})).await;
    d.finish().await;
    tree["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["id"].as_str().unwrap().to_owned(),
                n["parentId"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

async fn fleet_appends_and_compacts(n: usize, appends: usize) {
    let server = devtools::postgres::shared();
    let url = server.create_database();
    let mut daemons: Vec<DaemonProcess> = Vec::new();
    for _ in 0..n {
        daemons.push(daemon_on(&url, settings()).await);
    }
    let session = daemons[0].create_session().await;
    for d in daemons.iter_mut().skip(1) {
        d.ok("session/open", json!({"sessionId": session})).await;
    }
    // Every daemon pipelines its appends, with manual compactions among them.
    let mut sent: Vec<Vec<(i64, Option<String>)>> = Vec::new();
    for (i, d) in daemons.iter_mut().enumerate() {
        let mut mine = Vec::new();
        for k in 0..appends {
            let text = format!("d{i}-{k} {}", "text ".repeat(20));
            let id = d
                .send_request(
                    "session/append",
                    json!({"sessionId": session, "entries": [user(&text)]}),
                )
                .await;
            mine.push((id, Some(text)));
            if k % 10 == 9 {
                let id = d
                    .send_request("session/compact", json!({"sessionId": session}))
                    .await;
                mine.push((id, None));
            }
        }
        sent.push(mine);
    }
    let mut acked: Vec<(String, String)> = Vec::new();
    let mut compactions = Vec::new();
    for (d, mine) in daemons.iter_mut().zip(sent) {
        for (id, text) in mine {
            let r = d.read_until_response(id).await;
            match text {
                Some(text) => {
                    let entry = r["result"]["appended"][0]
                        .as_str()
                        .unwrap_or_else(|| panic!("an append failed: {r}"));
                    acked.push((entry.to_owned(), text));
                }
                None => match r.get("result") {
                    Some(result) => {
                        compactions.push(result["entryId"].as_str().unwrap().to_owned())
                    }
                    // Another daemon's append moved the leaf while this one summarised, or
                    // another compaction left nothing new: both leave nothing behind.
                    None => {
                        let kind = r["error"]["data"]["kind"].as_str().unwrap_or("");
                        assert!(
                            ["leafMoved", "nothingToCompact", "alreadyCompacted"].contains(&kind),
                            "a compaction failed unexpectedly: {r}"
                        );
                    }
                },
            }
        }
        d.drain_buffer();
    }
    assert_eq!(acked.len(), n * appends);
    if compactions.is_empty() {
        // Every racing compaction met another daemon's append (leafMoved), which is right
        // but leaves the compaction path unchecked: compact once more with the writers quiet.
        let r = daemons[0]
            .ok("session/compact", json!({"sessionId": session}))
            .await;
        compactions.push(r["entryId"].as_str().unwrap().to_owned());
        for d in daemons.iter_mut() {
            d.pump(std::time::Duration::from_millis(200)).await;
            d.drain_buffer();
        }
    }
    for d in daemons {
        d.finish().await;
    }

    let nodes = stored_nodes(&url, &session).await;
    for (id, text) in &acked {
        assert!(
            nodes.contains_key(id),
            "acknowledged entry {id} ({text}) is missing"
        );
    }
    for id in &compactions {
        assert!(
            nodes.contains_key(id),
            "acknowledged compaction {id} is missing"
        );
    }
    // One chain: no entry has two children, exactly one root.
    let mut children: HashMap<&str, usize> = HashMap::new();
    for parent in nodes.values().flatten() {
        *children.entry(parent.as_str()).or_default() += 1;
    }
    assert!(
        children.values().all(|&c| c == 1),
        "the chain forked: {children:?}"
    );
    assert_eq!(nodes.values().filter(|p| p.is_none()).count(), 1);
    // The database agrees with itself: one row per line, counters in step.
    let db = devtools::postgres::PgServer::database_of(&url);
    let check = server.query(
        db,
        &format!(
            "SELECT s.next_seq = count(l.*), s.entry_count, count(DISTINCT l.entry_id)
             FROM compactd_sessions s JOIN compactd_lines l ON l.session_id = s.id
             WHERE s.id = '{session}' GROUP BY s.id"
        ),
    );
    let fields: Vec<&str> = check.split('|').collect();
    assert_eq!(fields[0], "t", "next_seq matches the rows: {check}");
    assert_eq!(fields[1], nodes.len().to_string(), "entry_count: {check}");
    assert_eq!(
        fields[2],
        nodes.len().to_string(),
        "no duplicate entry: {check}"
    );
    let texts: HashSet<&str> = acked.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(texts.len(), acked.len());
}

#[tokio::test]
async fn two_daemons_append_and_compact_one_session_and_lose_nothing() {
    fleet_appends_and_compacts(2, 40).await;
}

#[tokio::test]
async fn four_daemons_append_and_compact_one_session_and_lose_nothing() {
    fleet_appends_and_compacts(4, 25).await;
}

/// With fresh reads (the default), a request sent after another daemon's append returned
/// sees it: a worker told "your turn" by another never reads a context without that turn.
#[tokio::test]
async fn a_read_after_another_daemons_append_returned_sees_it() {
    let url = devtools::postgres::shared().create_database();
    let mut a = daemon_on(&url, settings()).await;
    let mut b = daemon_on(&url, settings()).await;
    let session = a.create_session().await;
    b.ok("session/open", json!({"sessionId": session})).await;
    for i in 0..30 {
        let (writer, reader) = if i % 2 == 0 {
            (&mut a, &mut b)
        } else {
            (&mut b, &mut a)
        };
        let text = format!("turn {i}");
        writer.append(&session, json!([user(&text)])).await;
        let context = reader
            .ok("session/context", json!({"sessionId": session}))
            .await;
        let seen = crate::support::user_texts(&context);
        assert_eq!(seen.len(), i + 1, "{seen:?}");
        assert_eq!(seen.last(), Some(&text), "{seen:?}");
        // `session/usage` is remembered per revision: it too counts the new turn.
        let usage = reader
            .ok("session/usage", json!({"sessionId": session}))
            .await;
        let percent = usage["percent"].as_f64().unwrap();
        let window = usage["contextWindow"].as_f64().unwrap();
        let counted = (percent * window / 100.0).round() as u64;
        assert_eq!(
            counted,
            context["tokens"].as_u64().unwrap(),
            "{usage} {context}"
        );
    }
    a.finish().await;
    b.finish().await;
}

/// Without fresh reads, a daemon learns of another's appends from the change notifications,
/// a few milliseconds after the other's commit, without writing itself.
#[tokio::test]
async fn without_fresh_reads_a_daemon_sees_another_daemons_appends_by_notification() {
    let url = devtools::postgres::shared().create_database();
    let notified = || {
        let mut s = settings();
        s["storage"] = json!({"postgres": {"freshReads": false}});
        s
    };
    let mut a = daemon_on(&url, notified()).await;
    let mut b = daemon_on(&url, notified()).await;
    let session = a.create_session().await;
    b.ok("session/open", json!({"sessionId": session})).await;
    let before = b.ok("session/context", json!({"sessionId": session})).await;
    assert_eq!(before["messages"].as_array().unwrap().len(), 0);
    for i in 0..5 {
        let text = format!("from a {i}");
        a.append(&session, json!([user(&text)])).await;
        // B learns of it through the notification (or its next request after it).
        let start = Instant::now();
        loop {
            let context = b.ok("session/context", json!({"sessionId": session})).await;
            let seen = crate::support::user_texts(&context);
            if seen.last().map(String::as_str) == Some(text.as_str()) {
                assert_eq!(seen.len(), i + 1);
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "B never saw {text:?}: {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    // And B's own append lands after A's, which A sees in turn.
    b.append(&session, json!([user("from b")])).await;
    let start = Instant::now();
    loop {
        let context = a.ok("session/context", json!({"sessionId": session})).await;
        if crate::support::user_texts(&context)
            .last()
            .map(String::as_str)
            == Some("from b")
        {
            assert_eq!(context["messages"].as_array().unwrap().len(), 6);
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "A never saw B's append"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    a.finish().await;
    b.finish().await;
}

/// An append with `expectedLeafId` races another daemon's append: either it lands first, as
/// the child of the leaf it expected, or it fails with `leafMoved` and writes nothing; it
/// never lands below an entry its client did not know of (the check is made under the row
/// lock, not only against what this daemon had seen).
#[tokio::test]
async fn an_expected_leaf_is_checked_against_other_daemons_appends() {
    let url = devtools::postgres::shared().create_database();
    let mut a = daemon_on(&url, settings()).await;
    let mut b = daemon_on(&url, settings()).await;
    let session = a.create_session().await;
    b.ok("session/open", json!({"sessionId": session})).await;
    let mut leaf = a.append(&session, json!([user("start")])).await["leafId"].clone();
    let (mut refused, mut landed) = (0, 0);
    for round in 0..30 {
        // B's client believes the leaf is `leaf`; A appends at the same moment.
        let from_a = a
            .send_request(
                "session/append",
                json!({"sessionId": session, "entries": [user(&format!("a{round}"))]}),
            )
            .await;
        let from_b = b
            .send_request(
                "session/append",
                json!({"sessionId": session, "expectedLeafId": leaf,
                       "entries": [user(&format!("b{round}"))]}),
            )
            .await;
        let ra = a.read_until_response(from_a).await;
        let rb = b.read_until_response(from_b).await;
        assert!(ra["result"]["appended"][0].is_string(), "{ra}");
        match rb.get("result") {
            Some(result) => {
                landed += 1;
                let id = result["appended"][0].as_str().unwrap().to_owned();
                let tree = b.ok("session/tree", json!({"sessionId": session})).await;
                let node = tree["nodes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|n| n["id"] == id.as_str())
                    .cloned()
                    .unwrap_or_else(|| panic!("{id} not in the tree: {tree}"));
                assert_eq!(
                    node["parentId"], leaf,
                    "round {round}: B's entry landed below an entry its client never saw"
                );
            }
            None => {
                refused += 1;
                assert_eq!(rb["error"]["data"]["kind"], "leafMoved", "{rb}");
                assert_eq!(rb["error"]["data"]["expectedLeafId"], leaf, "{rb}");
            }
        }
        a.drain_buffer();
        b.drain_buffer();
        // Both daemons agree on the leaf before the next round.
        let start = Instant::now();
        leaf = loop {
            let la = a.ok("session/context", json!({"sessionId": session})).await;
            let lb = b.ok("session/context", json!({"sessionId": session})).await;
            let (ta, tb) = (
                crate::support::user_texts(&la),
                crate::support::user_texts(&lb),
            );
            if ta == tb {
                let tree = a.ok("session/tree", json!({"sessionId": session})).await;
                break tree["leafId"].clone();
            }
            assert!(start.elapsed() < Duration::from_secs(5), "{ta:?} / {tb:?}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        a.drain_buffer();
        b.drain_buffer();
    }
    assert_eq!(refused + landed, 30);
    a.finish().await;
    b.finish().await;
}

/// A daemon with a session open hears of another daemon's appends as the database announces
/// them: its client gets `session/entriesAppended` with `external: true`, the entries and the
/// new leaf, without sending any request. The writer's own client gets its usual
/// notification, not an external one.
#[tokio::test]
async fn another_daemons_appends_are_pushed_to_a_client_that_sends_nothing() {
    let url = devtools::postgres::shared().create_database();
    let mut a = daemon_on(&url, settings()).await;
    let mut b = daemon_on(&url, settings()).await;
    let session = a.create_session().await;
    b.ok("session/open", json!({"sessionId": session})).await;

    // A writes; B's client only reads.
    let written = a
        .ok(
            "session/append",
            json!({"sessionId": session, "entries": [user("one from a"), user("two from a")]}),
        )
        .await;
    let ids: Vec<Value> = written["appended"].as_array().unwrap().clone();
    let own = a.expect_notification("session/entriesAppended").await;
    assert!(own.get("external").is_none(), "{own}");
    let mut pushed: Vec<Value> = Vec::new();
    let mut leaf = Value::Null;
    while pushed.len() < 2 {
        let note = b.expect_notification("session/entriesAppended").await;
        assert_eq!(note["sessionId"], session.as_str(), "{note}");
        assert_eq!(note["external"], true, "{note}");
        leaf = note["leafId"].clone();
        pushed.extend(note["entries"].as_array().unwrap().iter().cloned());
    }
    let pushed_ids: Vec<Value> = pushed.iter().map(|e| e["id"].clone()).collect();
    assert_eq!(pushed_ids, ids);
    assert_eq!(leaf, written["leafId"]);
    assert_eq!(pushed[1]["message"]["content"], "two from a", "{pushed:?}");
    assert_eq!(pushed[1]["parentId"], ids[0]);

    // The other way round, and a label (an entry too); B's context already has A's entries.
    let context = b.ok("session/context", json!({"sessionId": session})).await;
    assert_eq!(
        crate::support::user_texts(&context),
        ["one from a", "two from a"]
    );
    let from_b = b
        .ok(
            "session/setLabel",
            json!({"sessionId": session, "targetId": ids[0], "label": "start"}),
        )
        .await;
    b.take_all("session/entriesAppended");
    let note = a.expect_notification("session/entriesAppended").await;
    assert_eq!(note["external"], true, "{note}");
    assert_eq!(note["entries"][0]["id"], from_b["entryId"], "{note}");
    assert_eq!(note["entries"][0]["type"], "label", "{note}");

    // Once B closed the session, A's appends are not pushed to it (to the end: `finish`
    // fails on any notification left unread).
    b.ok("session/close", json!({"sessionId": session})).await;
    b.ignore_external_appends(false);
    a.append(&session, json!([user("after b closed")])).await;
    let listed = b.ok("session/list", json!({})).await;
    assert_eq!(listed["sessions"][0]["open"], false, "{listed}");
    assert!(
        b.take_all("session/entriesAppended").is_empty(),
        "a closed session is still followed"
    );
    a.finish().await;
    b.finish().await;
}
