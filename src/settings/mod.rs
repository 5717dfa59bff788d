//! Typed settings with defaults, layering with provenance, validation and the JSON Schema.
//!
//! * [`Settings`] holds every key of the reference agent's settings (spec §8) with the same
//!   defaults, plus compactd's own (summarizer, providers, tokenizer, hooks, log, storage).
//! * [`SettingsStack`] merges the layers (built-in defaults, user file, project file,
//!   `initialize` options, request overrides), tells where each value came from, and applies
//!   `settings/update` patches after validating them.
//! * [`settings_schema`] is the JSON Schema editors use to complete and check `settings.json`.
//!
//! Errors name the file (or layer) and the key path; a broken file can be skipped with a
//! warning so the daemon keeps running. API keys never appear in `Debug` output, in
//! serialized settings or in [`SettingsStack::explain`].

mod error;
mod model;
mod paths;
mod stack;
mod trust;
mod validate;

#[cfg(test)]
mod tests;

mod database_url;

pub use database_url::{DatabaseUrl, redact_url};
// Private: `model` and `stack` use it, and `database_url` uses `model`.
use database_url::redact_url_credentials;
pub use error::{SettingsError, SettingsSource};
pub use model::{
    CompactionSettings, DEFAULT_CONTEXT_WINDOW, ModelSettings, ProviderKind, ProviderSettings,
    REDACTED, RetrySettings, SecretString, Settings, StorageBackend, StorageSync, SummarizerKind,
};
pub use paths::config_dir;
pub use stack::{SettingsStack, UpdateTarget};

/// The JSON Schema (draft 2020-12) of `settings.json`, with descriptions and defaults.
///
/// Its `x-compactd-userOnly` lists, as dotted paths (`*` one segment), the keys that decide
/// where the conversation or credentials go: only the user's own settings may set them (a
/// project file only when trusted, see `trust`). Editors read it to keep a workspace's
/// settings from setting them (the VS Code extension makes them machine-scoped).
pub fn settings_schema() -> serde_json::Value {
    let mut schema = schemars::schema_for!(Settings).to_value();
    let user_only: Vec<serde_json::Value> = trust::ROUTING
        .iter()
        .map(|path| path.join(".").into())
        .collect();
    schema["x-compactd-userOnly"] = user_only.into();
    schema
}
