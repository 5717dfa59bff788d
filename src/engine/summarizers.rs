//! The summarizer candidates built from settings (spec §4.15, DESIGN §5).
//!
//! Order, duplicates removed by id: the RPC client's summarizer (when the client offered one),
//! the remote endpoint (when configured), `summarizer.model`, `summarizer.candidates`, then the
//! model of each role in `default, smol, slow, plan, commit`. `summarizer.kind` other than
//! `auto` keeps only summarizers of that kind. The extractive summarizer is always the last
//! rung, so a compaction never fails for want of a model. Manual compactions and branch
//! summaries use the same candidates and retries as automatic ones (spec §13 #9).

use std::sync::Arc;

use crate::settings::{ProviderKind, Settings, SummarizerKind};
use crate::summarize::anthropic::{AnthropicConfig, AnthropicSummarizer};
use crate::summarize::extractive::ExtractiveSummarizer;
use crate::summarize::openai::{OpenAiConfig, OpenAiSummarizer};
use crate::summarize::remote::{RemoteConfig, RemoteSummarizer};
use crate::summarize::{HttpOptions, RetryPolicy, Summarizer};

use super::EngineError;

/// The model roles whose models are summarizer candidates, in order (spec §4.15).
pub const MODEL_ROLE_IDS: [&str; 5] = ["default", "smol", "slow", "plan", "commit"];

/// The summarizers a session uses, in the order they are tried.
#[derive(Clone, Default)]
pub struct SummarizerSet {
    pub candidates: Vec<Arc<dyn Summarizer>>,
    /// The extractive summarizer, tried when every candidate failed.
    pub fallback: Option<Arc<dyn Summarizer>>,
    pub retry: RetryPolicy,
}

impl std::fmt::Debug for SummarizerSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SummarizerSet")
            .field("candidates", &self.ids())
            .field("fallback", &self.fallback.as_ref().map(|s| s.id()))
            .finish_non_exhaustive()
    }
}

impl SummarizerSet {
    /// Only the extractive summarizer (no network).
    pub fn extractive_only() -> Self {
        SummarizerSet {
            candidates: Vec::new(),
            fallback: Some(Arc::new(ExtractiveSummarizer::new())),
            retry: RetryPolicy::default(),
        }
    }

    /// Ids of the candidates then the fallback, in order.
    pub fn ids(&self) -> Vec<String> {
        self.all().map(|s| s.id()).collect()
    }

    /// Every summarizer in the order it is tried.
    pub fn all(&self) -> impl Iterator<Item = &Arc<dyn Summarizer>> {
        self.candidates.iter().chain(self.fallback.as_ref())
    }

    /// The smallest input window among the summarizers that will be tried: the request must
    /// fit the one with the least room.
    pub fn min_context_window(&self) -> u64 {
        self.all()
            .map(|s| s.context_window())
            .min()
            .unwrap_or(u64::MAX)
    }
}

/// Builds the candidates from `settings` with API keys from the process environment; `client`
/// is the RPC client's summarizer when the client declared one.
pub fn summarizers_from_settings(
    settings: &Settings,
    client: Option<Arc<dyn Summarizer>>,
) -> Result<SummarizerSet, EngineError> {
    summarizers_with_env(settings, client, &|name| std::env::var(name).ok())
}

