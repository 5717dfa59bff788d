//! Checks serde cannot express: ranges, URL rules, names and cross-key consistency.
//!
//! Each check reports the key path it is about, so the error can name the layer (file) that
//! set the offending value.

use std::net::IpAddr;

use super::model::{ProviderKind, Settings, SummarizerKind};

/// A value that deserialized but is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Violation {
    /// Key path segments, e.g. `["compaction", "thresholdPercent"]`.
    pub path: Vec<String>,
    /// What is wrong, for a person to act on.
    pub message: String,
}

fn violation(path: &[&str], message: impl Into<String>) -> Violation {
    Violation {
        path: path.iter().map(|segment| (*segment).to_owned()).collect(),
        message: message.into(),
    }
}

/// The first violation in `settings`, if any.
pub(crate) fn validate(settings: &Settings) -> Result<(), Violation> {
    validate_compaction(settings)?;
    validate_timeouts(settings)?;
    validate_providers(settings)?;
    validate_summarizer(settings)?;
    validate_storage(settings)?;
    validate_trusted_projects(settings)?;
    validate_log(settings)
}

fn validate_compaction(settings: &Settings) -> Result<(), Violation> {
    let compaction = &settings.compaction;
    if let Some(percent) = compaction.threshold_percent
        && !(1..=99).contains(&percent)
    {
        return Err(violation(
            &["compaction", "thresholdPercent"],
            format!("must be between 1 and 99, got {percent}"),
        ));
    }
    if compaction.ledger_budget_percent > 100 {
        return Err(violation(
            &["compaction", "ledgerBudgetPercent"],
            format!(
                "must be between 0 and 100, got {}",
                compaction.ledger_budget_percent
            ),
        ));
    }
    if compaction.threshold_tokens == Some(0) {
        return Err(violation(
            &["compaction", "thresholdTokens"],
            "must be at least 1",
        ));
    }
    if let Some(endpoint) = compaction.remote_endpoint() {
        check_url(endpoint, compaction.allow_insecure_http)
            .map_err(|message| violation(&["compaction", "remoteEndpoint"], message))?;
    }
    if let Some(name) = &compaction.remote_token_env {
        check_env_name(name).map_err(|m| violation(&["compaction", "remoteTokenEnv"], m))?;
    }
    Ok(())
}

fn validate_timeouts(settings: &Settings) -> Result<(), Violation> {
    let hooks = &settings.hooks;
    let timeouts = [
        (
            &["compaction", "remoteTimeoutMs"],
            Some(settings.compaction.remote_timeout_ms),
        ),
        (
            &["summarizer", "clientTimeoutMs"],
            Some(settings.summarizer.client_timeout_ms),
        ),
        (&["hooks", "timeoutMs"], Some(hooks.timeout_ms)),
        (
            &["hooks", "beforeCompactTimeoutMs"],
            hooks.before_compact_timeout_ms,
        ),
        (
            &["hooks", "compactingTimeoutMs"],
            hooks.compacting_timeout_ms,
        ),
        (
            &["hooks", "beforeTreeTimeoutMs"],
            hooks.before_tree_timeout_ms,
        ),
    ];
    match timeouts.iter().find(|(_, ms)| *ms == Some(0)) {
        Some((path, _)) => Err(violation(*path, "must be at least 1 millisecond")),
        None => Ok(()),
    }
}

fn validate_providers(settings: &Settings) -> Result<(), Violation> {
    let insecure_ok = settings.compaction.allow_insecure_http;
    for (name, provider) in &settings.providers {
        if let Some(url) = &provider.base_url {
            check_url(url, insecure_ok)
                .map_err(|m| violation(&["providers", name, "baseUrl"], m))?;
        }
        if let Some(env) = &provider.api_key_env {
            check_env_name(env).map_err(|m| violation(&["providers", name, "apiKeyEnv"], m))?;
        }
        let zero = [
            (
                "firstTokenTimeoutMs",
                provider.first_token_timeout_ms == Some(0),
            ),
            ("idleTimeoutMs", provider.idle_timeout_ms == Some(0)),
            (
                "maxParallelRequests",
                provider.max_parallel_requests == Some(0),
            ),
        ];
        if let Some((key, _)) = zero.iter().find(|(_, zero)| *zero) {
            return Err(violation(&["providers", name, key], "must be at least 1"));
        }
        for (id, model) in &provider.models {
            if model.context_window == 0 {
                return Err(violation(
                    &["providers", name, "models", id, "contextWindow"],
                    "must be greater than 0",
                ));
            }
            if model.max_output_tokens == Some(0) {
                return Err(violation(
                    &["providers", name, "models", id, "maxOutputTokens"],
                    "must be greater than 0",
                ));
            }
        }
    }
    Ok(())
}

