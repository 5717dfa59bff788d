//! The database stops and starts again under a running daemon: requests fail with a clear
//! `storageUnavailable` error meanwhile, then work again without a restart of the daemon;
//! nothing acknowledged is lost. The password shows nowhere: not in the errors, not in the
//! debug log, not in `settings/get`.

use std::time::{Duration, Instant};

use devtools::daemon::{DaemonProcess, Framing, SpawnOptions, user};
use devtools::postgres::{PASSWORD, PgServer};
use serde_json::json;

use crate::support::{on_postgres, user_texts};

#[tokio::test]
async fn a_database_restart_fails_requests_clearly_then_they_recover() {
    let server = PgServer::start();
    let url = server.url("postgres");
    let log_path = tempfile::NamedTempFile::new().unwrap().into_temp_path();
    let mut d = DaemonProcess::spawn_opts(SpawnOptions {
        framing: Framing::Ndjson,
        settings: Some(on_postgres(json!({
            "tokenizer": "chars4",
            "storage": {"postgres": {"timeoutMs": 3000}}
        }))),
        env: vec![
            ("DATABASE_URL".into(), url.clone()),
            ("COMPACTD_LOG".into(), "debug".into()),
        ],
        stderr: Some(std::fs::File::create(&log_path).unwrap()),
        ..SpawnOptions::default()
    })
    .await;
    d.initialize(json!({}), json!({})).await;
    let session = d.create_session().await;
    d.append(&session, json!([user("before the restart")]))
        .await;
    let settings = d.ok("settings/get", json!({})).await;
    let shown = settings.to_string();
    assert!(!shown.contains(PASSWORD), "settings/get shows the password");

    server.stop();
    let error = d
        .err(
            "session/append",
            json!({"sessionId": session, "entries": [user("while it is down")]}),
            "storageUnavailable",
        )
        .await;
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("session database"), "{message}");
    assert!(
        message.contains("127.0.0.1"),
        "the error names the server: {message}"
    );
    assert!(!message.contains(PASSWORD), "{message}");
    d.err("session/list", json!({}), "storageUnavailable").await;

    server.restart();
    let start = Instant::now();
    loop {
        match d
            .request(
                "session/append",
                json!({"sessionId": session, "entries": [user("after the restart")]}),
            )
            .await
        {
            Ok(_) => break,
            Err(e) => {
                assert_eq!(e["data"]["kind"], "storageUnavailable", "{e}");
                assert!(
                    start.elapsed() < Duration::from_secs(20),
                    "no recovery after the restart: {e}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    d.take_all("session/entriesAppended");
    let context = d.ok("session/context", json!({"sessionId": session})).await;
    assert_eq!(
        user_texts(&context),
        vec!["before the restart", "after the restart"]
    );
    // A second daemon sees the same.
    d.ok("session/list", json!({})).await;
    d.finish().await;
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(log.contains("DEBUG"), "debug logging was on");
    assert!(!log.contains(PASSWORD), "the password is in the log");
}
