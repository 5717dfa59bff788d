//! Two writers on one session file (issue 6, item 2): two daemons, and a daemon with the CLI.
//! Appends from both never interleave or corrupt lines, a rewrite (prune) by one never loses
//! the other's appends, and each sees the other's entries without a restart. The protocol
//! they follow is in `docs/robustness.md` ("Two writers").

use std::path::{Path, PathBuf};

use compactd::session::Session;
use devtools::daemon::{DaemonProcess, user};
use serde_json::{Value, json};

/// A tool call and its large output (chars4: ~12k tokens), so pruning has work.
fn tool_round(j: usize) -> Vec<Value> {
    vec![
        user(&format!("step {j}")),
        json!({"type":"message","message":{"role":"assistant",
            "content":[{"type":"toolCall","id":format!("call{j}"),"name":"bash","arguments":{}}],
            "provider":"p","model":"m","usage":{"input":10,"output":10,"cacheRead":0,"cacheWrite":0,"totalTokens":20},
            "stopReason":"toolUse","timestamp":2}}),
        json!({"type":"message","message":{"role":"toolResult","toolCallId":format!("call{j}"),
            "toolName":"bash","content":[{"type":"text","text":"output line\n".repeat(4000)}],
            "isError":false,"timestamp":3}}),
    ]
}

fn settings() -> Value {
    json!({"tokenizer": "chars4", "compaction": {"enabled": false, "keepRecentTokens": 300}})
}

async fn spawn() -> DaemonProcess {
    let mut d =
        DaemonProcess::spawn_with(devtools::daemon::Framing::Ndjson, Some(settings())).await;
    d.initialize(json!({}), json!({})).await;
    d
}

async fn open(d: &mut DaemonProcess, path: &Path) -> String {
    let info = d.ok("session/open", json!({"path": path})).await;
    info["sessionId"].as_str().unwrap().to_owned()
}

/// Sends `n` appends tagged `tag` without waiting; returns the request ids and their texts.
async fn send_appends(d: &mut DaemonProcess, s: &str, tag: &str, n: usize) -> Vec<(i64, String)> {
    let mut sent = Vec::new();
    for i in 0..n {
        let text = format!("{tag}-{i}");
        let id = d
            .send_request(
                "session/append",
                json!({"sessionId": s, "entries": [user(&text)]}),
            )
            .await;
        sent.push((id, text));
    }
    sent
}

/// Waits for the appends' responses; returns (entry id, text) of each.
async fn acked(d: &mut DaemonProcess, sent: Vec<(i64, String)>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (id, text) in sent {
        let r = d.read_until_response(id).await;
        let entry = r["result"]["appended"][0]
            .as_str()
            .unwrap_or_else(|| panic!("append failed: {r}"));
        out.push((entry.to_owned(), text));
    }
    d.take_all("session/entriesAppended");
    out
}

/// The file loads with no malformed line, holds every `(id, text)`, and is one chain.
fn assert_file_holds(path: &Path, expected: &[(String, String)]) -> Session {
    let (s, report) = Session::open(path).unwrap();
    assert!(report.skipped.is_empty(), "{report:?}");
    assert!(report.torn_tail.is_none() && report.duplicate_ids.is_empty());
    for (id, text) in expected {
        let e = s.get(id).unwrap_or_else(|| panic!("{id} ({text}) lost"));
        assert!(e.to_value().to_string().contains(text.as_str()));
    }
    assert_eq!(
        s.path_to_leaf().len(),
        s.entries().len(),
        "the appends of both writers form one chain"
    );
    s
}

