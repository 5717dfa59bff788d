//! `session/list` on a database of many sessions: the sessions of one directory come from
//! the `(cwd, updated_at)` index, most recently written first, without reading any line.

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
    // 20 000 other sessions in 100 other directories.
    server.query(
        db,
        "INSERT INTO compactd_sessions (id, cwd, created, header)
         SELECT 'other-' || g, '/elsewhere/' || (g % 100), '2026-01-01T00:00:00.000Z', '\\x7b7d'
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
    assert_eq!(everything["sessions"].as_array().unwrap().len(), 20_002);
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
}
