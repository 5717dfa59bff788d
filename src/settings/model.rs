//! The typed settings: every key, its default and its meaning.
//!
//! The doc comments on fields become `description`s in the generated JSON Schema, which editors
//! show on hover, so they are written for a user editing `settings.json`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize, Serializer};

/// Context window assumed for a model that no provider lists (spec §8: custom models default to
/// 128000).
pub const DEFAULT_CONTEXT_WINDOW: u64 = 128_000;

/// What a redacted secret looks like wherever settings are shown.
pub const REDACTED: &str = "***";

/// compactd's settings, as read from `settings.json` and the other layers.
///
/// Every key has a default, so an empty object `{}` is a complete configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Settings {
    /// Compaction: summarising old history so the conversation fits the model's context window.
    pub compaction: CompactionSettings,
    /// Branch summaries: summarising the branch you leave when navigating the session tree.
    pub branch_summary: BranchSummarySettings,
    /// Retries of failed summarization requests.
    pub retry: RetrySettings,
    /// Model per role (`default`, `smol`, `slow`, `plan`, `commit`), as `"provider/id"` or a bare
    /// model id. These feed the summarizer's model candidates.
    pub model_roles: BTreeMap<String, String>,
    /// Which summarizer writes compaction and branch summaries.
    pub summarizer: SummarizerSettings,
    /// LLM providers by name. `openai` and `anthropic` are built in; add others (OpenRouter,
    /// Ollama, llama.cpp, vLLM, ...) as OpenAI- or Anthropic-compatible providers.
    pub providers: BTreeMap<String, ProviderSettings>,
    /// Token counter used for budgets: `o200k` and `cl100k` are exact tokenizers, `chars4` is
    /// the reference agent's estimate (UTF-16 length / 4), useful to compare cut points with it.
    pub tokenizer: Tokenizer,
    /// Timeouts for hook requests sent to the client.
    pub hooks: HookSettings,
    /// Logging (to stderr or a file, never stdout).
    pub log: LogSettings,
    /// Session storage on disk.
    pub storage: StorageSettings,
    /// Projects (absolute directories, each with everything below it) whose
    /// `.compactd/settings.json` may also set the keys that decide where data and credentials
    /// go: providers' `kind`, `baseUrl`, `apiKeyEnv` and `apiKey`, `compaction.remoteEndpoint`,
    /// `remoteTokenEnv` and `allowInsecureHttp`, and the `storage` places. Other projects'
    /// files may set the rest (thresholds, budgets, which of your models summarise); those keys
    /// are ignored there with a warning. Read from the user settings file only.
    pub trusted_projects: Vec<PathBuf>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            compaction: CompactionSettings::default(),
            branch_summary: BranchSummarySettings::default(),
            retry: RetrySettings::default(),
            model_roles: BTreeMap::new(),
            summarizer: SummarizerSettings::default(),
            providers: builtin_providers(),
            tokenizer: Tokenizer::default(),
            hooks: HookSettings::default(),
            log: LogSettings::default(),
            storage: StorageSettings::default(),
            trusted_projects: Vec::new(),
        }
    }
}

