//! `settings/get` and `settings/update`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::common::SessionId;
use crate::settings::SettingsSource;

/// Params of `settings/get`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SettingsGetParams {
    /// Resolve for this session (its project file included). Default: the daemon's layers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<SessionId>,
}

/// Result of `settings/get`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SettingsGetResult {
    /// The effective settings (see `settings.schema.json`); API keys show as `***`.
    pub settings: Map<String, Value>,
    /// Every leaf value with the layer that supplied it.
    pub sources: Vec<SettingValue>,
    /// The user settings file, when there is a config directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_file: Option<String>,
    /// Problems that did not stop loading (e.g. a broken project file that was skipped).
    pub warnings: Vec<String>,
}

/// One effective setting and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SettingValue {
    /// Dotted key, e.g. `compaction.reserveTokens`.
    pub key: String,
    /// The key as segments (unambiguous when a map key contains a dot).
    pub path: Vec<String>,
    pub value: Value,
    pub source: SettingsSource,
    /// The file of a `user` or `project` value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

/// Which layer `settings/update` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum SettingsTarget {
    /// The user settings file, rewritten atomically.
    User,
    /// This connection only (the `initialize` layer, in memory).
    Session,
}

/// Params of `settings/update`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SettingsUpdateParams {
    /// A partial settings object merged into the layer: objects merge key by key, `null`
    /// removes a key from the layer. Invalid results fail with `settingsInvalid` and change
    /// nothing.
    pub patch: Map<String, Value>,
    pub target: SettingsTarget,
}

/// Result of `settings/update`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SettingsUpdateResult {
    /// The effective settings after the update; API keys show as `***`.
    pub settings: Map<String, Value>,
    /// The file written, for `target: "user"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}
