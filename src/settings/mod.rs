//! Typed settings with defaults and the JSON Schema.
//!
//! [`Settings`] holds every key of the reference agent's settings (spec §8) with the same
//! defaults, plus compactd's own (summarizer, providers, tokenizer, hooks, log, storage).
//! [`settings_schema`] is the JSON Schema editors use to complete and check `settings.json`.

mod model;
mod paths;

pub use model::{
    BranchSummarySettings, CompactionSettings, DEFAULT_CONTEXT_WINDOW, HookSettings, LogSettings,
    ModelSettings, ProviderKind, ProviderSettings, REDACTED, RetrySettings, SecretString,
    Settings, StorageSettings, StorageSync, SummarizerKind, SummarizerSettings, Tokenizer,
};
pub use paths::{
    CONFIG_DIR_ENV, SETTINGS_FILE_NAME, config_dir, project_settings_file, user_settings_file,
};

/// The JSON Schema (draft 2020-12) of `settings.json`, with descriptions and defaults.
pub fn settings_schema() -> serde_json::Value {
    schemars::schema_for!(Settings).to_value()
}