/// Compaction settings (spec §8, plus compactd's own switches and overrides).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct CompactionSettings {
    /// Automatic compaction when the context passes the threshold. Manual compaction works
    /// regardless.
    pub enabled: bool,
    /// Headroom in tokens: compaction starts above `contextWindow - reserveTokens`. Also sizes
    /// the summaries' output budgets.
    pub reserve_tokens: u64,
    /// Estimated tokens of recent conversation kept verbatim after a compaction.
    pub keep_recent_tokens: u64,
    /// After a threshold compaction, ask the agent to continue. Overflow recovery always continues.
    pub auto_continue: bool,
    /// Pruning of old tool outputs in the live context, separate from `enabled`.
    pub prune_enabled: bool,
    /// Compact and retry once when the model reports a context overflow, separate from `enabled`.
    pub overflow_recovery: bool,
    /// Compact above this percentage of the context window instead of `window - reserveTokens`
    /// (1-99). `thresholdTokens` wins when both are set.
    #[schemars(range(min = 1, max = 99))]
    pub threshold_percent: Option<u8>,
    /// Compact above this many tokens instead of `window - reserveTokens`; clamped to the window.
    #[schemars(range(min = 1))]
    pub threshold_tokens: Option<u64>,
    /// URL of a remote summarization endpoint: compactd POSTs `{systemPrompt, prompt}` and
    /// expects `{summary}`. Unset or empty: summarise locally.
    pub remote_endpoint: Option<String>,
    /// Name of the environment variable holding a bearer token for `remoteEndpoint`.
    pub remote_token_env: Option<String>,
    /// Timeout of one request to `remoteEndpoint`, in milliseconds.
    #[schemars(range(min = 1))]
    pub remote_timeout_ms: u64,
    /// Allow plain `http://` URLs for non-loopback hosts (remote endpoint and provider base URLs).
    /// By default `http://` is only accepted for localhost.
    pub allow_insecure_http: bool,
    /// Budget of the progress ledger block appended to each compaction summary, in percent of
    /// `keepRecentTokens` (0-100; 0 leaves the block out, the ledger is still stored).
    #[schemars(range(min = 0, max = 100))]
    pub ledger_budget_percent: u8,
    /// How much detail a compaction summary keeps: `brief` (half the budget of `normal`),
    /// `normal`, or `thorough` (twice it). Scales the summary's output budget and the length
    /// the prompt asks for, the extractive summary's section sizes and the ledger's budget.
    /// A request's `targetTokens` overrides it.
    pub detail: Detail,
    /// Speculative compaction: start summarising a snapshot of the branch a little before the
    /// threshold, and swap the result in when a reply crosses it.
    pub background: BackgroundSettings,
}

/// Background (speculative) compaction settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct BackgroundSettings {
    /// Start a compaction in the background when a reply's context enters
    /// `[threshold - leadTokens, threshold)`.
    pub enabled: bool,
    /// How far below the threshold the background compaction starts. Unset: 12.5% of the
    /// threshold, clamped to 8000..32000 tokens, and never more than half the threshold.
    #[schemars(range(min = 1))]
    pub lead_tokens: Option<u64>,
}

impl Default for BackgroundSettings {
    fn default() -> Self {
        BackgroundSettings {
            enabled: true,
            lead_tokens: None,
        }
    }
}

impl BackgroundSettings {
    /// The lead below `threshold` at which a background compaction starts.
    pub fn lead(&self, threshold: u64) -> u64 {
        self.lead_tokens
            .unwrap_or_else(|| (threshold / 8).clamp(8_000, 32_000).min(threshold / 2))
    }
}

impl Default for CompactionSettings {
    fn default() -> Self {
        CompactionSettings {
            enabled: true,
            reserve_tokens: 16_384,
            keep_recent_tokens: 20_000,
            auto_continue: true,
            prune_enabled: true,
            overflow_recovery: true,
            threshold_percent: None,
            threshold_tokens: None,
            remote_endpoint: None,
            remote_token_env: None,
            remote_timeout_ms: 120_000,
            allow_insecure_http: false,
            ledger_budget_percent: 10,
            detail: Detail::Normal,
            background: BackgroundSettings::default(),
        }
    }
}

impl CompactionSettings {
    /// Tokens the ledger block may take in a summary.
    pub fn ledger_budget_tokens(&self) -> u64 {
        self.keep_recent_tokens * u64::from(self.ledger_budget_percent.min(100)) / 100
    }

    /// The remote endpoint when remote mode is active (a non-empty URL, spec §4.14).
    pub fn remote_endpoint(&self) -> Option<&str> {
        self.remote_endpoint
            .as_deref()
            .filter(|url| !url.is_empty())
    }

    /// Timeout of one remote summarization request.
    pub fn remote_timeout(&self) -> Duration {
        Duration::from_millis(self.remote_timeout_ms)
    }
}

