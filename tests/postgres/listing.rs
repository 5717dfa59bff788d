//! `session/list` on a database of many sessions: the sessions of one directory come from
//! the `(cwd, updated_at)` index, most recently written first, without reading any line; the
//! pages of a listing are ranges of the `(updated_at, id)` index.

use std::time::{Duration, Instant};

use devtools::daemon::user;
use devtools::postgres::PgServer;
use serde_json::json;

use crate::support::daemon_on;

/// Index scans of `index` so far, as the server's statistics count them.
fn index_scans(server: &PgServer, db: &str, index: &str) -> i64 {
    server
        .query(
            db,
            &format!("SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = '{index}'"),
        )
        .parse()
        .unwrap()
}

#[tokio::test]
async fn listing_one_directory_among_many_sessions_uses_the_index() {
    let server = devtools::postgres::shared();
    let url = server.create_database();
    let db = PgServer::database_of(&url);
    let mut d = daemon_on(&url, json!({"tokenizer": "chars4"})).await;
    let older = d.create_session().await;
    d.append(&older, json!([user("first")])).await;
    let newer = d.create_session().await;
    d.append(&newer, json!([user("second")])).await;
    // 20 000 other sessions in 100 other directories, written two at a time (pairs share
    // their update time: the id orders them).
    server.query(
        db,
        "INSERT INTO compactd_sessions (id, cwd, created, header, updated_at)
         SELECT 'other-' || g, '/elsewhere/' || (g % 100), '2026-01-01T00:00:00.000Z', '\\x7b7d',
                now() - (g % 10000) * interval '1 millisecond'
         FROM generate_series(1, 20000) g;
         ANALYZE compactd_sessions;",
    );
    let before = index_scans(server, db, "compactd_sessions_by_cwd");
    let listed = d.ok("session/list", json!({"cwd": d.project()})).await;
    let ids: Vec<&str> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["sessionId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [newer.as_str(), older.as_str()], "{listed}");
    // `modified` is the last write's time, from the row.
    let first = &listed["sessions"][0];
    assert!(
        first["modified"].as_str().unwrap() >= first["created"].as_str().unwrap()
            && first["modified"].as_str().unwrap().ends_with('Z'),
        "{listed}"
    );
    let everything = d.ok("session/list", json!({})).await;
    let all: Vec<&str> = everything["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["sessionId"].as_str().unwrap())
        .collect();
    assert_eq!(all.len(), 20_002);
    assert!(everything.get("nextCursor").is_none());
    // In pages of 500: the same sessions in the same order, each page a range of the index.
    let by_update_before = index_scans(server, db, "compactd_sessions_by_update");
    let mut paged: Vec<String> = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut params = json!({"limit": 500});
        if let Some(c) = &cursor {
            params["cursor"] = json!(c);
        }
        let page = d.ok("session/list", params).await;
        pages += 1;
        paged.extend(
            page["sessions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["sessionId"].as_str().unwrap().to_owned()),
        );
        match page.get("nextCursor").and_then(|c| c.as_str()) {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(pages, 41);
    assert_eq!(paged, all);
    // One directory in pages of one.
    let first = d
        .ok("session/list", json!({"cwd": d.project(), "limit": 1}))
        .await;
    assert_eq!(first["sessions"][0]["sessionId"], newer.as_str());
    let second = d
        .ok(
            "session/list",
            json!({"cwd": d.project(), "limit": 1, "cursor": first["nextCursor"]}),
        )
        .await;
    assert_eq!(second["sessions"][0]["sessionId"], older.as_str());
    assert!(second.get("nextCursor").is_none(), "{second}");
    // A backend's statistics reach the server when its connection ends at the latest.
    d.finish().await;
    let start = Instant::now();
    while index_scans(server, db, "compactd_sessions_by_cwd") <= before {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "listing one directory did not use compactd_sessions_by_cwd"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Every page of the whole listing was an index scan.
    while index_scans(server, db, "compactd_sessions_by_update") < by_update_before + pages {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the pages did not each use compactd_sessions_by_update"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
