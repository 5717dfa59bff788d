//! Daemons on a database, and reading what the database holds.

use devtools::daemon::{DaemonProcess, Framing, SpawnOptions};
use serde_json::{Value, json};

/// Which backend a scenario runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    File,
    Postgres,
}

pub const BOTH: [Backend; 2] = [Backend::File, Backend::Postgres];

/// `settings` with `storage.backend = "postgres"`.
pub fn on_postgres(mut settings: Value) -> Value {
    settings
        .as_object_mut()
        .unwrap()
        .entry("storage")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .unwrap()
        .insert("backend".into(), json!("postgres"));
    settings
}

/// An initialized daemon storing its sessions in the database at `url` (through
/// `DATABASE_URL`), with `settings` as its user settings. Other daemons on the database may
/// write to its sessions: the notifications of their appends (`external`) need not be read.
pub async fn daemon_on(url: &str, settings: Value) -> DaemonProcess {
    let mut d = DaemonProcess::spawn_opts(SpawnOptions {
        framing: Framing::Ndjson,
        settings: Some(on_postgres(settings)),
        env: vec![("DATABASE_URL".into(), url.to_owned())],
        ..SpawnOptions::default()
    })
    .await;
    d.initialize(json!({}), json!({})).await;
    d.ignore_external_appends(true);
    d
}

/// An initialized daemon on `backend` (a fresh database of the shared server for Postgres).
pub async fn daemon(backend: Backend, settings: Value) -> DaemonProcess {
    match backend {
        Backend::File => {
            let mut d = DaemonProcess::spawn_with(Framing::Ndjson, Some(settings)).await;
            d.initialize(json!({}), json!({})).await;
            d
        }
        Backend::Postgres => {
            let url = devtools::postgres::shared().create_database();
            daemon_on(&url, settings).await
        }
    }
}

/// The texts of the user messages of a `session/context` result, in order.
pub fn user_texts(context: &Value) -> Vec<String> {
    context["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect()
}