/// Branch summary settings (spec §8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct BranchSummarySettings {
    /// Offer to summarise the branch you leave when navigating the tree.
    pub enabled: bool,
    /// The branch summarizer's input budget is `contextWindow - reserveTokens`.
    pub reserve_tokens: u64,
}

impl Default for BranchSummarySettings {
    fn default() -> Self {
        BranchSummarySettings {
            enabled: false,
            reserve_tokens: 16_384,
        }
    }
}

/// Retry settings for summarization requests (spec §4.15).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct RetrySettings {
    /// Retry transient failures (rate limits, overloads, 5xx) before trying the next model.
    pub enabled: bool,
    /// Retries per model candidate.
    pub max_retries: u32,
    /// Back-off base in milliseconds: the delay is `baseDelayMs * 2^attempt`.
    pub base_delay_ms: u64,
}

impl Default for RetrySettings {
    fn default() -> Self {
        RetrySettings {
            enabled: true,
            max_retries: 3,
            base_delay_ms: 2_000,
        }
    }
}

/// How much detail a compaction summary keeps (`compaction.detail`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Detail {
    /// Half the budget of `normal`.
    Brief,
    /// The usual budgets (the summary's output budget, 0.8 · `reserveTokens`).
    #[default]
    Normal,
    /// Twice the budget of `normal`.
    Thorough,
}

impl Detail {
    /// The factor applied to the `normal` budgets.
    pub fn factor(self) -> f64 {
        match self {
            Detail::Brief => 0.5,
            Detail::Normal => 1.0,
            Detail::Thorough => 2.0,
        }
    }
}

/// Which summarizer writes summaries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SummarizerKind {
    /// The configured model (`summarizer.model`, candidates or model roles) if there is one,
    /// else `extractive`.
    #[default]
    Auto,
    /// Offline and deterministic: builds the summary from the conversation itself, no network.
    Extractive,
    /// An OpenAI-compatible chat completions API.
    Openai,
    /// The Anthropic Messages API.
    Anthropic,
    /// `compaction.remoteEndpoint`.
    Remote,
    /// The RPC client answers `summarizer/summarize`.
    Client,
}

/// Summarizer settings (compactd's own).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct SummarizerSettings {
    /// `auto` (the configured model if any, else extractive), `extractive`, `openai`,
    /// `anthropic`, `remote` or `client`.
    pub kind: SummarizerKind,
    /// The model to summarise with, as `"provider/id"`.
    pub model: Option<String>,
    /// Models to try in order when the first fails, each `"provider/id"`.
    pub candidates: Option<Vec<String>>,
    /// How long to wait for the client's answer to `summarizer/summarize`, in milliseconds.
    #[schemars(range(min = 1))]
    pub client_timeout_ms: u64,
}

impl Default for SummarizerSettings {
    fn default() -> Self {
        SummarizerSettings {
            kind: SummarizerKind::Auto,
            model: None,
            candidates: None,
            client_timeout_ms: 120_000,
        }
    }
}

impl SummarizerSettings {
    /// Timeout of a `summarizer/summarize` request to the client.
    pub fn client_timeout(&self) -> Duration {
        Duration::from_millis(self.client_timeout_ms)
    }
}

/// The wire protocol a provider speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// OpenAI-compatible chat completions (OpenAI, OpenRouter, Ollama, llama.cpp, vLLM, ...).
    #[default]
    Openai,
    /// The Anthropic Messages API.
    Anthropic,
}

impl ProviderKind {
    /// The kind's name as written in settings.
    pub fn name(self) -> &'static str {
        match self {
            ProviderKind::Openai => "openai",
            ProviderKind::Anthropic => "anthropic",
        }
    }

    /// The official API base URL of this kind.
    pub fn default_base_url(self) -> &'static str {
        match self {
            ProviderKind::Openai => "https://api.openai.com/v1",
            ProviderKind::Anthropic => "https://api.anthropic.com",
        }
    }

    /// The environment variable conventionally holding this kind's API key.
    pub fn default_api_key_env(self) -> &'static str {
        match self {
            ProviderKind::Openai => "OPENAI_API_KEY",
            ProviderKind::Anthropic => "ANTHROPIC_API_KEY",
        }
    }
}

