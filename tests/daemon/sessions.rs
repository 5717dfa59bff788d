//! Session methods and compaction through the daemon (extractive summarizer, no network).

use devtools::daemon::{DaemonProcess, assistant, conversation, file_entries, user};
use serde_json::{Value, json};

#[tokio::test]
async fn create_append_context_tree_label_list_close() {
    let mut d = DaemonProcess::spawn().await;
    let session = d.start_session().await;
    let id = d
        .send_request(
            "session/append",
            json!({"sessionId": session, "entries": [user("hello"), assistant("hi there", 50)]}),
        )
        .await;
    let appended = d.expect_notification("session/entriesAppended").await;
    let result = d.read_until_response(id).await["result"].clone();
    assert_eq!(result["action"], "continue");
    assert_eq!(result["appended"].as_array().unwrap().len(), 2);
    assert_eq!(appended["leafId"], result["leafId"]);
    assert_eq!(appended["entries"][0]["message"]["content"], "hello");

    let context = d
        .ok(
            "session/context",
            json!({"sessionId": session, "perMessage": true}),
        )
        .await;
    let messages = context["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(context["messageTokens"].as_array().unwrap().len(), 2);
    assert_eq!(context["leafId"], result["leafId"]);

    let first = result["appended"][0].as_str().unwrap().to_owned();
    let labelled = d
        .ok(
            "session/setLabel",
            json!({"sessionId": session, "targetId": first, "label": "start"}),
        )
        .await;
    d.expect_notification("session/entriesAppended").await;
    let tree = d
        .ok(
            "session/tree",
            json!({"sessionId": session, "includeEntries": true}),
        )
        .await;
    assert_eq!(tree["leafId"], labelled["leafId"]);
    let node = tree["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == first)
        .unwrap();
    assert_eq!(node["label"], "start");
    assert_eq!(node["onActivePath"], true);
    assert_eq!(node["entry"]["type"], "message");
    assert_eq!(tree["roots"], json!([first]));

    d.err(
        "session/setLabel",
        json!({"sessionId": session, "targetId": "nope1234", "label": "x"}),
        "entryNotFound",
    )
    .await;

    let list = d.ok("session/list", json!({"cwd": d.project()})).await;
    assert_eq!(list["sessions"][0]["sessionId"], session);
    assert_eq!(list["sessions"][0]["open"], true);
    d.ok("session/close", json!({"sessionId": session})).await;
    d.err(
        "session/usage",
        json!({"sessionId": session}),
        "sessionNotFound",
    )
    .await;
    // Re-open by id from the data directory.
    let info = d.ok("session/open", json!({"sessionId": session})).await;
    assert_eq!(info["entryCount"], 3);
    d.err("session/open", json!({}), "invalidParams").await;
    d.finish().await;
}

#[tokio::test]
async fn two_appends_sent_back_to_back_apply_in_order() {
    let mut d = DaemonProcess::spawn().await;
    let session = d.start_session().await;
    let ids: Vec<i64> = futures_lite(&mut d, &session).await;
    let mut leaves = Vec::new();
    for id in ids {
        leaves.push(d.read_until_response(id).await["result"]["appended"][0].clone());
    }
    d.take_all("session/entriesAppended");
    let context = d.ok("session/context", json!({"sessionId": session})).await;
    let texts: Vec<Value> = context["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].clone())
        .collect();
    assert_eq!(texts, vec![json!("first"), json!("second"), json!("third")]);
    d.finish().await;
}

/// Sends three appends without waiting for answers.
async fn futures_lite(d: &mut DaemonProcess, session: &str) -> Vec<i64> {
    let mut ids = Vec::new();
    for text in ["first", "second", "third"] {
        ids.push(
            d.send_request(
                "session/append",
                json!({"sessionId": session, "entries": [user(text)]}),
            )
            .await,
        );
    }
    ids
}

#[tokio::test]
async fn expected_leaf_mismatch_is_leaf_moved_and_changes_nothing() {
    let mut d = DaemonProcess::spawn().await;
    let session = d.start_session().await;
    let first = d.append(&session, json!([user("one")])).await;
    d.append(&session, json!([user("two")])).await;
    let error = d.err(
        "session/append",
        json!({"sessionId": session, "expectedLeafId": first["leafId"], "entries": [user("three")]}),
        "leafMoved",
    ).await;
    assert_eq!(error["code"], -32016);
    assert_eq!(error["data"]["expectedLeafId"], first["leafId"]);
    d.err(
        "session/compact",
        json!({"sessionId": session, "expectedLeafId": first["leafId"]}),
        "leafMoved",
    )
    .await;
    d.err(
        "session/prune",
        json!({"sessionId": session, "expectedLeafId": first["leafId"]}),
        "leafMoved",
    )
    .await;
    let context = d.ok("session/context", json!({"sessionId": session})).await;
    assert_eq!(context["messages"].as_array().unwrap().len(), 2);
    d.take_all("session/compactionStarted");
    d.take_all("session/compactionFinished");
    d.finish().await;
}

#[tokio::test]
async fn manual_compaction_with_progress_preview_and_errors() {
    let mut d = DaemonProcess::spawn().await;
    d.initialize(
        json!({}),
        json!({"settings": {"compaction": {"keepRecentTokens": 200}}}),
    )
    .await;
    let session = d.create_session().await;
    d.err(
        "session/compact",
        json!({"sessionId": session}),
        "nothingToCompact",
    )
    .await;
    d.take_all("session/compactionStarted");
    d.take_all("session/compactionFinished");
    d.append(&session, conversation(8, 40)).await;

    let preview = d
        .ok(
            "session/compact",
            json!({"sessionId": session, "preview": true}),
        )
        .await;
    assert_eq!(preview["preview"], true);
    assert!(preview.get("entryId").is_none());
    d.expect_notification("session/compactionStarted").await;
    d.expect_notification("session/compactionFinished").await;
    d.take_all("session/compactionDelta");

    let id = d.send_request("session/compact", json!({"sessionId": session, "workDoneToken": "tok-1", "customInstructions": "Keep file names."})).await;
    let begin = d.expect_notification("$/progress").await;
    assert_eq!(begin["token"], "tok-1");
    assert_eq!(begin["value"]["kind"], "begin");
    let started = d.expect_notification("session/compactionStarted").await;
    assert_eq!(started["reason"], "manual");
    assert_eq!(started["workDoneToken"], "tok-1");
    let response = d.read_until_response(id).await;
    let result = response["result"].clone();
    let entry_id = result["entryId"].as_str().expect("an entry id").to_owned();
    assert!(result["summary"].as_str().unwrap().len() > 20);
    let finished = d.expect_notification("session/compactionFinished").await;
    assert_eq!(finished["operationId"], started["operationId"]);
    assert_eq!(finished["result"]["entryId"], entry_id);
    let progress = d.take_all("$/progress");
    let last = progress.last().expect("progress end");
    assert_eq!(last["value"], json!({"kind": "end", "message": "done"}));
    assert!(progress.iter().all(|p| p["token"] == "tok-1"));
    d.take_all("session/compactionDelta");
    // The compaction entry is announced like any other entry.
    let appended = d.take_all("session/entriesAppended");
    let announced: Vec<&Value> = appended
        .iter()
        .flat_map(|n| n["entries"].as_array().unwrap())
        .collect();
    assert_eq!(announced.len(), 1, "{appended:?}");
    assert_eq!(announced[0]["id"], entry_id);
    assert_eq!(announced[0]["type"], "compaction");

    let path = d.ok("session/usage", json!({"sessionId": session})).await;
    assert_eq!(path["isCompacting"], false);
    d.err(
        "session/compact",
        json!({"sessionId": session}),
        "alreadyCompacted",
    )
    .await;
    d.take_all("session/compactionStarted");
    d.take_all("session/compactionFinished");
    let context = d.ok("session/context", json!({"sessionId": session})).await;
    let first = &context["messages"][0];
    assert!(first.to_string().contains("summary"), "{first}");
    let info = d.ok("session/list", json!({})).await;
    let file = info["sessions"][0]["path"].as_str().unwrap().to_owned();
    let compactions: Vec<Value> = d
        .stored_entries(&file)
        .into_iter()
        .filter(|e| e["type"] == "compaction")
        .collect();
    assert_eq!(compactions.len(), 1, "the preview wrote nothing");
    d.finish().await;
}

#[tokio::test]
async fn navigate_tree_moves_the_leaf_and_reports_it() {
    let mut d = DaemonProcess::spawn().await;
    let session = d.start_session().await;
    let first = d
        .append(&session, json!([user("one"), assistant("ok", 10)]))
        .await;
    d.append(&session, json!([user("two"), assistant("ok", 10)]))
        .await;
    let target = first["appended"][1].as_str().unwrap().to_owned();
    let result = d
        .ok(
            "session/navigateTree",
            json!({"sessionId": session, "targetId": target}),
        )
        .await;
    assert_eq!(result["cancelled"], false);
    assert_eq!(result["leafId"], target);
    let navigated = d.expect_notification("session/treeNavigated").await;
    assert_eq!(navigated["newLeafId"], target);
    // A move without a summary appends only a hidden leaf marker: nothing to announce.
    assert!(d.take_all("session/entriesAppended").is_empty());
    d.err(
        "session/navigateTree",
        json!({"sessionId": session, "targetId": "missing1"}),
        "entryNotFound",
    )
    .await;
    let aborted = d
        .ok("session/abortBranchSummary", json!({"sessionId": session}))
        .await;
    assert_eq!(aborted["aborted"], false);
    let context = d.ok("session/context", json!({"sessionId": session})).await;
    assert_eq!(context["messages"].as_array().unwrap().len(), 2);

    // Back to the second turn, then to the first with a summary of the branch left: the
    // summary entry is announced before `session/treeNavigated`.
    let second = d.ok("session/tree", json!({"sessionId": session})).await["nodes"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()["id"]
        .clone();
    d.ok(
        "session/navigateTree",
        json!({"sessionId": session, "targetId": second}),
    )
    .await;
    d.expect_notification("session/treeNavigated").await;
    let summarized = d
        .ok(
            "session/navigateTree",
            json!({"sessionId": session, "targetId": target, "summarize": true}),
        )
        .await;
    let summary_id = summarized["summaryEntry"]["id"].clone();
    assert!(summary_id.is_string(), "{summarized} (left {second})");
    let appended = d.expect_notification("session/entriesAppended").await;
    assert_eq!(appended["entries"][0]["id"], summary_id);
    assert_eq!(appended["entries"][0]["type"], "branch_summary");
    let navigated = d.expect_notification("session/treeNavigated").await;
    assert_eq!(navigated["summaryEntry"]["id"], summary_id);
    d.finish().await;
}

#[tokio::test]
async fn prune_and_settings_update() {
    let mut d = DaemonProcess::spawn().await;
    let session = d.start_session().await;
    d.append(&session, json!([user("one")])).await;
    let pruned = d
        .ok(
            "session/prune",
            json!({"sessionId": session, "dryRun": true}),
        )
        .await;
    assert_eq!(pruned["dryRun"], true);
    assert_eq!(pruned["prunedCount"], 0);

    let updated = d
        .ok(
            "settings/update",
            json!({"target": "session", "patch": {"compaction": {"reserveTokens": 9000}}}),
        )
        .await;
    assert_eq!(updated["settings"]["compaction"]["reserveTokens"], 9000);
    let user_file = d
        .ok(
            "settings/update",
            json!({"target": "user", "patch": {"compaction": {"keepRecentTokens": 777}}}),
        )
        .await;
    let file = user_file["file"].as_str().unwrap();
    assert!(std::fs::read_to_string(file).unwrap().contains("777"));
    d.err(
        "settings/update",
        json!({"target": "user", "patch": {"compaction": {"noSuchKey": 1}}}),
        "settingsInvalid",
    )
    .await;
    // A refused session-target update names the layer the client patched, not `initialize`.
    for patch in [
        json!({"compaction": {"reserveTokens": "lots"}}),
        json!({"noSuchKey": 1}),
    ] {
        let error = d
            .err(
                "settings/update",
                json!({"target": "session", "patch": patch}),
                "settingsInvalid",
            )
            .await;
        let message = error["message"].as_str().unwrap();
        assert!(
            !message.contains("initialize") && message.contains("target \"session\""),
            "{message}"
        );
    }
    let got = d.ok("settings/get", json!({"sessionId": session})).await;
    assert_eq!(got["settings"]["compaction"]["keepRecentTokens"], 777);
    assert_eq!(got["settings"]["compaction"]["reserveTokens"], 9000);
    // The system failing on the user file is an `ioError` with its errno, not
    // `settingsInvalid`: the patch was fine. Out of file descriptors (EMFILE) first: the
    // daemon's soft limit lowered to 3, so every new descriptor is refused (0-2 are stdio;
    // those it has open stay usable), then put back.
    let pid = d.pid().to_string();
    // Only the soft limit moves: raising a hard limit again needs a privilege.
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let soft = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .expect("the daemon's open-files limit")
        .to_owned();
    let prlimit = |limit: &str| {
        let status = std::process::Command::new("prlimit")
            .args(["--pid", &pid, &format!("--nofile={limit}")])
            .status()
            .expect("prlimit (util-linux) runs");
        assert!(status.success(), "prlimit --nofile={limit}");
    };
    prlimit("3:");
    let patch = json!({"target": "user", "patch": {"compaction": {"keepRecentTokens": 778}}});
    let error = d.err("settings/update", patch.clone(), "ioError").await;
    prlimit(&format!("{soft}:"));
    assert_eq!(error["data"]["osError"], "EMFILE", "{error}");
    assert_eq!(error["data"]["path"], file, "{error}");
    let got = d.ok("settings/get", json!({})).await;
    assert_eq!(got["settings"]["compaction"]["keepRecentTokens"], 777);
    // A directory where the file was: still `ioError` naming the file.
    std::fs::remove_file(file).unwrap();
    std::fs::create_dir(file).unwrap();
    let error = d.err("settings/update", patch, "ioError").await;
    assert_eq!(error["data"]["path"], file, "{error}");
    d.finish().await;
}

/// `session/fork` over the wire: a branch with its labels, and a whole copy; both are opened
/// and usable, the source is unchanged, and bad requests get typed errors.
#[tokio::test]
async fn fork_makes_a_branch_or_a_copy_and_opens_it() {
    let mut d = DaemonProcess::spawn().await;
    let session = d.start_session().await;
    let first = d
        .append(&session, json!([user("one"), assistant("ok", 10)]))
        .await;
    let kept = first["appended"][1].as_str().unwrap().to_owned();
    d.ok(
        "session/setLabel",
        json!({"sessionId": session, "targetId": kept, "label": "good"}),
    )
    .await;
    d.take_all("session/entriesAppended");
    d.append(&session, json!([user("two"), assistant("more", 10)]))
        .await;
    let source_path = d.ok("session/list", json!({})).await["sessions"][0]["path"]
        .as_str()
        .unwrap()
        .to_owned();
    let source_before = d.stored_bytes(&source_path);

    let target = d.project().join("branch.jsonl");
    let branch = d
        .ok(
            "session/fork",
            json!({"sessionId": session, "entryId": kept, "path": target, "title": "the good part"}),
        )
        .await;
    let branch_id = branch["sessionId"].as_str().unwrap().to_owned();
    assert_ne!(branch_id, session);
    assert_eq!(branch["path"], target.to_string_lossy().as_ref());
    // A branch written to a file, whatever the backend.
    let entries = file_entries(&target);
    let types: Vec<&str> = entries
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["message", "message", "label"], "{entries:#?}");
    let header: Value = serde_json::from_str(
        std::fs::read_to_string(&target)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(header["parentSession"], source_path.as_str());
    assert_eq!(header["title"], "the good part");
    let context = d
        .ok("session/context", json!({"sessionId": branch_id}))
        .await;
    assert_eq!(context["messages"].as_array().unwrap().len(), 2);
    // The branch is a session like any other.
    d.append(&branch_id, json!([user("three")])).await;

    let copy = d.ok("session/fork", json!({"sessionId": session})).await;
    let copy_path = copy["path"].as_str().unwrap().to_owned();
    let source_entries = d.stored_entries(&source_path);
    assert_eq!(source_entries.len(), 5);
    assert_eq!(d.stored_entries(&copy_path), source_entries);
    assert_eq!(
        copy["leafId"],
        d.ok("session/tree", json!({"sessionId": session})).await["leafId"]
    );
    assert_eq!(
        d.stored_bytes(&source_path),
        source_before,
        "the source is only read"
    );

    d.err(
        "session/fork",
        json!({"sessionId": session, "entryId": "missing1"}),
        "entryNotFound",
    )
    .await;
    d.err(
        "session/fork",
        json!({"sessionId": session, "path": target}),
        "sessionFileInvalid",
    )
    .await;
    d.err(
        "session/fork",
        json!({"sessionId": session, "path": d.project().join("x.txt")}),
        "pathOutsideAllowed",
    )
    .await;
    d.finish().await;
}

#[tokio::test]
async fn a_prompt_override_that_cannot_be_read_fails_compactions_until_it_is_fixed() {
    let mut d = DaemonProcess::spawn().await;
    d.initialize(
        json!({}),
        json!({"settings": {"compaction": {"keepRecentTokens": 200}}}),
    )
    .await;
    let info = d.ok("session/create", json!({"cwd": d.project()})).await;
    let session = info["sessionId"].as_str().unwrap().to_owned();
    let path = info["path"].as_str().unwrap().to_owned();
    d.append(&session, conversation(8, 40)).await;
    // A directory where the history template should be: it exists and cannot be read.
    let template = d.home.path().join("config/prompts/compaction-summary.md");
    std::fs::create_dir_all(&template).unwrap();
    let before = d.stored_bytes(&path);
    let error = d
        .err(
            "session/compact",
            json!({"sessionId": session}),
            "settingsInvalid",
        )
        .await;
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("compaction-summary.md"), "{message}");
    assert_eq!(d.stored_bytes(&path), before, "nothing is written");
    // Other requests are served as before.
    d.ok("session/context", json!({"sessionId": session})).await;

    // Fixed on disk: the next compaction reads it, no restart.
    std::fs::remove_dir(&template).unwrap();
    std::fs::write(&template, "Summarise the work so far.").unwrap();
    let result = d.ok("session/compact", json!({"sessionId": session})).await;
    assert!(result["entryId"].is_string(), "{result}");
    d.take_all("session/compactionStarted");
    d.take_all("session/compactionDelta");
    d.take_all("session/compactionFinished");
    d.take_all("session/entriesAppended");
    d.finish().await;
}

/// A file another program owns (an agent that appends to it, as the oh-my-pi extension
/// opens the agent's own file): compactd reads and previews it at the owner's leaf, sees
/// the owner's appends, refuses every write, and never touches the file.
#[tokio::test]
async fn a_read_only_session_follows_its_owner_and_is_never_written() {
    let mut d = DaemonProcess::spawn().await;
    d.initialize(json!({}), json!({})).await;
    let path = d.project().join("owned.jsonl");
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/demo-session.jsonl");
    std::fs::copy(demo, &path).unwrap();
    let file = path.to_str().unwrap();
    let info = d
        .ok("session/open", json!({"path": file, "readOnly": true}))
        .await;
    assert_eq!(info["readOnly"], true);
    let session = info["sessionId"].as_str().unwrap().to_owned();
    d.err("session/open", json!({"path": file}), "invalidParams")
        .await;

    // The owner appends a turn; compactd sees it without being told.
    let leaf = info["leafId"].as_str().unwrap().to_owned();
    let owned_line = json!({"type": "message", "id": "0wner001", "parentId": leaf,
        "timestamp": "2026-01-01T10:00:00.000Z",
        "message": {"role": "user", "content": "One more thing from the owner.", "timestamp": 1767261600000_i64}});
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(format!("{owned_line}\n").as_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let context = d.ok("session/context", json!({"sessionId": session})).await;
    assert_eq!(context["leafId"], "0wner001");

    let refused = [
        (
            "session/append",
            json!({"sessionId": session, "entries": [user("x")]}),
        ),
        ("session/compact", json!({"sessionId": session})),
        ("session/prune", json!({"sessionId": session})),
        (
            "session/setLabel",
            json!({"sessionId": session, "targetId": leaf, "label": "x"}),
        ),
        (
            "session/navigateTree",
            json!({"sessionId": session, "targetId": leaf}),
        ),
    ];
    for (method, params) in refused {
        d.err(method, params, "sessionReadOnly").await;
    }

    // A preview at the owner's leaf, and one at an earlier entry (the leaf the owner had).
    let at_owner = d
        .ok(
            "session/compact",
            json!({"sessionId": session, "preview": true}),
        )
        .await;
    assert_eq!(at_owner["preview"], true);
    assert!(at_owner.get("entryId").is_none());
    assert_eq!(at_owner["summarizer"], "extractive");
    let at_leaf = d
        .ok(
            "session/compact",
            json!({"sessionId": session, "preview": true, "leafId": leaf}),
        )
        .await;
    assert!(
        !at_leaf["summary"]
            .as_str()
            .unwrap()
            .contains("One more thing"),
        "the preview at {leaf} must not see the owner's later turn"
    );
    d.err(
        "session/compact",
        json!({"sessionId": session, "preview": true, "leafId": "missing1"}),
        "entryNotFound",
    )
    .await;

    // The branch summary a navigation from the owner's leaf to the first user message would
    // attach; the leaf stays where it is.
    let entries = file_entries(&path);
    let first_user = entries
        .iter()
        .find(|e| e["message"]["role"] == "user")
        .unwrap();
    let nav = d
        .ok(
            "session/navigateTree",
            json!({"sessionId": session, "targetId": first_user["id"], "summarize": true,
                   "preview": true, "leafId": "0wner001"}),
        )
        .await;
    assert_eq!(nav["cancelled"], false);
    assert!(nav.get("summaryEntry").is_none());
    let preview = &nav["summary"];
    assert_eq!(preview["summarizer"], "extractive");
    assert_eq!(preview["fromExtension"], false);
    assert!(preview["summary"].as_str().unwrap().contains("## Goal"));
    assert!(preview["details"]["readFiles"].is_array());
    assert_eq!(nav["leafId"], first_user["parentId"]);
    assert!(d.take_all("session/treeNavigated").is_empty());

    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "compactd wrote the file"
    );
    assert!(
        !d.project().join(".owned.jsonl.lock").exists(),
        "compactd took the write lock of a read-only file"
    );
    for event in [
        "session/compactionStarted",
        "session/compactionDelta",
        "session/compactionFinished",
    ] {
        d.take_all(event);
    }
    d.finish().await;
}

/// `leafId` and navigation `preview` are for reading: they cannot write elsewhere than the
/// session's own leaf.
#[tokio::test]
async fn a_compaction_at_another_leaf_must_be_a_preview() {
    let mut d = DaemonProcess::spawn().await;
    let session = d.start_session().await;
    let appended = d.append(&session, conversation(4, 30)).await;
    let first = appended["appended"][1].clone();
    d.err(
        "session/compact",
        json!({"sessionId": session, "leafId": first}),
        "invalidParams",
    )
    .await;
    d.err(
        "session/navigateTree",
        json!({"sessionId": session, "targetId": first, "leafId": first}),
        "invalidParams",
    )
    .await;
    d.take_all("session/compactionStarted");
    d.take_all("session/compactionFinished");
    d.finish().await;
}

/// Load warnings (malformed lines, duplicate ids, a torn tail, a migration) are in the result of
/// `session/open`, not only on the daemon's stderr; a clean file has none.
#[tokio::test]
async fn load_warnings_are_returned_by_session_open() {
    let mut d = DaemonProcess::spawn().await;
    d.initialize(json!({}), json!({})).await;
    async fn open(d: &mut DaemonProcess, name: &str) -> Value {
        let path = d.home.path().join(name);
        std::fs::copy(devtools::fixtures::session(name), &path).unwrap();
        d.ok("session/open", json!({"path": path})).await
    }
    let quirks = open(&mut d, "quirks.jsonl").await;
    let warnings: Vec<&str> = quirks["warnings"]
        .as_array()
        .unwrap_or_else(|| panic!("no warnings in {quirks}"))
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert!(
        warnings.iter().any(|w| w.starts_with("line 3: skipped")),
        "{warnings:?}"
    );
    assert!(
        warnings.iter().any(|w| w.contains("duplicate entry id a4")),
        "{warnings:?}"
    );
    // The torn-tail fixture has the same session id.
    d.ok("session/close", json!({"sessionId": quirks["sessionId"]}))
        .await;
    let torn = open(&mut d, "torn-tail.jsonl").await;
    assert!(
        torn["warnings"].as_array().is_some_and(|w| w
            .iter()
            .any(|w| w.as_str().unwrap().contains("torn last line"))),
        "{torn}"
    );
    let v1 = open(&mut d, "v1.jsonl").await;
    assert!(
        v1["warnings"][0]
            .as_str()
            .unwrap()
            .contains("migrated from version 1"),
        "{v1}"
    );
    let cwd = d.project();
    let clean = d.ok("session/create", json!({"cwd": cwd})).await;
    assert!(clean.get("warnings").is_none(), "{clean}");
}

/// A `label` entry appended with `session/append` must name an existing entry, as
/// `session/setLabel` requires; a batch with a dangling label writes nothing.
#[tokio::test]
async fn appending_a_label_for_a_missing_entry_is_entry_not_found() {
    let mut d = DaemonProcess::spawn().await;
    let session = d.start_session().await;
    let first = d.append(&session, json!([user("one")])).await;
    let target = first["appended"][0].as_str().unwrap().to_owned();
    // Through the protocol, so the test holds on every storage backend.
    let tree = json!({"sessionId": session});
    let before = d.ok("session/tree", tree.clone()).await;
    let error = d
        .err(
            "session/append",
            json!({"sessionId": session, "entries": [
                {"type": "label", "targetId": target, "label": "fine"},
                {"type": "label", "targetId": "nope", "label": "x"},
            ]}),
            "entryNotFound",
        )
        .await;
    assert!(
        error["message"].as_str().unwrap().contains("nope"),
        "{error}"
    );
    assert_eq!(
        d.ok("session/tree", tree).await,
        before,
        "nothing was written"
    );
    d.append(
        &session,
        json!([{"type": "label", "targetId": target, "label": "fine"}]),
    )
    .await;
    d.finish().await;
}

/// `session/list` in pages: `limit` sessions a page, newest first, each session once, with a
/// `nextCursor` until the last page; a bad cursor or a zero limit is invalid params.
#[tokio::test]
async fn session_list_pages_through_every_session_once() {
    let mut d = DaemonProcess::spawn().await;
    d.initialize(json!({}), json!({})).await;
    let mut created = Vec::new();
    for i in 0..7 {
        let s = d.create_session().await;
        d.append(&s, json!([user(&format!("session {i}"))])).await;
        created.push(s);
    }
    let ids = |page: &Value| -> Vec<String> {
        page["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["sessionId"].as_str().unwrap().to_owned())
            .collect()
    };
    let whole = d.ok("session/list", json!({"cwd": d.project()})).await;
    assert!(whole.get("nextCursor").is_none(), "{whole}");
    let all = ids(&whole);
    assert_eq!(all.len(), 7, "{whole}");
    // The last one written comes first.
    assert_eq!(all[0], created[6], "{whole}");

    let mut paged = Vec::new();
    let mut cursor: Option<String> = None;
    let mut sizes = Vec::new();
    loop {
        let mut params = json!({"cwd": d.project(), "limit": 3});
        if let Some(c) = &cursor {
            params["cursor"] = json!(c);
        }
        let page = d.ok("session/list", params).await;
        sizes.push(page["sessions"].as_array().unwrap().len());
        paged.extend(ids(&page));
        match page.get("nextCursor").and_then(Value::as_str) {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(sizes, [3, 3, 1]);
    assert_eq!(
        paged, all,
        "the pages together are the whole listing, in order"
    );
    // Without cwd too.
    let first = d.ok("session/list", json!({"limit": 7})).await;
    assert_eq!(ids(&first), all);
    assert!(first.get("nextCursor").is_none(), "{first}");

    d.err(
        "session/list",
        json!({"limit": 2, "cursor": "not a cursor"}),
        "invalidParams",
    )
    .await;
    d.err("session/list", json!({"limit": 0}), "invalidParams")
        .await;
    d.finish().await;
}

/// oh-my-pi 18's files start with a fixed-width title line before the header (issue 34,
/// item 1): the daemon opens them, takes the title from it, and keeps its 256 bytes as they
/// are through an append, a compaction and a prune (a rewrite); the reference's `method`
/// field on a compaction and its `title_change` entries survive too.
#[tokio::test]
async fn an_oh_my_pi_18_file_keeps_its_title_line_through_every_write() {
    let mut d = DaemonProcess::spawn().await;
    d.initialize(json!({}), json!({})).await;
    let path = d.home.path().join("omp18.jsonl");
    std::fs::copy(devtools::fixtures::session("omp18-title.jsonl"), &path).unwrap();
    let original = std::fs::read(&path).unwrap();
    let opened = d.ok("session/open", json!({"path": path})).await;
    assert_eq!(opened["title"], "Fix the date parser");
    assert!(opened.get("warnings").is_none(), "{opened}");
    let s = opened["sessionId"].as_str().unwrap().to_owned();
    let context = d.ok("session/context", json!({"sessionId": s})).await;
    // The compaction on the branch is honoured: its summary first, then the kept entries.
    let first = context["messages"][0]["content"][0]["text"]
        .as_str()
        .unwrap();
    assert!(first.contains("Accept RFC 3339 timestamps"), "{context}");
    assert_eq!(
        context["messages"].as_array().unwrap().len(),
        3,
        "{context}"
    );

    let mut turns = Vec::new();
    for i in 0..4 {
        turns.push(user(&format!("step {i}: {}", "words ".repeat(80))));
        turns.push(assistant(&format!("done {i}"), 3000 + i));
    }
    d.append(&s, Value::Array(turns)).await;
    d.ok(
        "session/compact",
        json!({"sessionId": s, "customInstructions": "keep it short"}),
    )
    .await;
    d.ok("session/prune", json!({"sessionId": s})).await;
    d.drain_buffer();
    let now = std::fs::read(&path).unwrap();
    assert_eq!(now[..256], original[..256], "the title line changed");
    let text = String::from_utf8(now).unwrap();
    assert!(
        text.lines()
            .nth(1)
            .unwrap()
            .starts_with(r#"{"type":"session""#)
    );
    assert!(text.contains(r#""method":"soft""#), "{text}");
    assert!(text.contains(r#""type":"title_change""#), "{text}");
    // And it reads back as the same session.
    d.ok("session/close", json!({"sessionId": s})).await;
    let again = d.ok("session/open", json!({"path": path})).await;
    assert_eq!(again["sessionId"], s);
    assert!(again.get("warnings").is_none(), "{again}");
}
