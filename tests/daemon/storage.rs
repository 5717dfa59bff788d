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

/// DESIGN §2 "Size controls" (spec §1.4), lossless: a 2 MB image goes to the blob store as
/// `blob:sha256:<hex>`, a 600,000-character tool output is written in the reference's truncated
/// form with its full text in the store, and compactd's context returns both in full.
#[tokio::test]
async fn large_images_and_strings_go_to_the_blob_store_and_come_back_whole() {
    use base64::Engine as _;
    let mut d = devtools::daemon::DaemonProcess::spawn().await;
    let blobs = d.home.path().join("blob-store");
    d.initialize(
        serde_json::json!({}),
        serde_json::json!({"settings": {"storage": {"blobDir": blobs}}}),
    )
    .await;
    let info = d
        .ok("session/create", serde_json::json!({"cwd": d.project()}))
        .await;
    let session = info["sessionId"].as_str().unwrap().to_owned();
    let path = std::path::PathBuf::from(info["path"].as_str().unwrap());

    let image: Vec<u8> = (0..2_000_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let image_b64 = base64::engine::general_purpose::STANDARD.encode(&image);
    let small_b64 = base64::engine::general_purpose::STANDARD.encode(b"tiny png");
    let output: String = (0..600_000u32)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let entries = serde_json::json!([
        {"type": "message", "message": {"role": "user", "timestamp": 1, "content": [
            {"type": "text", "text": "what is in this picture?"},
            {"type": "image", "data": image_b64, "mimeType": "image/png"},
            {"type": "image", "data": small_b64, "mimeType": "image/png"}]}},
        {"type": "message", "message": {"role": "toolResult", "toolCallId": "c1",
            "toolName": "bash", "timestamp": 2, "isError": false,
            "content": [{"type": "text", "text": output}]}}
    ]);
    d.ok(
        "session/append",
        serde_json::json!({"sessionId": session, "entries": entries}),
    )
    .await;
    d.take_all("session/entriesAppended");

    // The file: the blob reference and the truncated text.
    let lines = devtools::daemon::file_entries(&path);
    let hex = compactd::session::sha256_hex(&image);
    let user = &lines[0]["message"]["content"];
    assert_eq!(user[1]["data"], format!("blob:sha256:{hex}"));
    assert_eq!(
        user[2]["data"],
        small_b64.as_str(),
        "small images stay inline"
    );
    let written = lines[1]["message"]["content"][0]["text"].as_str().unwrap();
    let notice = "\n\n[Session persistence truncated large content]";
    assert_eq!(written.len(), 500_000);
    assert!(written.ends_with(notice));
    assert!(output.starts_with(written.strip_suffix(notice).unwrap()));
    let raw = std::fs::read_to_string(&path).unwrap();
    assert!(raw.len() < 600_000, "the image bytes are not in the file");
    // The store: the raw image bytes and the full text, each named by its SHA-256.
    assert_eq!(std::fs::read(blobs.join(&hex)).unwrap(), image);
    let text_ref = lines[1]["compactdFullText"]["/message/content/0/text"]
        .as_str()
        .unwrap();
    let text_hex = text_ref.strip_prefix("blob:sha256:").unwrap();
    assert_eq!(text_hex, compactd::session::sha256_hex(output.as_bytes()));
    assert_eq!(
        std::fs::read_to_string(blobs.join(text_hex)).unwrap(),
        output
    );

    // compactd's context has both in full, in this process and after a reopen.
    let mut session = session;
    for round in 0..2 {
        let context = d
            .ok("session/context", serde_json::json!({"sessionId": session}))
            .await;
        let messages = context["messages"].as_array().unwrap();
        assert_eq!(
            messages[0]["content"][1]["data"],
            image_b64.as_str(),
            "round {round}"
        );
        assert_eq!(
            messages[1]["content"][0]["text"],
            output.as_str(),
            "round {round}"
        );
        if round == 0 {
            d.ok("session/close", serde_json::json!({"sessionId": session}))
                .await;
            let reopened = d
                .ok("session/open", serde_json::json!({"path": path}))
                .await;
            session = reopened["sessionId"].as_str().unwrap().to_owned();
        }
    }
    d.finish().await;
}

/// The daemon under a file-size limit (`prlimit --fsize`, i.e. `ulimit -f`) of `limit` bytes.
async fn spawn_with_file_size_limit(limit: u64) -> DaemonProcess {
    let mut d = DaemonProcess::spawn_opts(devtools::daemon::SpawnOptions {
        settings: Some(settings()),
        wrapper: vec!["prlimit".into(), format!("--fsize={limit}:{limit}")],
        ..Default::default()
    })
    .await;
    d.initialize(json!({}), json!({})).await;
    d
}

fn temp_files_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect()
}

fn assert_io_error(error: &Value, os_error: &str) {
    assert_eq!(error["code"], -32023, "{error}");
    assert_eq!(error["data"]["kind"], "ioError", "{error}");
    assert_eq!(error["data"]["osError"], os_error, "{error}");
    assert!(error["data"]["errno"].as_i64().is_some(), "{error}");
    assert!(error["data"]["path"].as_str().is_some(), "{error}");
}