/// One LLM provider.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ProviderSettings {
    /// `openai` (OpenAI-compatible chat completions) or `anthropic` (Messages API).
    pub kind: ProviderKind,
    /// API base URL. Unset: the official URL of `kind`. Shown with any credentials in it
    /// (`user:secret@`, `?key=…`) as `***`.
    #[serde(serialize_with = "serialize_base_url")]
    pub base_url: Option<String>,
    /// Name of the environment variable holding the API key. Unset: `OPENAI_API_KEY` or
    /// `ANTHROPIC_API_KEY` by `kind`.
    pub api_key_env: Option<String>,
    /// The API key itself. Discouraged: prefer `apiKeyEnv`. Never logged or shown.
    pub api_key: Option<SecretString>,
    /// Models of this provider by id, with their limits.
    pub models: BTreeMap<String, ModelSettings>,
    /// How long to wait, from sending a request, for the model's first token, in
    /// milliseconds. Unset: 600000 (10 minutes) for a server on this machine, where a CPU
    /// model may read a long prompt for minutes, 120000 otherwise.
    #[schemars(range(min = 1))]
    pub first_token_timeout_ms: Option<u64>,
    /// Longest silence allowed between two parts of a streamed answer once it has started, in
    /// milliseconds. Unset: 120000.
    #[schemars(range(min = 1))]
    pub idle_timeout_ms: Option<u64>,
    /// Requests compactd sends to this server at once; more wait in compactd's queue. Unset: 1
    /// for a server on this machine (llama.cpp and Ollama often serve one request at a time,
    /// and a second one would wait there silently with its timeout running), 8 otherwise.
    #[schemars(range(min = 1))]
    pub max_parallel_requests: Option<u32>,
    /// Before the first request of a compaction, read the context window and output limit the
    /// server reports (`/models`, llama.cpp's `/props`, Ollama's `/api/show`) and use them when
    /// they are smaller than configured. Unset: on for a server on this machine. OpenAI-kind
    /// providers only.
    pub discover_limits: Option<bool>,
}

/// Requests at once to a hosted API, unless `maxParallelRequests` says otherwise.
pub const REMOTE_PARALLEL_REQUESTS: u32 = 8;
/// Idle timeout between two parts of an answer, unless `idleTimeoutMs` says otherwise.
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 120_000;
/// First-token timeout of a server on this machine, unless `firstTokenTimeoutMs` says otherwise.
pub const LOOPBACK_FIRST_TOKEN_TIMEOUT_MS: u64 = 600_000;
/// First-token timeout of a hosted API, unless `firstTokenTimeoutMs` says otherwise.
pub const REMOTE_FIRST_TOKEN_TIMEOUT_MS: u64 = 120_000;

impl ProviderSettings {
    /// Whether the base URL names this machine (`localhost`, `127.0.0.0/8`, `::1`).
    pub fn is_local(&self) -> bool {
        is_loopback_url(self.base_url())
    }

    /// The first-token timeout in effect.
    pub fn first_token_timeout(&self) -> Duration {
        Duration::from_millis(self.first_token_timeout_ms.unwrap_or(if self.is_local() {
            LOOPBACK_FIRST_TOKEN_TIMEOUT_MS
        } else {
            REMOTE_FIRST_TOKEN_TIMEOUT_MS
        }))
    }

    /// The idle timeout in effect.
    pub fn idle_timeout(&self) -> Duration {
        Duration::from_millis(self.idle_timeout_ms.unwrap_or(DEFAULT_IDLE_TIMEOUT_MS))
    }

    /// Requests at once in effect.
    pub fn parallel_requests(&self) -> u32 {
        self.max_parallel_requests
            .unwrap_or(if self.is_local() {
                1
            } else {
                REMOTE_PARALLEL_REQUESTS
            })
            .max(1)
    }

