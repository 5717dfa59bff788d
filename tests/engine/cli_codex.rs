//! `compactd compact` on a Codex rollout (the real agent runs in tests/agents/codex): only
//! lines are appended, Codex's own records; a rollout written a moment ago is refused, and
//! the commands that write compactd entries refuse a rollout.

use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use super::cli::compactd;

/// A rollout of three turns, the first one long, as Codex 0.169.0 writes them.
fn write_rollout(path: &std::path::Path) {
    let mut ordinal = 0;
    let mut line = |kind: &str, payload: Value| {
        ordinal += 1;
        json!({"timestamp": "2026-01-01T00:00:00.000Z", "ordinal": ordinal - 1, "type": kind,
            "payload": payload})
        .to_string()
            + "\n"
    };
    let message = |role: &str, part: &str, text: &str| json!({"type": "message", "role": role, "content": [{"type": part, "text": text}]});
    let mut text = line("session_meta", json!({"id": "thread-1", "cwd": "/w"}));
    text += &line(
        "response_item",
        message("developer", "input_text", "<permissions>x"),
    );
    let long = "FIRST-TURN the log: ".to_owned() + &"warning: unused section\n".repeat(4000);
    for (user, answer) in [
        (long.as_str(), "looked"),
        ("second", "ok"),
        ("third", "done"),
    ] {
        text += &line("response_item", message("user", "input_text", user));
        text += &line(
            "response_item",
            json!({"type": "function_call", "name": "exec_command",
            "arguments": "{\"cmd\":\"ls\"}", "call_id": format!("c-{user:.5}")}),
        );
        text += &line(
            "response_item",
            json!({"type": "function_call_output",
            "call_id": format!("c-{user:.5}"), "output": "a.txt"}),
        );
        text += &line("response_item", message("assistant", "output_text", answer));
    }
    std::fs::write(path, text).unwrap();
}

fn age(path: &std::path::Path, by: Duration) {
    let file = std::fs::File::options().write(true).open(path).unwrap();
    file.set_modified(SystemTime::now() - by).unwrap();
}

#[test]
fn compact_appends_codex_records_to_a_quiet_rollout_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir
        .path()
        .join("rollout-2026-01-01T00-00-00-thread-1.jsonl");
    write_rollout(&path);
    let before = std::fs::read(&path).unwrap();
    let p = path.to_str().unwrap();

    let busy = compactd(&["compact", p, "--keep-recent-tokens", "20"], dir.path());
    assert!(!busy.status.success());
    assert!(String::from_utf8_lossy(&busy.stderr).contains("in use"));
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "a refused compaction wrote"
    );

    age(&path, Duration::from_secs(60));
    let prune = compactd(&["prune", p], dir.path());
    assert!(String::from_utf8_lossy(&prune.stderr).contains("a Codex rollout"));
    let plan = compactd(&["plan", p, "--keep-recent-tokens", "20"], dir.path());
    assert!(
        plan.status.success(),
        "{}",
        String::from_utf8_lossy(&plan.stderr)
    );

    let out = compactd(&["compact", p, "--keep-recent-tokens", "20"], dir.path());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = std::fs::read(&path).unwrap();
    assert!(after.starts_with(&before), "existing bytes changed");
    let added: Vec<Value> = std::str::from_utf8(&after[before.len()..])
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(added.len(), 2);
    assert_eq!(added[0]["type"], "compacted");
    assert_eq!(added[1]["payload"]["type"], "token_count");
    let history = added[0]["payload"]["replacement_history"]
        .as_array()
        .unwrap();
    assert_eq!(history[0]["role"], "developer");
    let summary = history
        .iter()
        .position(|i| i.to_string().contains("Another language model started"))
        .expect("the summary is in the history");
    let kept: Vec<String> = (history.iter().enumerate())
        .filter(|(k, _)| *k != summary)
        .map(|(_, i)| i.to_string())
        .collect();
    assert!(
        !kept.iter().any(|i| i.contains("FIRST-TURN")),
        "the first turn is still sent: {kept:?}"
    );
}
