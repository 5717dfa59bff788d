//! The `compact` and `navigate` commands of the real binary.

use std::process::{Command, Output};

use compactd::session::{EntryKind, Session};
use devtools::fixtures::demo_copy;
use serde_json::Value;

fn compactd(args: &[&str], home: &std::path::Path) -> Output {
    // A temp HOME / config dir so no user settings (or API keys) leak in.
    Command::new(env!("CARGO_BIN_EXE_compactd"))
        .args(args)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .expect("the binary runs")
}

#[test]
fn compact_appends_an_entry_and_prints_json() {
    let (dir, path) = demo_copy();
    let p = path.to_str().unwrap();
    let out = compactd(
        &[
            "compact",
            p,
            "--json",
            "--keep-recent-tokens",
            "2000",
            "--tokenizer",
            "chars4",
        ],
        dir.path(),
    );
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let id = result["entryId"].as_str().expect("entry id");
    assert_eq!(result["summarizer"], "extractive");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Summarizing"));

    let (session, _) = Session::open(&path).unwrap();
    assert_eq!(session.leaf_id(), Some(id));
    let EntryKind::Compaction(c) = &session.get(id).unwrap().kind() else {
        panic!("not a compaction")
    };
    assert_eq!(
        c.first_kept_entry_id,
        result["firstKeptEntryId"].as_str().unwrap()
    );

    // Compacting again right away is refused, with the file named and a failure status.
    let again = compactd(&["compact", p], dir.path());
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        err.contains(p) && err.contains("Already compacted"),
        "{err}"
    );
}

#[test]
fn preview_and_navigate_from_the_command_line() {
    let (dir, path) = demo_copy();
    let p = path.to_str().unwrap();
    let before = std::fs::read(&path).unwrap();
    let out = compactd(
        &["compact", p, "--preview", "--keep-recent-tokens", "2000"],
        dir.path(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("preview (nothing written)"));
    assert_eq!(std::fs::read(&path).unwrap(), before);

    let (session, _) = Session::open(&path).unwrap();
    let target = session.path_to_leaf()[3].id.clone();
    let out = compactd(
        &["navigate", p, &target, "--summarize", "--json"],
        dir.path(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["cancelled"], false);
    let (session, _) = Session::open(&path).unwrap();
    assert_eq!(session.leaf_id(), result["leafId"].as_str());

    let bad = compactd(&["navigate", p, "nope"], dir.path());
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("Entry nope not found"));
}

#[test]
fn fork_writes_a_branch_or_a_copy_and_leaves_the_source_alone() {
    let (dir, path) = demo_copy();
    let p = path.to_str().unwrap();
    let before = std::fs::read(&path).unwrap();
    let (source, _) = Session::open(&path).unwrap();
    let path_ids: Vec<String> = source
        .path_to_leaf()
        .iter()
        .filter(|e| e.type_name() != "label")
        .map(|e| e.id.clone())
        .collect();
    let at = &path_ids[path_ids.len() / 2];

    let branch = dir.path().join("branch.jsonl");
    let out = compactd(
        &[
            "fork",
            p,
            branch.to_str().unwrap(),
            "--at",
            at,
            "--title",
            "half",
        ],
        dir.path(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("branch.jsonl"));
    let (b, report) = Session::open(&branch).unwrap();
    assert!(report.skipped.is_empty());
    let ids: Vec<&str> = b
        .entries()
        .iter()
        .filter(|e| e.type_name() != "label")
        .map(|e| e.id.as_str())
        .collect();
    let expected: Vec<&str> = path_ids[..=path_ids.len() / 2]
        .iter()
        .map(String::as_str)
        .collect();
    assert_eq!(ids, expected);
    assert_eq!(b.header().title.as_deref(), Some("half"));
    assert_eq!(b.header().parent_session.as_deref(), Some(p));

    let copy = dir.path().join("copy.jsonl");
    let out = compactd(&["fork", p, copy.to_str().unwrap()], dir.path());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (c, _) = Session::open(&copy).unwrap();
    assert_eq!(c.entries(), source.entries());
    assert_eq!(c.leaf_id(), source.leaf_id());
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "the source is only read"
    );

    // An existing target and an unknown entry are refused; nothing is written.
    let again = compactd(&["fork", p, copy.to_str().unwrap()], dir.path());
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("exists"));
    let missing = dir.path().join("missing.jsonl");
    let bad = compactd(
        &["fork", p, missing.to_str().unwrap(), "--at", "nope"],
        dir.path(),
    );
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("Entry nope not found"));
    assert!(!missing.exists());
}

