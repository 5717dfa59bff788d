//! Where a setting came from, and the errors that name it.

use std::fmt;
use std::io;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A settings layer, lowest precedence first.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum SettingsSource {
    /// compactd's built-in defaults.
    Default,
    /// The user file, `<config dir>/settings.json`.
    User,
    /// The project file, `<cwd>/.compactd/settings.json`.
    Project,
    /// The options the client passed in `initialize`.
    Initialize,
    /// Overrides passed with one request.
    Request,
}

impl SettingsSource {
    /// The source's name as shown to clients: `default`, `user`, `project`, `initialize` or
    /// `request`.
    pub fn name(self) -> &'static str {
        match self {
            SettingsSource::Default => "default",
            SettingsSource::User => "user",
            SettingsSource::Project => "project",
            SettingsSource::Initialize => "initialize",
            SettingsSource::Request => "request",
        }
    }
}

impl fmt::Display for SettingsSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A layer together with its file, if it has one: what an error message points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingsOrigin {
    /// The layer.
    pub source: SettingsSource,
    /// The file the layer was read from (user and project layers).
    pub file: Option<PathBuf>,
}

impl fmt::Display for SettingsOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.file, self.source) {
            (Some(file), _) => write!(f, "{}", file.display()),
            (None, SettingsSource::Default) => f.write_str("built-in defaults"),
            (None, SettingsSource::User) => f.write_str("user settings"),
            (None, SettingsSource::Project) => f.write_str("project settings"),
            (None, SettingsSource::Initialize) => f.write_str("initialize options"),
            (None, SettingsSource::Request) => f.write_str("request overrides"),
        }
    }
}

/// Why settings could not be loaded, accepted or saved. Messages name the file (or layer) and
/// the key path, so a person can fix the value.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// A settings file exists but could not be read.
    #[error("settings error in {origin}: cannot read the file: {source}")]
    Read {
        /// The layer and file.
        origin: SettingsOrigin,
        /// The I/O error.
        source: io::Error,
    },
    /// A layer is not a JSON object (bad JSON syntax, or another top-level value).
    #[error("settings error in {origin}: {message}")]
    Syntax {
        /// The layer and file.
        origin: SettingsOrigin,
        /// What is wrong, with line and column for a file.
        message: String,
    },
    /// A key is unknown, has the wrong type, or a value is out of range.
    #[error("settings error in {origin}: {key}: {message}")]
    Invalid {
        /// The layer (and file) that set the offending value.
        origin: SettingsOrigin,
        /// Dotted key path, e.g. `compaction.reserveTokens`.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// The user file could not be written; it is left as it was.
    #[error("settings error in {origin}: cannot write the file: {source}")]
    Write {
        /// The user layer and its file.
        origin: SettingsOrigin,
        /// The I/O error.
        source: io::Error,
    },
    /// `settings/update` targeted the user file, but there is no config directory.
    #[error(
        "there is no user settings file: the platform has no config directory and \
         COMPACTD_CONFIG_DIR is not set"
    )]
    NoUserFile,
}

/// A layer that was skipped because it was broken (the other layers still apply), or the keys
/// of an untrusted project's layer that were ignored (its other keys still apply).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SettingsWarning {
    /// The skipped layer.
    pub source: SettingsSource,
    /// Its file.
    pub file: Option<PathBuf>,
    /// What was skipped and why, as shown to a person.
    pub message: String,
}

/// How an error or a warning names a key: `compaction.reserveTokens`; segments that contain a
/// dot are bracketed: `providers.openai.models["gpt-4.1"].contextWindow`.
pub(crate) fn format_key_path(path: &[String]) -> String {
    if path.is_empty() {
        return "(top level)".to_owned();
    }
    let mut key = String::new();
    for segment in path {
        if segment.contains(['.', '[', ']', '"']) || segment.is_empty() {
            key.push_str(&format!("[{}]", serde_json::Value::String(segment.clone())));
        } else {
            if !key.is_empty() {
                key.push('.');
            }
            key.push_str(segment);
        }
    }
    key
}
