//! The summarizer candidates built from settings (spec §4.15, DESIGN §5).
//!
//! Order, duplicates removed by id: the RPC client's summarizer (when the client offered one),
//! the remote endpoint (when configured), `summarizer.model`, `summarizer.candidates`, the
//! model of each role in `default, smol, slow, plan, commit`, then (when at least one of those
//! is configured) the available model with the largest context window that is not yet listed.
//! `summarizer.kind` other than `auto` keeps only summarizers of that kind. The extractive summarizer is always the last
//! rung, so a compaction never fails for want of a model. Manual compactions and branch
//! summaries use the same candidates and retries as automatic ones (spec §13 #9).
//!
//! A configured model that cannot run (no API key, a provider that does not list it) is
//! skipped with a log line. A summarizer asked for explicitly for one request
//! ([`SummarizerChoice`]: the CLI's `--summarizer` / `--model`, a request parameter) that
//! cannot run at all is an error instead: the user named it, so falling back silently would
//! hide the mistake.
//!
//! Each model summarizer gets its provider's timeouts, output limit and request queue (1 slot
//! for a server on this machine by default, see [`crate::summarize::queue`]).

use std::sync::Arc;

use crate::settings::{ProviderKind, SecretString, Settings, SummarizerKind};

use super::anthropic::{AnthropicConfig, AnthropicSummarizer};
use super::breaker::Breaker;
use super::extractive::ExtractiveSummarizer;
use super::http::HttpOptions;
use super::openai::{OpenAiConfig, OpenAiSummarizer};
use super::queue::RequestQueue;
use super::remote::{RemoteConfig, RemoteSummarizer};
use super::{RetryPolicy, SummarizeError, Summarizer, SummarizerSet};

/// The model roles whose models are summarizer candidates, in order (spec §4.15).
pub const MODEL_ROLE_IDS: [&str; 5] = ["default", "smol", "slow", "plan", "commit"];

/// Why the candidates cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CandidateError {
    /// The settings name a summarizer that cannot be built (`settingsInvalid`).
    #[error("{0}")]
    Settings(String),
    /// The summarizer one request asked for cannot run (`invalidParams`).
    #[error("{0}")]
    Unavailable(String),
}

/// A summarizer asked for by one request; see the module doc.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SummarizerChoice {
    /// `--summarizer` / the `summarizer` parameter.
    pub kind: Option<SummarizerKind>,
    /// `--model` / the `model` parameter: `provider/id`, or a bare id.
    pub model: Option<String>,
}

impl SummarizerChoice {
    /// Whether the request asks for nothing in particular.
    pub fn is_empty(&self) -> bool {
        self.kind.is_none() && self.model.is_none()
    }

    /// `settings` with the choice applied, as the summarizers were built from them.
    pub fn applied_to(&self, mut settings: Settings) -> Settings {
        if let Some(kind) = self.kind {
            settings.summarizer.kind = kind;
        }
        if let Some(model) = &self.model {
            settings.summarizer.model = Some(model.clone());
        }
        settings
    }
}

/// Builds the candidates from `settings` with API keys from the process environment; `client`
/// is the RPC client's summarizer when the client declared one.
pub fn summarizers_from_settings(
    settings: &Settings,
    client: Option<Arc<dyn Summarizer>>,
) -> Result<SummarizerSet, CandidateError> {
    summarizers_with_env(settings, client, &|name| std::env::var(name).ok())
}

/// The candidates for a request that asked for `choice`: the settings with the choice applied,
/// and an `invalidParams` error naming the reason when the chosen summarizer cannot run.
pub fn summarizers_for_choice(
    settings: &Settings,
    client: Option<Arc<dyn Summarizer>>,
    choice: &SummarizerChoice,
) -> Result<SummarizerSet, CandidateError> {
    summarizers_for_choice_with_env(settings, client, choice, &|name| std::env::var(name).ok())
}

