//! A daemon killed (SIGKILL) at random moments while it compacts, with appends in flight:
//! the database holds every acknowledged entry, each compaction whole or not at all, and a
//! session that loads clean with consistent counters. `COMPACTD_CRASH_SEED` replays a run.

use std::time::Duration;

use devtools::daemon::user;
use serde_json::{Value, json};

use crate::support::daemon_on;

fn settings() -> Value {
    json!({"tokenizer": "chars4", "compaction": {"enabled": false, "keepRecentTokens": 80}})
}

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut x = self.0;
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (x ^ (x >> 31)) % n
    }
}

#[tokio::test]
async fn sigkill_mid_compaction_leaves_no_half_compaction_and_loses_no_acknowledged_entry() {
    let seed = std::env::var("COMPACTD_CRASH_SEED")
        .ok()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
        .unwrap_or(0x9e5_c0de);
    let mut rng = Rng(seed);
    let server = devtools::postgres::shared();
    let url = server.create_database();
    let db = devtools::postgres::PgServer::database_of(&url);
    let mut first = daemon_on(&url, settings()).await;
    let session = first.create_session().await;
    first.finish().await;
    let mut acknowledged: Vec<String> = Vec::new();
    let mut compactions_seen = 0;
    for round in 0..12 {
        let mut d = daemon_on(&url, settings()).await;
        d.ok("session/open", json!({"sessionId": session})).await;
        for k in 0..6 {
            let text = format!("r{round}-{k} {}", "words ".repeat(40));
            let r = d.append(&session, json!([user(&text)])).await;
            acknowledged.push(r["appended"][0].as_str().unwrap().to_owned());
        }
        // A compaction, appends behind it, and a kill somewhere in between.
        let compact = d
            .send_request("session/compact", json!({"sessionId": session}))
            .await;
        let mut pending = Vec::new();
        for k in 0..4 {
            let text = format!("r{round}-late{k}");
            let id = d
                .send_request(
                    "session/append",
                    json!({"sessionId": session, "entries": [user(&text)]}),
                )
                .await;
            pending.push(id);
        }
        tokio::time::sleep(Duration::from_micros(rng.below(40_000))).await;
        d.pump(Duration::from_millis(0)).await;
        for id in pending {
            if let Some(r) = d.take_response(id)
                && let Some(entry) = r["result"]["appended"][0].as_str()
            {
                acknowledged.push(entry.to_owned());
            }
        }
        let compacted = d
            .take_response(compact)
            .and_then(|r| r["result"]["entryId"].as_str().map(str::to_owned));
        d.kill().await;

        // What is stored: a fresh daemon loads it with no warning, every acknowledged entry
        // is there, and each compaction line is a whole entry.
        let mut check = daemon_on(&url, settings()).await;
        let info = check
            .ok("session/open", json!({"sessionId": session}))
            .await;
        assert!(
            info.get("warnings").is_none_or(|w| w == &json!([])),
            "round {round}: {info}"
        );
        let tree = check
            .ok("session/tree", json!({"sessionId": session}))
            .await;
        let ids: Vec<&str> = tree["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["id"].as_str().unwrap())
            .collect();
        for id in &acknowledged {
            assert!(
                ids.contains(&id.as_str()),
                "round {round}: acknowledged {id} lost"
            );
        }
        if let Some(id) = &compacted {
            assert!(
                ids.contains(&id.as_str()),
                "round {round}: acknowledged compaction {id} lost"
            );
        }
        let stored: Vec<String> = server
            .query(
                db,
                &format!(
                    "SELECT convert_from(line, 'UTF8') FROM compactd_lines
                     WHERE session_id = '{session}' AND type = 'compaction' ORDER BY seq"
                ),
            )
            .lines()
            .map(str::to_owned)
            .collect();
        for line in &stored {
            let entry: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("round {round}: a torn compaction row: {e}: {line}"));
            assert!(entry["summary"].as_str().is_some_and(|s| !s.is_empty()));
            assert!(ids.contains(&entry["firstKeptEntryId"].as_str().unwrap()));
        }
        compactions_seen = stored.len();
        let counters = server.query(
            db,
            &format!(
                "SELECT s.next_seq = count(l.*) AND s.next_seq = max(l.seq) + 1
                 FROM compactd_sessions s JOIN compactd_lines l ON l.session_id = s.id
                 WHERE s.id = '{session}' GROUP BY s.id"
            ),
        );
        assert_eq!(counters, "t", "round {round}: counters out of step");
        check.finish().await;
    }
    assert!(
        compactions_seen > 0,
        "no compaction ever landed (seed {seed:#x})"
    );
}