/// [`summarizers_from_settings`] with an explicit environment lookup (tests).
pub fn summarizers_with_env(
    settings: &Settings,
    client: Option<Arc<dyn Summarizer>>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<SummarizerSet, EngineError> {
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
                    EngineError::Settings(format!("compaction.remoteEndpoint: {e}"))
                })?;
                candidates.push(Arc::new(remote));
            }
            None if kind == SummarizerKind::Remote => {
                return Err(EngineError::Settings(
                    "summarizer.kind is remote but compaction.remoteEndpoint is not set".into(),
                ));
            }
            None => {}
        }
    }

    let provider_kind = match kind {
        SummarizerKind::Openai => Some(ProviderKind::Openai),
        SummarizerKind::Anthropic => Some(ProviderKind::Anthropic),
        SummarizerKind::Auto => None,
        SummarizerKind::Extractive | SummarizerKind::Remote | SummarizerKind::Client => None,
    };
    let models_wanted = matches!(
        kind,
        SummarizerKind::Auto | SummarizerKind::Openai | SummarizerKind::Anthropic
    );
    if models_wanted {
        for model in model_strings(settings) {
            match model_summarizer(settings, &model, provider_kind, env) {
                Ok(Some(s)) => {
                    if !candidates.iter().any(|c| c.id() == s.id()) {
                        candidates.push(s);
                    }
                }
                Ok(None) => {}
                Err(e) => return Err(e),
            }
        }
    }

    Ok(SummarizerSet {
        candidates,
        fallback: Some(Arc::new(ExtractiveSummarizer::new())),
        retry: RetryPolicy::from(&settings.retry),
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

/// The summarizer for one configured model; `None` when it is skipped (unknown provider,
/// another kind than asked for, or no API key).
fn model_summarizer(
    settings: &Settings,
    model: &str,
    only: Option<ProviderKind>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Arc<dyn Summarizer>>, EngineError> {
    let Some((provider_name, id)) = resolve_model(settings, model) else {
        tracing::warn!(model, "summarizer model skipped: no provider lists it");
        return Ok(None);
    };
    let provider = &settings.providers[provider_name];
    if only.is_some_and(|k| k != provider.kind) {
        return Ok(None);
    }
    let api_key = provider.api_key.clone().or_else(|| {
        env(provider.api_key_env())
            .filter(|k| !k.is_empty())
            .map(crate::settings::SecretString::new)
    });
    let base_url = provider.base_url().to_owned();
    // Local servers (Ollama, llama.cpp) need no key; remote ones do, so skip them without.
    if api_key.is_none() && !is_loopback_url(&base_url) {
        tracing::info!(
            model,
            env = provider.api_key_env(),
            "summarizer model skipped: no API key"
        );
        return Ok(None);
    }
    let full = format!("{provider_name}/{id}");
    let context_window = settings.context_window_for(&full);
    let http = HttpOptions {
        allow_insecure_http: settings.compaction.allow_insecure_http,
        ..HttpOptions::default()
    };
    let invalid = |e: crate::summarize::SummarizeError| {
        EngineError::Settings(format!("providers.{provider_name}: {e}"))
    };
    let summarizer: Arc<dyn Summarizer> = match provider.kind {
        ProviderKind::Openai => Arc::new(
            OpenAiSummarizer::new(OpenAiConfig {
                provider: provider_name.to_owned(),
                model: id,
                base_url,
                api_key,
                context_window,
                max_tokens_field: None,
                http,
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
                thinking: false,
                http,
            })
            .map_err(invalid)?,
        ),
    };
    Ok(Some(summarizer))
}

fn is_loopback_url(url: &str) -> bool {
    let Ok(parsed) = reqwest::Url::parse(url) else {
        return false;
    };
    let host = parsed.host_str().unwrap_or("");
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
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
        // anthropic has no key: skipped; gpt-b appears once; the local server needs no key.
        assert_eq!(
            set.ids(),
            ["openai/gpt-a", "openai/gpt-b", "local/llama", "extractive"]
        );
    }

    #[test]
    fn kind_forces_one_kind() {
        let settings = settings_with(serde_json::json!({
            "summarizer": {"kind": "anthropic", "candidates": ["openai/gpt-a", "anthropic/claude-x"]},
        }));
        let env = |_: &str| Some("key".to_owned());
        let set = summarizers_with_env(&settings, None, &env).unwrap();
        assert_eq!(set.ids(), ["anthropic/claude-x", "extractive"]);

        let extractive = settings_with(serde_json::json!({
            "summarizer": {"kind": "extractive", "model": "openai/gpt-a"},
        }));
        let set = summarizers_with_env(&extractive, None, &env).unwrap();
        assert_eq!(set.ids(), ["extractive"]);

        // Settings validation refuses this too; the builder must not rely on it.
        let mut remote = Settings::default();
        remote.summarizer.kind = SummarizerKind::Remote;
        assert_eq!(
            summarizers_with_env(&remote, None, &env)
                .unwrap_err()
                .kind(),
            crate::engine::EngineErrorKind::Settings
        );
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
        assert_eq!(set.min_context_window(), 4096);
    }
}