/// [`summarizers_for_choice`] with an explicit environment lookup (tests).
pub fn summarizers_for_choice_with_env(
    settings: &Settings,
    client: Option<Arc<dyn Summarizer>>,
    choice: &SummarizerChoice,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<SummarizerSet, CandidateError> {
    let settings = choice.applied_to(settings.clone());
    if let Some(model) = &choice.model {
        let only = provider_kind_of(settings.summarizer.kind);
        match model_summarizer(&settings, model, only, env)? {
            Built::Ready(_) => {}
            Built::Skipped(reason) => {
                return Err(CandidateError::Unavailable(format!(
                    "the summarizer model {model} cannot be used: {reason}"
                )));
            }
        }
    }
    let has_client = client.is_some();
    let set = summarizers_with_env(&settings, client, env)?;
    let kind = settings.summarizer.kind;
    let wanted_kind = matches!(
        kind,
        SummarizerKind::Openai | SummarizerKind::Anthropic | SummarizerKind::Client
    );
    if choice.kind.is_some() && wanted_kind && set.candidates.is_empty() {
        let why = match kind {
            SummarizerKind::Client if !has_client => {
                "the client did not offer summarizer/summarize in initialize".to_owned()
            }
            _ => format!(
                "no {} model is configured that can run (set summarizer.model or pass a model, \
                 and the provider's API key)",
                kind_name(kind)
            ),
        };
        return Err(CandidateError::Unavailable(format!(
            "the summarizer {} cannot be used: {why}",
            kind_name(kind)
        )));
    }
    Ok(set)
}

fn kind_name(kind: SummarizerKind) -> &'static str {
    match kind {
        SummarizerKind::Auto => "auto",
        SummarizerKind::Extractive => "extractive",
        SummarizerKind::Openai => "openai",
        SummarizerKind::Anthropic => "anthropic",
        SummarizerKind::Remote => "remote",
        SummarizerKind::Client => "client",
    }
}

fn provider_kind_of(kind: SummarizerKind) -> Option<ProviderKind> {
    match kind {
        SummarizerKind::Openai => Some(ProviderKind::Openai),
        SummarizerKind::Anthropic => Some(ProviderKind::Anthropic),
        _ => None,
    }
}

/// [`summarizers_from_settings`] with an explicit environment lookup (tests).
pub fn summarizers_with_env(
    settings: &Settings,
    client: Option<Arc<dyn Summarizer>>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<SummarizerSet, CandidateError> {
    let kind = settings.summarizer.kind;
    let mut candidates: Vec<Arc<dyn Summarizer>> = Vec::new();
    let wants = |k: SummarizerKind| kind == SummarizerKind::Auto || kind == k;

    if let Some(client) = client.filter(|_| wants(SummarizerKind::Client)) {
        candidates.push(client);
    } else if kind == SummarizerKind::Client {
        tracing::warn!("summarizer.kind is client but the client offers no summarizer");
    }

    if wants(SummarizerKind::Remote) {
        match RemoteConfig::from_settings(&settings.compaction, env) {
            Some(config) => {
                let remote = RemoteSummarizer::new(config).map_err(|e| {
                    CandidateError::Settings(format!("compaction.remoteEndpoint: {e}"))
                })?;
                candidates.push(Arc::new(remote));
            }
            None if kind == SummarizerKind::Remote => {
                return Err(CandidateError::Settings(
                    "summarizer.kind is remote but compaction.remoteEndpoint is not set".into(),
                ));
            }
            None => {}
        }
    }

    let models_wanted = matches!(
        kind,
        SummarizerKind::Auto | SummarizerKind::Openai | SummarizerKind::Anthropic
    );
    if models_wanted {
        let configured = model_strings(settings);
        for model in &configured {
            match model_summarizer(settings, model, provider_kind_of(kind), env)? {
                Built::Ready(s) => {
                    if !candidates.iter().any(|c| c.id() == s.id()) {
                        candidates.push(s);
                    }
                }
                Built::Skipped(reason) => {
                    tracing::info!(model, "summarizer model skipped: {reason}");
                }
            }
        }
        if !configured.is_empty()
            && let Some(s) =
                largest_window_model(settings, provider_kind_of(kind), env, &candidates)?
        {
            candidates.push(s);
        }
    }

    Ok(SummarizerSet {
        candidates,
        fallback: Some(Arc::new(ExtractiveSummarizer::new())),
        retry: RetryPolicy::from(&settings.retry),
        breaker: Arc::new(Breaker::new(settings.retry.max_retries)),
    })
}

/// The configured model strings in candidate order (duplicates are removed later, by id).
fn model_strings(settings: &Settings) -> Vec<String> {
    let summarizer = &settings.summarizer;
    let mut out: Vec<String> = summarizer.model.iter().cloned().collect();
    out.extend(summarizer.candidates.iter().flatten().cloned());
    out.extend(
        MODEL_ROLE_IDS
            .iter()
            .filter_map(|role| settings.model_roles.get(*role).cloned()),
    );
    out.retain(|m| !m.trim().is_empty());
    out
}

/// The largest-window rung (spec §4.15): of the models the providers list that can run (a key
/// in the settings or the environment, or a keyless server on this machine) and are not already
/// candidates, the one with the largest context window; ties go to the first in
/// `provider/id` order. Only added after at least one configured model, so a daemon with no
/// model configured never starts sending conversations to a hosted API because a key happens
/// to be in its environment.
fn largest_window_model(
    settings: &Settings,
    only: Option<ProviderKind>,
    env: &dyn Fn(&str) -> Option<String>,
    candidates: &[Arc<dyn Summarizer>],
) -> Result<Option<Arc<dyn Summarizer>>, CandidateError> {
    let mut models: Vec<(u64, String)> = settings
        .providers
        .iter()
        .filter(|(_, p)| only.is_none_or(|k| k == p.kind))
        .flat_map(|(name, p)| {
            p.models
                .iter()
                .map(move |(id, m)| (m.context_window, format!("{name}/{id}")))
        })
        .filter(|(_, full)| !candidates.iter().any(|c| c.id() == *full))
        .collect();
    // Largest window first; the sort is stable, so ties keep `provider/id` order.
    models.sort_by_key(|m| std::cmp::Reverse(m.0));
    for (_, full) in models {
        if let Built::Ready(s) = model_summarizer(settings, &full, only, env)? {
            tracing::debug!(model = full, "largest-window summarizer candidate");
            return Ok(Some(s));
        }
    }
    Ok(None)
}

/// Resolves `provider/id` or a bare id (matched case-insensitively across providers).
fn resolve_model<'s>(settings: &'s Settings, model: &str) -> Option<(&'s str, String)> {
    if let Some((provider, id)) = model.split_once('/')
        && let Some((name, _)) = settings.providers.get_key_value(provider)
    {
        return Some((name.as_str(), id.to_owned()));
    }
    settings.providers.iter().find_map(|(name, p)| {
        p.models
            .keys()
            .find(|id| id.eq_ignore_ascii_case(model))
            .map(|id| (name.as_str(), id.clone()))
    })
}

