//! The session commands of the real binary (`compact`, `navigate`, `fork`, `context`, `tree`,
//! `plan`, `prune`, `blobs`): they take session files, so these run on files whatever
//! `COMPACTD_TEST_BACKEND` says.

use std::process::{Command, Output};

use compactd::session::{EntryKind, Session};
use devtools::fixtures::{demo_copy, demo_session, pi_session, run_cli};
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

/// A summarizer named on the command line that cannot run is an error naming why, and nothing
/// is written; before, `--summarizer openai` with no model or key wrote an extractive summary.
#[test]
fn a_named_summarizer_that_cannot_run_stops_the_command_and_writes_nothing() {
    let (dir, path) = demo_copy();
    let p = path.to_str().unwrap();
    let before = std::fs::read(&path).unwrap();
    for (args, says) in [
        (
            vec!["--summarizer", "openai"],
            "the summarizer openai cannot be used",
        ),
        (vec!["--summarizer", "remote"], "compaction.remoteEndpoint"),
        (
            vec!["--model", "openai/gpt-4.1"],
            "openai/gpt-4.1 cannot be used",
        ),
    ] {
        let mut all = vec!["compact", p];
        all.extend(&args);
        let out = compactd(&all, dir.path());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(
            std::fs::read(&path).unwrap(),
            before,
            "{args:?} wrote to the file"
        );
    }
    // The extractive summarizer, asked for by name, always runs.
    let out = compactd(&["compact", p, "--summarizer", "extractive"], dir.path());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `--json` prints the protocol's result types (the schema of `schema/`), the same shapes the
/// daemon answers: `tree --json` is a `session/tree` result (`type`, `children`, `roots`),
/// `compact --json` a `session/compact` result, `prune --json` a `session/prune` result;
/// `context --json` a `session/context` result with the usage beside it, `plan --json` a
/// `CompactionPlan`. Each is read back as its type and must print as it was read: nothing
/// beyond the schema's fields.
#[test]
fn json_output_is_the_protocols_result_types() {
    use compactd::protocol::{
        CLI_OUTPUTS, CompactResult, CompactionPlan, ContextReport, PlanMode, PruneResult,
        SessionTreeResult,
    };
    let (dir, path) = demo_copy();
    let p = path.to_str().unwrap();
    let json_of = |args: &[&str]| -> Value {
        let out = compactd(args, dir.path());
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("JSON on stdout")
    };

    let context = json_of(&["context", p, "--json", "--tokenizer", "chars4"]);
    let typed: ContextReport =
        serde_json::from_value(context.clone()).expect("a session/context result and its usage");
    assert!(!typed.context.messages.is_empty());
    let per_message = typed
        .context
        .message_tokens
        .as_ref()
        .expect("per-message counts");
    assert_eq!(per_message.len(), typed.context.messages.len());
    assert_eq!(per_message.iter().sum::<u64>(), typed.context.tokens);
    assert_eq!(typed.tokenizer, "chars4");
    assert_eq!(typed.usage.context_window, typed.context.context_window);
    assert_eq!(serde_json::to_value(&typed).unwrap(), context);

    let plan = json_of(&["plan", p, "--json", "--keep-recent-tokens", "2000"]);
    let typed: CompactionPlan = serde_json::from_value(plan.clone()).expect("a CompactionPlan");
    assert_eq!(typed.mode, PlanMode::Fixed);
    assert!(typed.messages_to_summarize > 0, "{plan}");
    assert_eq!(serde_json::to_value(&typed).unwrap(), plan);

    // The schema bundle names the type of every command that prints JSON.
    let commands: Vec<&str> = CLI_OUTPUTS.iter().map(|c| c.command).collect();
    for command in [
        "context", "plan", "tree", "compact", "navigate", "prune", "blobs",
    ] {
        assert!(
            commands.contains(&command),
            "{command} missing from CLI_OUTPUTS"
        );
    }

    let tree = json_of(&["tree", p, "--json"]);
    let typed: SessionTreeResult =
        serde_json::from_value(tree.clone()).expect("a session/tree result");
    let (session, _) = Session::open(&path).unwrap();
    assert_eq!(typed.leaf_id.as_deref(), session.leaf_id());
    assert_eq!(typed.roots.len(), 1);
    let first = &tree["nodes"][0];
    assert_eq!(first["type"], "model_change", "{first}");
    assert!(first.get("entryType").is_none(), "{first}");
    assert!(first["onActivePath"].as_bool().unwrap());
    assert_eq!(
        serde_json::to_value(&typed).unwrap(),
        tree,
        "nothing beyond the protocol's fields"
    );

    let prune = json_of(&["prune", p, "--dry-run", "--json"]);
    let typed: PruneResult = serde_json::from_value(prune.clone()).expect("a session/prune result");
    assert!(typed.dry_run);
    assert_eq!(serde_json::to_value(&typed).unwrap(), prune);

    let compact = json_of(&[
        "compact",
        p,
        "--json",
        "--keep-recent-tokens",
        "2000",
        "--tokenizer",
        "chars4",
    ]);
    let typed: CompactResult =
        serde_json::from_value(compact.clone()).expect("a session/compact result");
    assert_eq!(typed.summarizer.as_deref(), Some("extractive"));
    assert_eq!(serde_json::to_value(&typed).unwrap(), compact);
}

#[test]
fn ids_shown_for_a_v1_file_stay_valid_until_it_is_written() {
    // A v1 file has no ids on disk: they are derived from the lines, so every process reading
    // the same bytes shows the same ids, and `navigate` accepts one `tree` printed.
    let (dir, path) = devtools::fixtures::copy_to_temp(&devtools::fixtures::session("v1.jsonl"));
    let p = path.to_str().unwrap();
    let tree = |home: &std::path::Path| -> Value {
        let out = compactd(&["tree", p, "--json"], home);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let first = tree(dir.path());
    let second = tree(dir.path());
    assert_eq!(first, second, "two loads of the same bytes disagree on ids");
    let nodes = first["nodes"].as_array().unwrap();
    assert!(nodes.len() >= 3);
    let target = nodes[1]["id"].as_str().unwrap().to_string();

    let out = compactd(&["navigate", p, &target, "--json"], dir.path());
    assert!(
        out.status.success(),
        "navigate to an id `tree` showed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (session, _) = Session::open(&path).unwrap();
    // The rewrite (migration to v3) kept the ids that were shown.
    for node in nodes {
        assert!(
            session.get(node["id"].as_str().unwrap()).is_some(),
            "{node}"
        );
    }
}

/// `compactd blobs` reports references and unreferenced blobs, and deletes only with `--gc`
/// (only the unreferenced ones).
#[test]
fn blobs_reports_references_and_collects_only_on_request() {
    let home = tempfile::tempdir().unwrap();
    let store = home.path().join("store");
    std::fs::create_dir_all(&store).unwrap();
    let kept = compactd::session::sha256_hex(b"kept");
    let orphan = compactd::session::sha256_hex(b"orphan");
    let gone = compactd::session::sha256_hex(b"gone");
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

// ---- read-only commands on the demo and reference fixtures ------------------------------

#[test]
fn read_commands_print_and_never_modify_the_file() {
    let path = demo_session();
    let before = std::fs::read(&path).unwrap();
    for cmd in ["context", "tree", "plan"] {
        for json in [false, true] {
            let mut args = vec![cmd, path.to_str().unwrap()];
            if json {
                args.push("--json");
            }
            let out = run_cli(&args);
            assert!(
                out.status.success(),
                "{cmd}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            if json {
                let _: Value = serde_json::from_slice(&out.stdout).unwrap();
            }
        }
    }
    let out = run_cli(&["tree", path.to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("<- leaf"), "{text}");
    let out = run_cli(&[
        "context",
        "--tokenizer",
        "chars4",
        "--json",
        path.to_str().unwrap(),
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tokenizer"], "chars4");
    assert!(v["tokens"].as_u64().unwrap() > 0);
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[test]
fn plan_on_the_reference_fixture_cuts_at_a_user_or_assistant_message() {
    let path = pi_session("before-compaction.jsonl");
    let before = std::fs::read(&path).unwrap();
    // chars4: the reference's own estimate, so the cut is comparable with the reference's.
    let out = run_cli(&[
        "plan",
        "--json",
        "--tokenizer",
        "chars4",
        path.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let kind = v["firstKeptEntryKind"].as_str().unwrap();
    let role = kind.strip_prefix("message/").expect(kind);
    assert!(role == "user" || role == "assistant", "{kind}");
    // The index counts entries after the header: that line holds a message of that role.
    let index = v["firstKeptEntryIndex"].as_u64().unwrap() as usize;
    let text = std::fs::read_to_string(&path).unwrap();
    let line: Value = serde_json::from_str(text.lines().nth(index + 1).unwrap()).unwrap();
    assert_eq!(line["message"]["role"], role);
    assert!(v["messagesToSummarize"].as_u64().unwrap() > 0);
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[test]
fn a_broken_file_is_reported_with_its_line_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.jsonl");
    std::fs::write(
        &path,
        b"{\"type\":\"not a session\"}\n{\"type\":\"message\"}\n",
    )
    .unwrap();
    let before = std::fs::read(&path).unwrap();
    for cmd in ["context", "tree", "plan", "prune"] {
        let out = run_cli(&[cmd, path.to_str().unwrap()]);
        assert!(!out.status.success(), "{cmd} succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("broken.jsonl:1"), "{cmd}: {err}");
    }
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[test]
fn prune_cli_dry_run_leaves_the_file_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("demo.jsonl");
    std::fs::copy(demo_session(), &path).unwrap();
    let before = std::fs::read(&path).unwrap();
    let out = run_cli(&["prune", "--dry-run", "--json", path.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    // The `session/prune` result's shape.
    assert!(
        v["prunedCount"].is_u64() && v["tokensSaved"].is_u64() && v["prunedEntryIds"].is_array()
    );
    assert_eq!(v["dryRun"], true);
    assert_eq!(std::fs::read(&path).unwrap(), before);
}