fn validate_summarizer(settings: &Settings) -> Result<(), Violation> {
    let summarizer = &settings.summarizer;
    if let Some(model) = &summarizer.model {
        let kind =
            check_model_ref(settings, model).map_err(|m| violation(&["summarizer", "model"], m))?;
        let wanted = match summarizer.kind {
            SummarizerKind::Openai => Some(ProviderKind::Openai),
            SummarizerKind::Anthropic => Some(ProviderKind::Anthropic),
            _ => None,
        };
        if let Some(wanted) = wanted.filter(|wanted| *wanted != kind) {
            return Err(violation(
                &["summarizer", "model"],
                format!(
                    "`{model}` is served by a provider of kind `{}`, but summarizer.kind is `{}`",
                    kind.name(),
                    wanted.name()
                ),
            ));
        }
    }
    for (index, model) in summarizer.candidates.iter().flatten().enumerate() {
        let index = index.to_string();
        check_model_ref(settings, model)
            .map_err(|m| violation(&["summarizer", "candidates", &index], m))?;
    }
    if summarizer.kind == SummarizerKind::Remote && settings.compaction.remote_endpoint().is_none()
    {
        return Err(violation(
            &["summarizer", "kind"],
            "`remote` needs compaction.remoteEndpoint to be set",
        ));
    }
    Ok(())
}

fn validate_storage(settings: &Settings) -> Result<(), Violation> {
    match &settings.storage.sessions_dir {
        Some(dir) if !dir.is_absolute() => Err(violation(
            &["storage", "sessionsDir"],
            format!("must be an absolute path, got {}", dir.display()),
        )),
        _ => Ok(()),
    }
}

fn validate_trusted_projects(settings: &Settings) -> Result<(), Violation> {
    for (index, dir) in settings.trusted_projects.iter().enumerate() {
        if !dir.is_absolute() {
            return Err(Violation {
                path: vec!["trustedProjects".to_owned(), index.to_string()],
                message: format!("must be an absolute path, got {}", dir.display()),
            });
        }
    }
    Ok(())
}

fn validate_log(settings: &Settings) -> Result<(), Violation> {
    let level = &settings.log.level;
    tracing_subscriber::EnvFilter::builder()
        .parse(level)
        .map(|_| ())
        .map_err(|error| {
            violation(
                &["log", "level"],
                format!("invalid filter `{level}`: {error}"),
            )
        })
}

/// Checks a `"provider/id"` reference and returns the provider's kind.
fn check_model_ref(settings: &Settings, model: &str) -> Result<ProviderKind, String> {
    let Some((provider, id)) = model
        .split_once('/')
        .filter(|(p, id)| !p.is_empty() && !id.is_empty())
    else {
        return Err(format!("expected \"provider/id\", got `{model}`"));
    };
    match settings.providers.get(provider) {
        Some(found) => Ok(found.kind),
        None => Err(format!(
            "unknown provider `{provider}` in `{provider}/{id}`; add it under providers"
        )),
    }
}

/// An environment variable name: non-empty, no `=` or NUL. The value is not echoed, since a
/// pasted API key in the wrong field is the usual mistake.
fn check_env_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.contains(['=', '\0']) || name.contains(char::is_whitespace) {
        Err("must be the name of an environment variable (not the key itself)".to_owned())
    } else {
        Ok(())
    }
}

/// An `https://` URL, or `http://` to a loopback host unless insecure HTTP is allowed.
fn check_url(url: &str, allow_insecure_http: bool) -> Result<(), String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("`{url}` is not an http(s) URL"))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = host_of(authority);
    if host.is_empty() {
        return Err(format!("`{url}` has no host"));
    }
    match scheme.to_ascii_lowercase().as_str() {
        "https" => Ok(()),
        "http" if allow_insecure_http || is_loopback(host) => Ok(()),
        "http" => Err(format!(
            "`{url}` uses plain http to a non-loopback host; use https or set \
             compaction.allowInsecureHttp"
        )),
        _ => Err(format!("`{url}` is not an http(s) URL")),
    }
}

/// The host of a URL authority (`user@host:port`, `[::1]:8080`).
fn host_of(authority: &str) -> &str {
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    if let Some(bracketed) = host_port.strip_prefix('[') {
        return bracketed.split(']').next().unwrap_or_default();
    }
    host_port.split(':').next().unwrap_or_default()
}

fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host.to_ascii_lowercase().ends_with(".localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_follow_the_http_rule() {
        assert!(check_url("https://api.openai.com/v1", false).is_ok());
        assert!(check_url("http://localhost:11434/v1", false).is_ok());
        assert!(check_url("http://127.0.0.1:8080", false).is_ok());
        assert!(check_url("http://[::1]:8080/x", false).is_ok());
        assert!(check_url("http://10.0.0.5:8080", false).is_err());
        assert!(check_url("http://10.0.0.5:8080", true).is_ok());
        assert!(check_url("ftp://localhost", true).is_err());
        assert!(check_url("localhost:8080", true).is_err());
        assert!(check_url("https:///path", false).is_err());
    }

    #[test]
    fn env_names_reject_pasted_keys_without_echoing_them() {
        assert!(check_env_name("OPENAI_API_KEY").is_ok());
        let error = check_env_name("sk-secret value").unwrap_err();
        assert!(!error.contains("sk-secret"));
    }
}
