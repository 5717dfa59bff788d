//! The limits a server says it has: its context window, its output limit and how many requests
//! it serves at once, read before the first request of an operation so the input is planned
//! for the window the server really has (a local server is often started with a smaller one
//! than the model was trained for).
//!
//! Where each comes from (every source is optional; what a server does not answer is skipped):
//! * `GET {baseUrl}/models` (OpenAI-compatible): the listed model's `context_length`
//!   (OpenRouter, LM Studio's `max_context_length`, vLLM's `max_model_len`, llama.cpp's
//!   `meta.n_ctx_train` as an upper bound) and `max_completion_tokens` / `max_output_tokens`
//!   (or `top_provider.max_completion_tokens`);
//! * llama.cpp's `GET /props`: the slot window `default_generation_settings.n_ctx` and
//!   `total_slots`;
//! * Ollama's `POST /api/show`: `num_ctx` in the model's `parameters`, else the window of the
//!   loaded model in `GET /api/ps` (Ollama cuts a longer prompt silently instead of refusing
//!   it, so the window matters more there).
//!
//! The window used is the smallest that any source reports, and never more than configured.

use std::time::Duration;

use serde_json::{Value, json};

use crate::settings::SecretString;

/// How long discovery may take in all; a server that does not answer quickly is planned with
/// the configured limits.
pub const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(5);

/// Limits read from a server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServedLimits {
    pub context_window: Option<u64>,
    pub max_output_tokens: Option<u64>,
    /// Requests the server runs at once (llama.cpp's slots).
    pub parallel: Option<u32>,
}

impl ServedLimits {
    fn window(&mut self, n: Option<u64>) {
        if let Some(n) = n.filter(|n| *n > 0) {
            self.context_window = Some(self.context_window.map_or(n, |w| w.min(n)));
        }
    }

    fn output(&mut self, n: Option<u64>) {
        if let Some(n) = n.filter(|n| *n > 0) {
            self.max_output_tokens = Some(self.max_output_tokens.map_or(n, |w| w.min(n)));
        }
    }
}

/// Asks an OpenAI-compatible server at `base_url` (e.g. `http://127.0.0.1:8080/v1`) for the
/// limits of `model`, within [`DISCOVERY_TIMEOUT`]. Nothing found is `ServedLimits::default()`.
pub async fn openai_compatible(
    client: &reqwest::Client,
    base_url: &str,
    model: &str,
    api_key: Option<&SecretString>,
) -> ServedLimits {
    let probe = async {
        let base = base_url.trim_end_matches('/');
        let root = base.strip_suffix("/v1").unwrap_or(base);
        let mut limits = ServedLimits::default();
        if let Some(models) = get_json(client, &format!("{base}/models"), api_key).await {
            from_model_list(&mut limits, &models, model);
        }
        if let Some(props) = get_json(client, &format!("{root}/props"), api_key).await {
            from_llama_props(&mut limits, &props);
        }
        let show = post_json(
            client,
            &format!("{root}/api/show"),
            &json!({ "model": model }),
            api_key,
        )
        .await;
        if let Some(show) = show {
            let num_ctx = ollama_num_ctx(&show);
            if num_ctx.is_some() {
                limits.window(num_ctx);
            } else if let Some(ps) = get_json(client, &format!("{root}/api/ps"), api_key).await {
                limits.window(ollama_loaded_window(&ps, model));
            }
        }
        limits
    };
    tokio::time::timeout(DISCOVERY_TIMEOUT, probe)
        .await
        .unwrap_or_default()
}

async fn get_json(
    client: &reqwest::Client,
    url: &str,
    key: Option<&SecretString>,
) -> Option<Value> {
    let mut request = client.get(url);
    if let Some(key) = key {
        request = request.bearer_auth(key.expose());
    }
    read_json(request).await
}

async fn post_json(
    client: &reqwest::Client,
    url: &str,
    body: &Value,
    key: Option<&SecretString>,
) -> Option<Value> {
    let mut request = client.post(url).json(body);
    if let Some(key) = key {
        request = request.bearer_auth(key.expose());
    }
    read_json(request).await
}

/// The JSON body of a successful answer; anything else (an error status, a non-JSON body, a
/// body over 1 MiB) is `None`.
async fn read_json(request: reqwest::RequestBuilder) -> Option<Value> {
    let response = request.send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    if response.content_length().is_some_and(|n| n > 1 << 20) {
        return None;
    }
    let bytes = response.bytes().await.ok()?;
    serde_json::from_slice(&bytes).ok()
}

fn number(value: &Value) -> Option<u64> {
    value
        .as_u64()
        .or_else(|| value.as_f64().filter(|f| *f >= 1.0).map(|f| f as u64))
}

