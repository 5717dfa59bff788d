//! The daemon's lifecycle, framing and robustness, driving the real binary.

use devtools::daemon::{DaemonProcess, Framing};
use serde_json::json;

#[tokio::test]
async fn full_lifecycle_over_lsp_framing() {
    let mut d = DaemonProcess::spawn_with(Framing::Lsp, None).await;
    let result = d
        .initialize(json!({"window": {"workDoneProgress": true}}), json!({}))
        .await;
    assert_eq!(result["serverInfo"]["name"], "compactd");
    assert_eq!(result["capabilities"]["protocolVersion"], 1);
    let methods = result["capabilities"]["methods"].as_array().unwrap();
    assert!(methods.contains(&json!("session/compact")));
    assert_eq!(
        result["capabilities"]["serverRequests"],
        json!(["window/workDoneProgress/create"])
    );
    let session = d.create_session().await;
    let usage = d.ok("session/usage", json!({"sessionId": session})).await;
    assert_eq!(usage["isCompacting"], false);
    d.finish().await;
}

#[tokio::test]
async fn requests_before_initialize_fail_and_a_second_initialize_is_refused() {
    let mut d = DaemonProcess::spawn().await;
    let error = d.err("session/list", json!({}), "notInitialized").await;
    assert_eq!(error["code"], -32002);
    d.initialize(json!({}), json!({})).await;
    let error = d
        .request("initialize", json!({"capabilities": {}}))
        .await
        .unwrap_err();
    assert_eq!(error["code"], -32600);
    d.finish().await;
}

#[tokio::test]
async fn garbage_on_stdin_gets_a_parse_error_and_the_server_keeps_serving() {
    let mut d = DaemonProcess::spawn().await;
    d.initialize(json!({}), json!({})).await;
    d.send_raw(b"{this is not json\n").await;
    d.send_raw(b"[1,2,3]\n").await;
    let session = d.create_session().await;
    assert_eq!(session.len(), 16);
    // The parse errors were answered with a null id, in arrival order.
    let errors = d.take_all_responses_without_id();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert_eq!(errors[0]["error"]["code"], -32700);
    d.finish().await;
}

#[tokio::test]
async fn ndjson_lines_are_answered_as_ndjson_and_exit_without_shutdown_is_code_1() {
    let mut d = DaemonProcess::spawn().await;
    d.initialize(json!({}), json!({})).await;
    let list = d.ok("session/list", json!({})).await;
    assert_eq!(list["sessions"], json!([]));
    d.send_notification("exit", json!(null)).await;
    assert_eq!(d.close_stdin_and_wait().await, Some(1));
}

#[tokio::test]
async fn unknown_methods_and_bad_params_are_typed_errors() {
    let mut d = DaemonProcess::spawn().await;
    d.initialize(json!({}), json!({})).await;
    let error = d
        .request("session/frobnicate", json!({}))
        .await
        .unwrap_err();
    assert_eq!(error["code"], -32601);
    let error = d
        .request("session/usage", json!({"nope": 1}))
        .await
        .unwrap_err();
    assert_eq!(error["code"], -32602);
    d.err(
        "session/usage",
        json!({"sessionId": "0123456789abcdef"}),
        "sessionNotFound",
    )
    .await;
    d.finish().await;
}

#[tokio::test]
async fn invalid_initialize_settings_fail_and_initialize_can_be_retried() {
    let mut d = DaemonProcess::spawn().await;
    let error = d
        .request(
            "initialize",
            json!({"capabilities": {}, "initializationOptions": {"settings": {"compaction": {"reserveTokens": "many"}}}}),
        )
        .await
        .unwrap_err();
    assert_eq!(error["data"]["kind"], "settingsInvalid");
    d.initialize(
        json!({}),
        json!({"settings": {"compaction": {"keepRecentTokens": 1234}}}),
    )
    .await;
    let settings = d.ok("settings/get", json!({})).await;
    assert_eq!(settings["settings"]["compaction"]["keepRecentTokens"], 1234);
    let source = settings["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["key"] == "compaction.keepRecentTokens")
        .unwrap()
        .clone();
    assert_eq!(source["source"], "initialize");
    d.finish().await;
}
