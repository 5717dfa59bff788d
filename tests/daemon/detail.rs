//! `compaction.detail` and a request's `targetTokens` size the summary (issue 33, item 3).

use std::time::Duration;

use devtools::daemon::{DaemonProcess, conversation};
use devtools::fake_llm::{FakeLlm, openai_sse};
use serde_json::{Value, json};

/// A previewed compaction of a long conversation with `settings` and `params` added.
async fn preview_with(settings: Value, params: Value, llm: Option<&FakeLlm>) -> Value {
    let mut d = DaemonProcess::spawn().await;
    let mut compaction = json!({"keepRecentTokens": 1000});
    for (k, v) in settings.as_object().unwrap() {
        compaction[k] = v.clone();
    }
    let mut all = json!({"compaction": compaction});
    if let Some(llm) = llm {
        all["providers"] = json!({"fake": {"kind": "openai", "baseUrl": llm.url(),
            "apiKey": "test", "models": {"fake-model": {"contextWindow": 400000,
                "maxOutputTokens": 64000}}}});
        all["summarizer"] = json!({"kind": "openai", "model": "fake/fake-model"});
    }
    d.initialize(json!({}), json!({"settings": all})).await;
    let session = d.create_session().await;
    d.append(&session, conversation(30, 20)).await;
    let mut request = json!({"sessionId": session, "preview": true});
    for (k, v) in params.as_object().unwrap() {
        request[k] = v.clone();
    }
    let result = d.ok("session/compact", request).await;
    d.take_all("session/compactionStarted");
    d.take_all("session/compactionFinished");
    d.take_all("session/compactionDelta");
    d.finish().await;
    result
}

fn summary_len(result: &Value) -> usize {
    result["summary"].as_str().unwrap().len()
}

#[tokio::test]
async fn brief_normal_and_thorough_extractive_summaries_are_ordered_by_size() {
    let mut sizes = Vec::new();
    for detail in ["brief", "normal", "thorough"] {
        let result = preview_with(json!({"detail": detail}), json!({}), None).await;
        assert_eq!(result["summarizer"], "extractive");
        // Without targetTokens, no target is reported.
        assert!(result.get("targetMet").is_none(), "{result}");
        sizes.push((detail, summary_len(&result)));
    }
    assert!(
        sizes[0].1 < sizes[1].1 && sizes[1].1 < sizes[2].1,
        "{sizes:?}"
    );
}

#[tokio::test]
async fn a_tiny_target_is_reported_as_not_met_and_a_roomy_one_as_met() {
    let tiny = preview_with(json!({}), json!({"targetTokens": 20}), None).await;
    assert_eq!(tiny["targetMet"], false, "{tiny}");
    let tokens = tiny["summaryTokens"].as_u64().unwrap();
    assert!(tokens > 20, "{tiny}");
    let reason = tiny["targetReason"].as_str().expect("a reason");
    assert!(
        reason.contains("target of 20") || reason.contains("retention"),
        "{reason}"
    );

    let roomy = preview_with(json!({}), json!({"targetTokens": 50000}), None).await;
    assert_eq!(roomy["targetMet"], true, "{roomy}");
    assert!(roomy["summaryTokens"].as_u64().unwrap() <= 50000);
    assert!(roomy.get("targetReason").is_none());
    // targetTokens overrides the detail level: a large target with `brief` summarises as much
    // as a thorough one.
    let overridden = preview_with(
        json!({"detail": "brief"}),
        json!({"targetTokens": 50000}),
        None,
    )
    .await;
    let brief = preview_with(json!({"detail": "brief"}), json!({}), None).await;
    assert!(summary_len(&overridden) > summary_len(&brief));
}

/// The history request's `max_tokens` and the words its length line asks for.
fn history_budget(llm: &FakeLlm) -> (u64, u64) {
    let requests = llm.requests();
    let history = requests
        .iter()
        .map(|r| r.json().clone())
        .find(|body| {
            let prompt = body["messages"].to_string();
            prompt.contains("the whole summary under about")
        })
        .expect("a history request");
    let max = history["max_tokens"]
        .as_u64()
        .or_else(|| history["max_completion_tokens"].as_u64())
        .expect("an output budget");
    let prompt = history["messages"].to_string();
    let at = prompt.find("under about ").unwrap() + "under about ".len();
    let words: u64 = prompt[at..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .expect("a word count");
    (max, words)
}

#[tokio::test]
async fn the_model_sees_the_budget_and_length_line_scale_with_detail_and_target() {
    let mut budgets = Vec::new();
    for (settings, params) in [
        (json!({"detail": "brief"}), json!({})),
        (json!({"detail": "normal"}), json!({})),
        (json!({"detail": "thorough"}), json!({})),
        (json!({"detail": "thorough"}), json!({"targetTokens": 1000})),
    ] {
        let llm = FakeLlm::start().await;
        llm.set_default(openai_sse(&["## Goal\n", "- keep the build green"], "stop"));
        let result = preview_with(settings, params.clone(), Some(&llm)).await;
        assert!(summary_len(&result) > 0);
        let _ = llm.wait_for_requests(1, Duration::from_secs(10)).await;
        budgets.push(history_budget(&llm));
    }
    let (brief, normal, thorough, target) = (budgets[0], budgets[1], budgets[2], budgets[3]);
    // Default reserve 16384: normal is 0.8 of it; brief half, thorough twice.
    assert_eq!(normal.0, 13107, "{budgets:?}");
    assert_eq!(brief.0, 6554, "{budgets:?}");
    assert_eq!(thorough.0, 26214, "{budgets:?}");
    assert_eq!(target.0, 1000, "{budgets:?}");
    // The length line follows the budget (three quarters of it in words).
    for (max, words) in &budgets {
        assert_eq!(*words, max * 3 / 4, "{budgets:?}");
    }
}