    /// Whether limits are read from the server.
    pub fn discovers_limits(&self) -> bool {
        self.discover_limits.unwrap_or_else(|| self.is_local())
    }

    /// The base URL to call: `baseUrl`, or the official URL of the provider's kind.
    pub fn base_url(&self) -> &str {
        self.base_url
            .as_deref()
            .unwrap_or_else(|| self.kind.default_base_url())
    }

    /// The environment variable to read the API key from.
    pub fn api_key_env(&self) -> &str {
        self.api_key_env
            .as_deref()
            .unwrap_or_else(|| self.kind.default_api_key_env())
    }
}

/// Limits of one model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ModelSettings {
    /// Context window in tokens; must be greater than 0.
    #[schemars(range(min = 1))]
    pub context_window: u64,
    /// Most output tokens the model can produce in one response.
    #[schemars(range(min = 1))]
    pub max_output_tokens: Option<u64>,
}

impl Default for ModelSettings {
    fn default() -> Self {
        ModelSettings {
            context_window: DEFAULT_CONTEXT_WINDOW,
            max_output_tokens: None,
        }
    }
}

/// Whether `url`'s host is this machine (`localhost`, `127.0.0.0/8`, `::1`).
pub fn is_loopback_url(url: &str) -> bool {
    let Some(rest) = url.split_once("://").map(|(_, rest)| rest) else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit('@').next().unwrap_or("");
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host_port.split(':').next().unwrap_or(""),
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// A secret string, such as an API key. `Debug` and `Serialize` print `***`; only
/// [`SecretString::expose`] gives the value, so effective settings can be logged or sent to a
/// client without leaking it.
#[derive(Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct SecretString(String);

impl SecretString {
    /// Wraps a secret.
    pub fn new(secret: impl Into<String>) -> Self {
        SecretString(secret.into())
    }

    /// The secret itself, for the one place that sends it (an HTTP header).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

fn serialize_base_url<S: Serializer>(
    url: &Option<String>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match url {
        Some(url) => serializer.serialize_str(&super::redact_url_credentials(url)),
        None => serializer.serialize_none(),
    }
}

impl Serialize for SecretString {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(REDACTED)
    }
}

/// Token counter used for budgets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Tokenizer {
    /// Exact o200k_base (GPT-4o and later).
    #[default]
    O200k,
    /// Exact cl100k_base.
    Cl100k,
    /// The reference agent's estimate: UTF-16 length / 4.
    Chars4,
}

/// Timeouts of server-to-client hook requests, in milliseconds. A hook that times out counts as
/// "no answer" and the default path continues.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct HookSettings {
    /// Default timeout of every hook.
    #[schemars(range(min = 1))]
    pub timeout_ms: u64,
    /// Timeout of `hooks/beforeCompact`; unset: `timeoutMs`.
    #[schemars(range(min = 1))]
    pub before_compact_timeout_ms: Option<u64>,
    /// Timeout of `hooks/compacting`; unset: `timeoutMs`.
    #[schemars(range(min = 1))]
    pub compacting_timeout_ms: Option<u64>,
    /// Timeout of `hooks/beforeTree`; unset: `timeoutMs`.
    #[schemars(range(min = 1))]
    pub before_tree_timeout_ms: Option<u64>,
}

impl Default for HookSettings {
    fn default() -> Self {
        HookSettings {
            timeout_ms: 30_000,
            before_compact_timeout_ms: None,
            compacting_timeout_ms: None,
            before_tree_timeout_ms: None,
        }
    }
}

impl HookSettings {
    /// Timeout of `hooks/beforeCompact`.
    pub fn before_compact_timeout(&self) -> Duration {
        self.timeout_or_default(self.before_compact_timeout_ms)
    }

    /// Timeout of `hooks/compacting`.
    pub fn compacting_timeout(&self) -> Duration {
        self.timeout_or_default(self.compacting_timeout_ms)
    }

    /// Timeout of `hooks/beforeTree`.
    pub fn before_tree_timeout(&self) -> Duration {
        self.timeout_or_default(self.before_tree_timeout_ms)
    }