async fn context_texts(d: &mut DaemonProcess, s: &str) -> String {
    d.ok("session/context", json!({"sessionId": s}))
        .await
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_daemons_append_and_rewrite_the_same_file() {
    let mut a = spawn().await;
    let mut b = spawn().await;
    let info = a.ok("session/create", json!({"cwd": a.project()})).await;
    let path = PathBuf::from(info["path"].as_str().unwrap());
    let sa = info["sessionId"].as_str().unwrap().to_owned();
    let sb = open(&mut b, &path).await;

    // Each sees the other's entries without a restart.
    a.append(&sa, json!([user("from a")])).await;
    assert!(context_texts(&mut b, &sb).await.contains("from a"));
    b.append(&sb, json!([user("from b")])).await;
    assert!(context_texts(&mut a, &sa).await.contains("from b"));

    // Interleaved appends from both, in flight at the same time.
    let sent_a = send_appends(&mut a, &sa, "A", 40).await;
    let sent_b = send_appends(&mut b, &sb, "B", 40).await;
    let mut all = acked(&mut a, sent_a).await;
    all.extend(acked(&mut b, sent_b).await);
    assert_file_holds(&path, &all);

    // A rewrite (prune) by b while a appends: a's appends survive, the prune is applied.
    for j in 0..8 {
        b.append(&sb, Value::Array(tool_round(j))).await;
    }
    let sent_a = send_appends(&mut a, &sa, "during-prune", 30).await;
    let pruned = b.ok("session/prune", json!({"sessionId": sb})).await;
    assert!(pruned["prunedCount"].as_u64().unwrap() > 0, "{pruned}");
    all.extend(acked(&mut a, sent_a).await);
    let s = assert_file_holds(&path, &all);
    for id in pruned["prunedEntryIds"].as_array().unwrap() {
        let e = s.get(id.as_str().unwrap()).unwrap();
        assert!(e.to_value().to_string().contains("prunedAt"), "{id} pruned");
    }
    // a picks up b's rewrite (a new inode) and appends after it without losing it.
    a.append(&sa, json!([user("after the rewrite")])).await;
    let s = assert_file_holds(&path, &all);
    for id in pruned["prunedEntryIds"].as_array().unwrap() {
        let e = s.get(id.as_str().unwrap()).unwrap();
        assert!(
            e.to_value().to_string().contains("prunedAt"),
            "a kept b's prune"
        );
    }
    assert!(
        context_texts(&mut b, &sb)
            .await
            .contains("after the rewrite")
    );
    a.finish().await;
    b.finish().await;
}

/// Daemon A knows the file by a symlink, daemon B by its real path: both take the one lock
/// next to the file, so their appends in flight at once form one chain with nothing lost, and
/// a prune by A through the link rewrites the file B appends to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_daemons_on_two_names_of_one_file_lose_nothing() {
    let mut a = spawn().await;
    let mut b = spawn().await;
    let info = b.ok("session/create", json!({"cwd": b.project()})).await;
    let real = PathBuf::from(info["path"].as_str().unwrap());
    let sb = info["sessionId"].as_str().unwrap().to_owned();
    let link = a.home.path().join("link.jsonl");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let sa = open(&mut a, &link).await;
    let mut all = Vec::new();
    for round in 0..3 {
        let sent_a = send_appends(&mut a, &sa, &format!("A{round}"), 40).await;
        let sent_b = send_appends(&mut b, &sb, &format!("B{round}"), 40).await;
        all.extend(acked(&mut a, sent_a).await);
        all.extend(acked(&mut b, sent_b).await);
        assert_file_holds(&real, &all);
    }
    for j in 0..8 {
        a.append(&sa, Value::Array(tool_round(j))).await;
    }
    let sent_b = send_appends(&mut b, &sb, "during-prune", 30).await;
    let pruned = a.ok("session/prune", json!({"sessionId": sa})).await;
    assert!(pruned["prunedCount"].as_u64().unwrap() > 0, "{pruned}");
    all.extend(acked(&mut b, sent_b).await);
    assert_file_holds(&real, &all);
    assert!(
        std::fs::symlink_metadata(&link).unwrap().is_symlink(),
        "the prune rewrote the file, not the link"
    );
    b.append(&sb, json!([user("after the prune")])).await;
    assert!(context_texts(&mut a, &sa).await.contains("after the prune"));
    a.finish().await;
    b.finish().await;
}

/// Daemon A knows the file by one hard link, daemon B by another (`ln a.jsonl sub/b.jsonl`:
/// two paths, one inode, no symlink to resolve). Each takes the lock on the file itself (its
/// inode) as well as the one named after its path, so appends in flight at once from both
/// form one chain with every acknowledged entry present once and no malformed line (issue 35,
/// item 2: before, 3-6 acknowledged entries were missing, 1-2 lines malformed, the chain
/// split). A rewrite (prune) through one name is refused with an error naming the links, as
/// a rename would leave the other name on the old file; appends go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_daemons_on_two_hard_links_of_one_file_lose_nothing() {
    let mut a = spawn().await;
    let mut b = spawn().await;
    let info = a.ok("session/create", json!({"cwd": a.project()})).await;
    let first = PathBuf::from(info["path"].as_str().unwrap());
    let sa = info["sessionId"].as_str().unwrap().to_owned();
    let sub = b.home.path().join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    let second = sub.join("b.jsonl");
    std::fs::hard_link(&first, &second).unwrap();
    let sb = open(&mut b, &second).await;
    let mut all = Vec::new();
    for round in 0..3 {
        let sent_a = send_appends(&mut a, &sa, &format!("A{round}"), 40).await;
        let sent_b = send_appends(&mut b, &sb, &format!("B{round}"), 40).await;
        all.extend(acked(&mut a, sent_a).await);
        all.extend(acked(&mut b, sent_b).await);
        let s = assert_file_holds(&first, &all);
        assert_eq!(s.entries().len(), all.len(), "each entry once");
        assert_eq!(
            std::fs::read(&first).unwrap(),
            std::fs::read(&second).unwrap()
        );
    }
    for j in 0..8 {
        a.append(&sa, Value::Array(tool_round(j))).await;
    }
    let error = a
        .err("session/prune", json!({"sessionId": sa}), "ioError")
        .await;
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("2 hard links"), "{message}");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(&first).unwrap().ino(),
        std::fs::metadata(&second).unwrap().ino(),
        "both names still name one file"
    );
    b.append(&sb, json!([user("after the refused prune")]))
        .await;
    assert!(
        context_texts(&mut a, &sa)
            .await
            .contains("after the refused prune")
    );
    a.finish().await;
    b.finish().await;
}