/// `GET /models`: the entry of `model` (or the only entry: a local server serves one model
/// whatever it is called).
pub fn from_model_list(limits: &mut ServedLimits, list: &Value, model: &str) {
    let entries = list["data"]
        .as_array()
        .or_else(|| list["models"].as_array());
    let Some(entries) = entries else {
        return;
    };
    let entry = entries
        .iter()
        .find(|e| {
            ["id", "name", "model"].iter().any(|k| {
                e[*k]
                    .as_str()
                    .is_some_and(|id| id.eq_ignore_ascii_case(model))
            })
        })
        .or_else(|| (entries.len() == 1).then(|| &entries[0]));
    let Some(entry) = entry else {
        return;
    };
    for key in [
        "context_length",
        "context_window",
        "max_context_length",
        "max_model_len",
        "n_ctx",
    ] {
        limits.window(number(&entry[key]));
    }
    limits.window(number(&entry["meta"]["n_ctx"]));
    limits.window(number(&entry["meta"]["n_ctx_train"]));
    for key in ["max_completion_tokens", "max_output_tokens"] {
        limits.output(number(&entry[key]));
    }
    limits.output(number(&entry["top_provider"]["max_completion_tokens"]));
}

/// llama.cpp's `GET /props`.
pub fn from_llama_props(limits: &mut ServedLimits, props: &Value) {
    limits.window(number(&props["default_generation_settings"]["n_ctx"]));
    limits.window(number(&props["n_ctx"]));
    if let Some(slots) = number(&props["total_slots"]).and_then(|n| u32::try_from(n).ok()) {
        limits.parallel = Some(slots.max(1));
    }
}

/// `num_ctx` in an Ollama `/api/show` answer's `parameters` (lines of `name value`).
pub fn ollama_num_ctx(show: &Value) -> Option<u64> {
    show["parameters"].as_str()?.lines().find_map(|line| {
        let mut parts = line.split_whitespace();
        (parts.next() == Some("num_ctx"))
            .then(|| parts.next()?.parse().ok())
            .flatten()
    })
}

/// The window of `model` as loaded, from Ollama's `/api/ps`.
pub fn ollama_loaded_window(ps: &Value, model: &str) -> Option<u64> {
    ps["models"]
        .as_array()?
        .iter()
        .find(|m| {
            ["name", "model"].iter().any(|k| {
                m[*k]
                    .as_str()
                    .is_some_and(|n| n.eq_ignore_ascii_case(model))
            })
        })
        .and_then(|m| number(&m["context_length"]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_lists_of_several_servers() {
        let mut l = ServedLimits::default();
        from_model_list(
            &mut l,
            &json!({"data": [
                {"id": "other", "context_length": 1000},
                {"id": "Qwen3-8B", "context_length": 40960,
                 "top_provider": {"max_completion_tokens": 8192}},
            ]}),
            "qwen3-8b",
        );
        assert_eq!(l.context_window, Some(40_960));
        assert_eq!(l.max_output_tokens, Some(8_192));

        // llama.cpp: one model, named after its file; the training window bounds it.
        let mut l = ServedLimits::default();
        from_model_list(
            &mut l,
            &json!({"object": "list", "data": [{"id": "gemma.gguf", "meta": {"n_ctx_train": 32768}}]}),
            "gemma",
        );
        assert_eq!(l.context_window, Some(32_768));

        // vLLM.
        let mut l = ServedLimits::default();
        from_model_list(
            &mut l,
            &json!({"data": [{"id": "m", "max_model_len": 8192}]}),
            "m",
        );
        assert_eq!(l.context_window, Some(8_192));

        // Nothing usable.
        let mut l = ServedLimits::default();
        from_model_list(&mut l, &json!({"data": [{"id": "a"}, {"id": "b"}]}), "m");
        from_model_list(&mut l, &json!("nope"), "m");
        assert_eq!(l, ServedLimits::default());
    }

    #[test]
    fn llama_props_give_the_slot_window_and_the_slots() {
        let mut l = ServedLimits {
            context_window: Some(32_768),
            ..ServedLimits::default()
        };
        from_llama_props(
            &mut l,
            &json!({"default_generation_settings": {"n_ctx": 4096}, "total_slots": 1}),
        );
        assert_eq!(l.context_window, Some(4_096));
        assert_eq!(l.parallel, Some(1));
    }

    #[test]
    fn ollama_num_ctx_and_loaded_window() {
        let show = json!({"parameters": "stop \"<end>\"\nnum_ctx                        8192\ntemperature 0.7"});
        assert_eq!(ollama_num_ctx(&show), Some(8_192));
        assert_eq!(
            ollama_num_ctx(&json!({"parameters": "temperature 1"})),
            None
        );
        let ps = json!({"models": [{"name": "llama3:8b", "context_length": 4096}]});
        assert_eq!(ollama_loaded_window(&ps, "llama3:8b"), Some(4_096));
        assert_eq!(ollama_loaded_window(&ps, "other"), None);
    }
}