    fn timeout_or_default(&self, specific_ms: Option<u64>) -> Duration {
        Duration::from_millis(specific_ms.unwrap_or(self.timeout_ms))
    }
}

/// Logging settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct LogSettings {
    /// Log filter: a level (`error`, `warn`, `info`, `debug`, `trace`, `off`) or a `tracing`
    /// filter directive such as `compactd=debug`.
    pub level: String,
}

impl Default for LogSettings {
    fn default() -> Self {
        LogSettings {
            level: "info".to_owned(),
        }
    }
}

/// How hard session appends are pushed to disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StorageSync {
    /// Leave flushing to the operating system (fast; a power loss can drop the last appends).
    #[default]
    Os,
    /// fsync after every acknowledged append (durable; slower).
    Fsync,
}

/// Session storage settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct StorageSettings {
    /// Durability of appends: `os` or `fsync` (fsync after every acknowledged append).
    pub sync: StorageSync,
    /// Directory for session files (absolute). Unset: the platform data directory.
    pub sessions_dir: Option<PathBuf>,
    /// The blob store (absolute): images of 1024 or more base64 characters and the full text
    /// of strings over 500,000 characters are kept there, one file per SHA-256 of the bytes,
    /// and referred to from the session line. Unset: the reference agent's store,
    /// `~/.omp/agent/blobs`, so both read each other's files.
    pub blob_dir: Option<PathBuf>,
    /// Where new sessions go and plain session ids are found: `file` (JSONL files in
    /// `sessionsDir`, the default) or `postgres` (a PostgreSQL database shared by many
    /// daemons, see `postgres`). Sessions opened by a `.jsonl` path are files either way.
    pub backend: StorageBackend,
    /// The PostgreSQL backend.
    pub postgres: PostgresSettings,
}

/// Where sessions are stored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StorageBackend {
    /// JSONL session files (oh-my-pi's format).
    #[default]
    File,
    /// A PostgreSQL database.
    Postgres,
}

/// How to reach the PostgreSQL database of `storage.backend = "postgres"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct PostgresSettings {
    /// Connection URL (`postgres://user:password@host:port/database`, or a `key=value`
    /// connection string). Unset: the environment variable named by `urlEnv`. Shown with its
    /// password replaced by `***`; never logged.
    pub url: Option<super::DatabaseUrl>,
    /// The environment variable that holds the URL when `url` is unset.
    pub url_env: String,
    /// Connections each daemon keeps to the database.
    pub pool_size: usize,
    /// How long one database call may take (connecting included) before the request fails.
    pub timeout_ms: u64,
    /// Every read of an open session asks the database whether other daemons changed it
    /// (one primary-key query), so a request sent after another daemon's write returned sees
    /// that write. `false`: reads trust the change notifications, which arrive a few
    /// milliseconds after the other daemon's commit; a read in between sees the session as
    /// it was (writes are never affected: they lock the row and read what changed first).
    pub fresh_reads: bool,
}

impl Default for PostgresSettings {
    fn default() -> Self {
        PostgresSettings {
            url: None,
            url_env: "DATABASE_URL".to_owned(),
            pool_size: 4,
            timeout_ms: 10_000,
            fresh_reads: true,
        }
    }
}

impl PostgresSettings {
    /// The URL: `url`, else the `urlEnv` variable.
    pub fn resolved_url(&self) -> Option<String> {
        match &self.url {
            Some(url) => Some(url.expose().to_owned()),
            None => std::env::var(&self.url_env).ok().filter(|u| !u.is_empty()),
        }
    }
}