fn cli(args: &[&str], home: &Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_compactd"))
        .args(args)
        .env("COMPACTD_CONFIG_DIR", home.join("config"))
        .env("COMPACTD_DATA_DIR", home.join("data"))
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .expect("the CLI runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_and_the_cli_share_a_file() {
    let mut d = spawn().await;
    let info = d.ok("session/create", json!({"cwd": d.project()})).await;
    let path = PathBuf::from(info["path"].as_str().unwrap());
    let s = info["sessionId"].as_str().unwrap().to_owned();
    let home = d.home.path().to_path_buf();
    std::fs::write(home.join("config/settings.json"), settings().to_string()).unwrap();
    for j in 0..8 {
        d.append(&s, Value::Array(tool_round(j))).await;
    }
    let mut all = Vec::new();

    // `compactd prune` (a rewrite) and `compactd compact` (an append) run while the daemon
    // has appends in flight.
    for args in [
        vec!["prune", "--json"],
        vec!["compact", "--summarizer", "extractive", "--json"],
    ] {
        let sent = send_appends(&mut d, &s, args[0], 25).await;
        let mut full: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        full.insert(1, path.to_string_lossy().into_owned());
        let home = home.clone();
        let out = tokio::task::spawn_blocking(move || {
            let refs: Vec<&str> = full.iter().map(String::as_str).collect();
            cli(&refs, &home)
        })
        .await
        .unwrap();
        // A compaction summarizes the path it read; if the other writer moved the leaf
        // meanwhile it writes nothing and says so (it is retried below).
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() || stderr.contains("leaf moved"),
            "{stderr}"
        );
        all.extend(acked(&mut d, sent).await);
        assert_file_holds(&path, &all);
    }
    let out = cli(
        &[
            "compact",
            &path.to_string_lossy(),
            "--summarizer",
            "extractive",
        ],
        &home,
    );
    // The retry of a compaction that met a moved leaf; when the loop's compaction ran after
    // every append had landed, the leaf is that compaction and there is nothing to do.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success()
            || (out.status.code() == Some(3)
                && stderr.contains("the session ends with a compaction")),
        "{stderr}"
    );
    assert_file_holds(&path, &all);
    let (s_file, _) = Session::open(&path).unwrap();
    assert!(
        s_file
            .entries()
            .iter()
            .any(|e| e.to_value()["type"] == "compaction"),
        "the CLI's compaction is in the file"
    );
    assert!(
        s_file
            .entries()
            .iter()
            .any(|e| e.to_value().to_string().contains("prunedAt")),
        "the CLI's prune is in the file"
    );
    // The daemon sees the CLI's compaction without a restart.
    let ctx = context_texts(&mut d, &s).await;
    assert!(
        ctx.contains("<summary>"),
        "the daemon's context starts with the summary"
    );
    d.append(&s, json!([user("after the cli")])).await;
    assert_file_holds(&path, &all);
    d.finish().await;
}

/// `session/prune` checks `expectedLeafId` where `session/append` does: under the writers'
/// lock, after reading what other writers appended. Another process appends to the file after
/// the daemon's last request; a prune that expects the leaf the daemon last saw must fail
/// with `leafMoved` and rewrite nothing, and one that expects the new leaf must prune.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prune_expecting_a_leaf_another_writer_moved_fails_and_rewrites_nothing() {
    let mut d = spawn().await;
    let info = d.ok("session/create", json!({"cwd": d.project()})).await;
    let path = PathBuf::from(info["path"].as_str().unwrap());
    let s = info["sessionId"].as_str().unwrap().to_owned();
    let mut leaf = String::new();
    for j in 0..8 {
        let appended = d.append(&s, Value::Array(tool_round(j))).await;
        leaf = appended["leafId"].as_str().unwrap().to_owned();
    }

    // The other writer (the CLI, another agent) appends after the daemon's last request.
    let (mut other, _) = Session::open(&path).unwrap();
    let theirs = other
        .append(compactd::session::EntryKind::Label {
            target_id: leaf.clone(),
            label: Some("theirs".into()),
        })
        .unwrap()
        .id
        .clone();
    drop(other);
    let before = std::fs::read(&path).unwrap();

    let error = d
        .err(
            "session/prune",
            json!({"sessionId": s, "expectedLeafId": leaf}),
            "leafMoved",
        )
        .await;
    assert!(
        error["message"].as_str().unwrap().contains(&theirs),
        "the error names the leaf found: {error}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), before, "nothing rewritten");

    let pruned = d
        .ok(
            "session/prune",
            json!({"sessionId": s, "expectedLeafId": theirs}),
        )
        .await;
    assert!(pruned["prunedCount"].as_u64().unwrap() > 0, "{pruned}");
    d.finish().await;
}