/// A model summarizer, or why it cannot run.
enum Built {
    Ready(Arc<dyn Summarizer>),
    Skipped(String),
}

/// The summarizer for one configured model, or why it is skipped (unknown provider, another
/// kind than asked for, no API key).
fn model_summarizer(
    settings: &Settings,
    model: &str,
    only: Option<ProviderKind>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Built, CandidateError> {
    let Some((provider_name, id)) = resolve_model(settings, model) else {
        return Ok(Built::Skipped(
            "no provider lists it (use provider/id with a provider under providers)".into(),
        ));
    };
    let provider = &settings.providers[provider_name];
    if let Some(only) = only.filter(|k| *k != provider.kind) {
        return Ok(Built::Skipped(format!(
            "its provider {provider_name} is of kind {}, not {}",
            provider.kind.name(),
            only.name()
        )));
    }
    let api_key = provider.api_key.clone().or_else(|| {
        env(provider.api_key_env())
            .filter(|k| !k.is_empty())
            .map(SecretString::new)
    });
    // Local servers (Ollama, llama.cpp) need no key; remote ones do, so skip them without.
    if api_key.is_none() && !provider.is_local() {
        return Ok(Built::Skipped(format!(
            "no API key (set {} or providers.{provider_name}.apiKeyEnv)",
            provider.api_key_env()
        )));
    }
    let full = format!("{provider_name}/{id}");
    let context_window = settings.context_window_for(&full);
    let max_output_tokens = settings
        .model_settings(&full)
        .and_then(|m| m.max_output_tokens)
        .map(|n| u32::try_from(n).unwrap_or(u32::MAX));
    let base_url = provider.base_url().to_owned();
    let http = HttpOptions {
        allow_insecure_http: settings.compaction.allow_insecure_http,
        first_token_timeout: provider.first_token_timeout(),
        idle_timeout: provider.idle_timeout(),
        ..HttpOptions::default()
    };
    let slots = usize::try_from(provider.parallel_requests()).unwrap_or(usize::MAX);
    let queue = Some(RequestQueue::shared(&base_url, slots));
    let invalid =
        |e: SummarizeError| CandidateError::Settings(format!("providers.{provider_name}: {e}"));
    let summarizer: Arc<dyn Summarizer> = match provider.kind {
        ProviderKind::Openai => Arc::new(
            OpenAiSummarizer::new(OpenAiConfig {
                provider: provider_name.to_owned(),
                model: id,
                base_url,
                api_key,
                context_window,
                max_output_tokens,
                max_tokens_field: None,
                http,
                queue,
                discover_limits: provider.discovers_limits(),
            })
            .map_err(invalid)?,
        ),
        ProviderKind::Anthropic => Arc::new(
            AnthropicSummarizer::new(AnthropicConfig {
                provider: provider_name.to_owned(),
                model: id,
                base_url,
                api_key,
                context_window,
                max_output_tokens,
                thinking: false,
                http,
                queue,
            })
            .map_err(invalid)?,
        ),
    };
    Ok(Built::Ready(summarizer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::{ModelSettings, ProviderSettings};

    fn settings_with(json: serde_json::Value) -> Settings {
        let mut stack = crate::settings::SettingsStack::new();
        stack.set_initialize(&json).expect("valid settings");
        stack.effective().expect("effective settings")
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn a_chosen_summarizer_that_cannot_run_is_an_error_not_a_fallback() {
        let choose = |kind: Option<SummarizerKind>, model: Option<&str>| {
            let choice = SummarizerChoice {
                kind,
                model: model.map(str::to_owned),
            };
            summarizers_for_choice_with_env(&Settings::default(), None, &choice, &no_env)
        };
        let message = |r: Result<SummarizerSet, CandidateError>| match r {
            Err(e) => {
                assert!(matches!(e, CandidateError::Unavailable(_)), "{e}");
                e.to_string()
            }
            Ok(set) => panic!("expected an error, got {:?}", set.ids()),
        };
        let openai = message(choose(Some(SummarizerKind::Openai), None));
        assert!(
            openai.contains("the summarizer openai cannot be used"),
            "{openai}"
        );
        // The settings say what the remote kind lacks (a `settingsInvalid` error).
        let remote = choose(Some(SummarizerKind::Remote), None).map(|set| set.ids());
        let remote = remote.expect_err("no remote endpoint").to_string();
        assert!(remote.contains("compaction.remoteEndpoint"), "{remote}");
        let client = message(choose(Some(SummarizerKind::Client), None));
        assert!(client.contains("summarizer/summarize"), "{client}");
        // A model with no API key in the environment.
        let model = message(choose(None, Some("openai/gpt-4.1")));
        assert!(model.contains("openai/gpt-4.1 cannot be used"), "{model}");
        // Asking for the extractive summarizer, or for nothing, always works.
        let set = choose(Some(SummarizerKind::Extractive), None).unwrap();
        assert_eq!(set.ids(), vec!["extractive".to_owned()]);
        assert!(choose(None, None).is_ok());
        // With the key, the chosen model is the first candidate.
        let env = |name: &str| (name == "OPENAI_API_KEY").then(|| "sk-test".to_owned());
        let choice = SummarizerChoice {
            kind: None,
            model: Some("openai/gpt-4.1".to_owned()),
        };
        let set = summarizers_for_choice_with_env(&Settings::default(), None, &choice, &env)
            .expect("a model that can run");
        assert_eq!(set.ids()[0], "openai/gpt-4.1");
    }

    #[test]
    fn nothing_configured_gives_only_the_extractive_fallback() {
        let set = summarizers_with_env(&Settings::default(), None, &no_env).unwrap();
        assert_eq!(set.ids(), vec!["extractive".to_owned()]);
    }

    #[test]
    fn candidates_follow_model_then_candidates_then_roles_and_skip_keyless() {
        let settings = settings_with(serde_json::json!({
            "summarizer": {"model": "anthropic/claude-x", "candidates": ["openai/gpt-a", "openai/gpt-b"]},
            "modelRoles": {"smol": "openai/gpt-b", "default": "local/llama"},
            "providers": {"local": {"kind": "openai", "baseUrl": "http://127.0.0.1:1/v1"}}
        }));
        let env = |name: &str| (name == "OPENAI_API_KEY").then(|| "sk-test".to_owned());
        let set = summarizers_with_env(&settings, None, &env).unwrap();
        // anthropic has no key: skipped; gpt-b appears once; the local server needs no key;
        // then the largest window among the models that can run (gpt-4.1, 1,047,576 tokens,
        // before gpt-4.1-mini with the same window).
        assert_eq!(
            set.ids(),
            [
                "openai/gpt-a",
                "openai/gpt-b",
                "local/llama",
                "openai/gpt-4.1",
                "extractive"
            ]
        );
    }

    #[test]
    fn kind_forces_one_kind() {
        let settings = settings_with(serde_json::json!({
            "summarizer": {"kind": "anthropic", "candidates": ["openai/gpt-a", "anthropic/claude-x"]},
        }));
        let env = |_: &str| Some("key".to_owned());
        let set = summarizers_with_env(&settings, None, &env).unwrap();
        // The largest-window rung keeps to the kind too: the 200k Anthropic models tie, the
        // first in id order wins.
        assert_eq!(
            set.ids(),
            [
                "anthropic/claude-x",
                "anthropic/claude-haiku-4-5",
                "extractive"
            ]
        );

        let extractive = settings_with(serde_json::json!({
            "summarizer": {"kind": "extractive", "model": "openai/gpt-a"},
        }));
        let set = summarizers_with_env(&extractive, None, &env).unwrap();
        assert_eq!(set.ids(), ["extractive"]);

        // Settings validation refuses this too; the builder must not rely on it.
        let mut remote = Settings::default();
        remote.summarizer.kind = SummarizerKind::Remote;
        assert!(matches!(
            summarizers_with_env(&remote, None, &env),
            Err(CandidateError::Settings(_))
        ));
    }

    #[test]
    fn the_largest_window_rung_needs_a_configured_model_and_a_runnable_provider() {
        let env = |name: &str| (name == "ANTHROPIC_API_KEY").then(|| "key".to_owned());
        // Nothing configured: a key in the environment alone starts no model.
        let set = summarizers_with_env(&Settings::default(), None, &env).unwrap();
        assert_eq!(set.ids(), ["extractive"]);

        // The keyless loopback server's big model beats the keyed 200k ones; the remote
        // provider without a key is skipped even though its window is larger still.
        let settings = settings_with(serde_json::json!({
            "summarizer": {"model": "anthropic/claude-sonnet-4-5"},
            "providers": {
                "big": {"kind": "openai", "baseUrl": "http://127.0.0.1:9/v1",
                        "models": {"huge": {"contextWindow": 2_000_000}}},
                "far": {"kind": "openai", "baseUrl": "https://llm.example/v1",
                        "apiKeyEnv": "FAR_KEY",
                        "models": {"giant": {"contextWindow": 9_000_000}}}
            }
        }));
        let set = summarizers_with_env(&settings, None, &env).unwrap();
        assert_eq!(
            set.ids(),
            ["anthropic/claude-sonnet-4-5", "big/huge", "extractive"]
        );
        assert_eq!(set.candidates[1].context_window(), 2_000_000);

        // Already a candidate: not listed twice (and nothing else can run here).
        let settings = settings_with(serde_json::json!({
            "summarizer": {"model": "big/huge"},
            "providers": {"big": {"kind": "openai", "baseUrl": "http://127.0.0.1:9/v1",
                                  "models": {"huge": {"contextWindow": 2_000_000}}}}
        }));
        let set = summarizers_with_env(&settings, None, &no_env).unwrap();
        assert_eq!(set.ids(), ["big/huge", "extractive"]);
    }

    #[test]
    fn context_window_comes_from_the_model_settings() {
        let mut settings = Settings::default();
        settings
            .providers
            .entry("local".into())
            .or_insert_with(ProviderSettings::default)
            .models
            .insert(
                "tiny".into(),
                ModelSettings {
                    context_window: 4096,
                    max_output_tokens: None,
                },
            );
        settings.providers.get_mut("local").unwrap().base_url =
            Some("http://localhost:9/v1".into());
        settings.summarizer.model = Some("tiny".into());
        let set = summarizers_with_env(&settings, None, &no_env).unwrap();
        assert_eq!(set.ids(), ["local/tiny", "extractive"]);
        assert_eq!(set.candidates[0].context_window(), 4096);
    }
}