/// The providers compactd knows without configuration, with a few well-known models.
fn builtin_providers() -> BTreeMap<String, ProviderSettings> {
    let model = |context_window: u64, max_output_tokens: u64| ModelSettings {
        context_window,
        max_output_tokens: Some(max_output_tokens),
    };
    let provider = |kind: ProviderKind, models: &[(&str, ModelSettings)]| ProviderSettings {
        kind,
        base_url: Some(kind.default_base_url().to_owned()),
        api_key_env: Some(kind.default_api_key_env().to_owned()),
        api_key: None,
        models: models
            .iter()
            .map(|(id, limits)| ((*id).to_owned(), limits.clone()))
            .collect(),
        ..ProviderSettings::default()
    };
    BTreeMap::from([
        (
            "openai".to_owned(),
            provider(
                ProviderKind::Openai,
                &[
                    ("gpt-4o", model(128_000, 16_384)),
                    ("gpt-4o-mini", model(128_000, 16_384)),
                    ("gpt-4.1", model(1_047_576, 32_768)),
                    ("gpt-4.1-mini", model(1_047_576, 32_768)),
                    ("gpt-5", model(400_000, 128_000)),
                    ("gpt-5-mini", model(400_000, 128_000)),
                ],
            ),
        ),
        (
            "anthropic".to_owned(),
            provider(
                ProviderKind::Anthropic,
                &[
                    ("claude-sonnet-4-5", model(200_000, 64_000)),
                    ("claude-haiku-4-5", model(200_000, 64_000)),
                    ("claude-opus-4-1", model(200_000, 32_000)),
                    ("claude-opus-4-5", model(200_000, 64_000)),
                    ("claude-sonnet-4", model(200_000, 64_000)),
                    ("claude-opus-4", model(200_000, 32_000)),
                ],
            ),
        ),
    ])
}

impl Settings {
    /// The compaction threshold for a model with `context_window` tokens: compaction runs when
    /// the context holds more tokens than this.
    ///
    /// `thresholdTokens` wins over `thresholdPercent`, which wins over
    /// `window - reserveTokens` (spec §4.2); the result is clamped to `[1, window - 1]` so a
    /// small window cannot make every turn compact (spec §12, §13 #3). A window of 0 means
    /// "unknown": there is no threshold and threshold compaction never runs (spec §13 #10).
    pub fn threshold_tokens(&self, context_window: u64) -> Option<u64> {
        if context_window == 0 {
            return None;
        }
        let compaction = &self.compaction;
        let raw = match (compaction.threshold_tokens, compaction.threshold_percent) {
            (Some(tokens), _) => tokens,
            (None, Some(percent)) => context_window.saturating_mul(u64::from(percent)) / 100,
            (None, None) => context_window.saturating_sub(compaction.reserve_tokens),
        };
        Some(raw.clamp(1, context_window.saturating_sub(1).max(1)))
    }

    /// The headroom actually left above the threshold for `context_window`: `reserveTokens`
    /// with the defaults, otherwise what the threshold overrides and clamping leave. 0 for an
    /// unknown (0) window.
    pub fn effective_reserve(&self, context_window: u64) -> u64 {
        self.threshold_tokens(context_window)
            .map_or(0, |threshold| context_window - threshold)
    }

    /// Whether `context_tokens` in a `context_window` calls for threshold compaction.
    pub fn should_compact(&self, context_tokens: u64, context_window: u64) -> bool {
        self.compaction.enabled
            && self
                .threshold_tokens(context_window)
                .is_some_and(|threshold| context_tokens > threshold)
    }

    /// The limits configured for `model` (`"provider/id"` or a bare id matched
    /// case-insensitively across providers), if any provider lists it.
    pub fn model_settings(&self, model: &str) -> Option<&ModelSettings> {
        if let Some((provider, id)) = model.split_once('/')
            && let Some(found) = self.providers.get(provider).and_then(|p| p.models.get(id))
        {
            return Some(found);
        }
        self.providers.values().find_map(|provider| {
            provider
                .models
                .iter()
                .find(|(id, _)| id.eq_ignore_ascii_case(model))
                .map(|(_, limits)| limits)
        })
    }

    /// The context window of `model`, or 128000 when no provider lists it (spec §8).
    pub fn context_window_for(&self, model: &str) -> u64 {
        self.model_settings(model)
            .map_or(DEFAULT_CONTEXT_WINDOW, |limits| limits.context_window)
    }
}