/// A daemon whose log cannot be written (its stderr is a file already past `ulimit -f`, as a
/// full disk or a closed pipe would be) keeps answering: before, tracing reported the failed
/// write with `eprintln!`, which panicked on the same stderr inside the task that logged, so
/// `initialize` was never answered.
#[tokio::test]
async fn a_daemon_whose_log_cannot_be_written_keeps_answering() {
    let limit = 4096;
    let log_dir = tempfile::tempdir().unwrap();
    let log = log_dir.path().join("stderr.log");
    std::fs::write(&log, vec![b'x'; 2 * limit as usize]).unwrap();
    let stderr = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    let mut d = DaemonProcess::spawn_opts(devtools::daemon::SpawnOptions {
        settings: Some(settings()),
        stderr: Some(stderr),
        wrapper: vec!["prlimit".into(), format!("--fsize={limit}:{limit}")],
        ..Default::default()
    })
    .await;
    d.initialize(json!({}), json!({})).await;
    let path = d.home.path().join("logged.jsonl");
    let info = d
        .ok("session/create", json!({"path": path, "cwd": d.project()}))
        .await;
    let s = info["sessionId"].as_str().unwrap().to_owned();
    d.append(&s, json!([user("hello")])).await;
    let context = d.ok("session/context", json!({"sessionId": s})).await;
    assert_eq!(context["messages"].as_array().unwrap().len(), 1);
    assert_eq!(
        std::fs::metadata(&log).unwrap().len(),
        2 * limit,
        "the log did not grow"
    );
    assert_eq!(d.close_stdin_and_wait().await, Some(0));
}

/// Under `ulimit -f`: a 3-entry append whose write passes the limit after part of the batch is
/// answered with `ioError` (`EFBIG`) and cut back, so the file is byte for byte what it was and
/// a retry duplicates nothing; the daemon lives on (before: SIGXFSZ killed it with no answer).
#[tokio::test]
async fn an_append_past_the_file_size_limit_is_an_error_and_leaves_nothing() {
    let limit = 4096;
    let mut d = spawn_with_file_size_limit(limit).await;
    let path = d.home.path().join("limited.jsonl");
    let info = d
        .ok("session/create", json!({"path": path, "cwd": d.project()}))
        .await;
    let s = info["sessionId"].as_str().unwrap().to_owned();
    d.append(&s, json!([user(&"a".repeat(2500))])).await;
    let before = std::fs::read(&path).unwrap();
    assert!((before.len() as u64) < limit - 1000, "{}", before.len());
    let batch = json!([
        user(&"b".repeat(700)),
        user(&"c".repeat(700)),
        user(&"d".repeat(700))
    ]);
    for attempt in 0..2 {
        let error = d
            .request("session/append", json!({"sessionId": s, "entries": batch}))
            .await
            .expect_err("the batch cannot be written");
        assert_io_error(&error, "EFBIG");
        assert_eq!(
            std::fs::read(&path).unwrap(),
            before,
            "attempt {attempt}: part of the failed batch is in the file"
        );
    }
    // A batch that fits is still written, after the kept entry.
    d.append(&s, json!([user("small")])).await;
    let texts: Vec<String> = devtools::daemon::file_entries(&path)
        .iter()
        .map(|e| match &e["message"]["content"] {
            Value::String(text) => text.clone(),
            content => content[0]["text"].as_str().unwrap_or_default().to_owned(),
        })
        .collect();
    assert_eq!(texts, vec!["a".repeat(2500), "small".to_owned()]);
    let context = d.ok("session/context", json!({"sessionId": s})).await;
    assert_eq!(
        context["messages"].as_array().unwrap().len(),
        2,
        "{context}"
    );
    assert!(temp_files_in(d.home.path()).is_empty());
    d.finish().await;
}

/// Under `ulimit -f`: a rewrite (the migration of a version 1 file on its first write) whose
/// temp file passes the limit is answered with `ioError` (`EFBIG`); the temp file is removed
/// and the file is unchanged; the daemon keeps serving (before: SIGXFSZ killed it and left the
/// `.tmp`).
#[tokio::test]
async fn a_rewrite_past_the_file_size_limit_is_an_error_and_leaves_no_temp_file() {
    let limit = 4096;
    let mut d = spawn_with_file_size_limit(limit).await;
    let path = d.home.path().join("old.jsonl");
    let mut v1 = std::fs::read_to_string(devtools::fixtures::session("v1.jsonl")).unwrap();
    v1.push_str(&format!(
        "{}\n",
        json!({"type": "message", "timestamp": "2025-11-20T23:40:00.000Z",
               "message": {"role": "user", "content": [{"type": "text", "text": "x".repeat(5000)}], "timestamp": 9}})
    ));
    std::fs::write(&path, &v1).unwrap();
    let info = d.ok("session/open", json!({"path": path})).await;
    let s = info["sessionId"].as_str().unwrap().to_owned();
    let error = d
        .request(
            "session/append",
            json!({"sessionId": s, "entries": [user("after")]}),
        )
        .await
        .expect_err("the migration cannot be written");
    assert_io_error(&error, "EFBIG");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), v1);
    assert!(
        temp_files_in(d.home.path()).is_empty(),
        "{:?}",
        temp_files_in(d.home.path())
    );
    // Still serving, and the session still reads as before.
    let context = d.ok("session/context", json!({"sessionId": s})).await;
    assert!(
        context["messages"]
            .as_array()
            .is_some_and(|m| !m.is_empty()),
        "{context}"
    );
    d.finish().await;
}
