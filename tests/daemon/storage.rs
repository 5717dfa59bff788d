//! The file-system edges through the real daemon: paths that are not regular files, write
//! failures (a file-size limit, a full disk, no permission) and a soak that combines them.
//! Each case and its outcome is listed in `docs/robustness.md` ("File-system edges").

use std::path::Path;

use devtools::daemon::{DaemonProcess, Framing, user};
use serde_json::{Value, json};

fn settings() -> Value {
    json!({"tokenizer": "chars4", "compaction": {"enabled": false}})
}

async fn spawn() -> DaemonProcess {
    let mut d = DaemonProcess::spawn_with(Framing::Ndjson, Some(settings())).await;
    d.initialize(json!({}), json!({})).await;
    d
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs");
    assert!(status.success(), "mkfifo {}", path.display());
}

/// Two FIFOs named like sessions (before the fix each blocked one of the runtime's two worker
/// threads in `open` forever, and with them every later request and the exit at EOF), and a
/// project settings file that is a FIFO: each request is answered (the opens with an error that
/// says what the path is), other requests keep being served, and the daemon exits at EOF.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifos_are_refused_and_nothing_waits_on_them() {
    let mut d = spawn().await;
    let fifos: Vec<_> = ["a.jsonl", "b.jsonl"]
        .iter()
        .map(|name| d.home.path().join(name))
        .collect();
    let mut sent = Vec::new();
    for fifo in &fifos {
        mkfifo(fifo);
        sent.push(d.send_request("session/open", json!({"path": fifo})).await);
    }
    for id in sent {
        let response = d.read_until_response(id).await;
        let message = response["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("is a FIFO, not a regular file"),
            "{response}"
        );
    }
    let project = d.home.path().join("fifo-project");
    std::fs::create_dir_all(project.join(".compactd")).unwrap();
    mkfifo(&project.join(".compactd/settings.json"));
    // Project settings that cannot be read are ignored with a warning, as before; the read
    // no longer blocks.
    d.ok("session/create", json!({"cwd": project})).await;
    let s = d.create_session().await;
    d.append(&s, json!([user("still serving")])).await;
    d.take_all("session/entriesAppended");
    let code = d.close_stdin_and_wait().await;
    assert_eq!(code, Some(0), "exits at EOF");
}