#[test]
fn a_prompt_override_that_cannot_be_read_stops_the_command_and_writes_nothing() {
    let (dir, path) = demo_copy();
    let config = dir.path().join("config");
    // A directory where the history template should be: it exists and cannot be read.
    std::fs::create_dir_all(config.join("prompts/compaction-summary.md")).unwrap();
    let before = std::fs::read(&path).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_compactd"))
        .args(["compact", path.to_str().unwrap(), "--tokenizer", "chars4"])
        .env("COMPACTD_CONFIG_DIR", &config)
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .expect("the binary runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("compaction-summary.md"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

/// `compactd blobs` reports references and unreferenced blobs, and deletes only with `--gc`
/// (only the unreferenced ones).
#[test]
fn blobs_reports_references_and_collects_only_on_request() {
    let home = tempfile::tempdir().unwrap();
    let store = home.path().join("store");
    std::fs::create_dir_all(&store).unwrap();
    let kept = compactd::session::size_controls::sha256_hex(b"kept");
    let orphan = compactd::session::size_controls::sha256_hex(b"orphan");
    let gone = compactd::session::size_controls::sha256_hex(b"gone");
    std::fs::write(store.join(&kept), b"kept").unwrap();
    std::fs::write(store.join(&orphan), b"orphan").unwrap();
    std::fs::write(store.join("notes.txt"), b"not a blob").unwrap();
    let sessions = home.path().join("sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    std::fs::write(
        sessions.join("a.jsonl"),
        format!(
            "{{\"type\":\"session\",\"version\":3,\"id\":\"s\",\"timestamp\":\"t\",\"cwd\":\"/\"}}\n\
             {{\"type\":\"message\",\"id\":\"e1\",\"parentId\":null,\"timestamp\":\"t\",\"message\":{{\"role\":\"user\",\"content\":[{{\"type\":\"image\",\"data\":\"blob:sha256:{kept}\",\"mimeType\":\"image/png\"}},{{\"type\":\"image\",\"data\":\"blob:sha256:{gone}\",\"mimeType\":\"image/png\"}}]}}}}\n"
        ),
    )
    .unwrap();
    let store_arg = store.to_str().unwrap();
    let sessions_arg = sessions.to_str().unwrap();
    let report = |out: Output| -> Value {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let r = report(compactd(
        &["blobs", "--dir", store_arg, "--json", sessions_arg],
        home.path(),
    ));
    assert_eq!(r["sessions"], 1);
    assert!(r["referenced"][&kept].is_array());
    assert_eq!(r["missing"], serde_json::json!([gone]));
    assert_eq!(r["unreferenced"], serde_json::json!([orphan]));
    assert_eq!(r["deleted"], serde_json::json!([]));
    assert!(store.join(&orphan).exists(), "nothing deleted without --gc");

    let r = report(compactd(
        &["blobs", "--dir", store_arg, "--gc", "--json", sessions_arg],
        home.path(),
    ));
    assert_eq!(r["deleted"], serde_json::json!([orphan]));
    assert!(!store.join(&orphan).exists());
    assert!(store.join(&kept).exists());
    assert!(
        store.join("notes.txt").exists(),
        "only blob names are touched"
    );
}
