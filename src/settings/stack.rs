//! Layering: built-in defaults, user file, project file, `initialize` options and per-request
//! overrides, merged as partial JSON objects, with the provenance of every key.
//!
//! Merge rule: objects merge key by key, any other value replaces the one below, and `null`
//! leaves the value of the layer below in place ("reset"). A layer is accepted only when the
//! merged result deserializes into [`Settings`] and passes validation, so a bad layer is never
//! half-applied.

use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Map, Value};

use super::error::{
    SettingsError, SettingsOrigin, SettingsSource, SettingsWarning, format_key_path,
};
use super::model::{REDACTED, Settings};
use super::paths;
use super::trust;
use super::validate::{self, Violation};

/// One setting as `settings/get` shows it: its key, effective value and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExplainedSetting {
    /// Dotted key path, e.g. `compaction.reserveTokens`; a segment containing a dot is written
    /// `["gpt-4.1"]`.
    pub key: String,
    /// The key path as segments, unambiguous for map keys containing dots.
    pub path: Vec<String>,
    /// The effective value; `apiKey` values are shown as `***`.
    pub value: Value,
    /// The layer that supplied the value.
    pub source: SettingsSource,
    /// The file of that layer, for `user` and `project`.
    pub file: Option<PathBuf>,
}

/// Which layer `settings/update` changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateTarget {
    /// The user file, rewritten atomically (temp file + rename).
    UserFile,
    /// The in-memory `initialize` layer; nothing is written.
    Initialize,
}

#[derive(Clone)]
struct Layer {
    source: SettingsSource,
    file: Option<PathBuf>,
    value: Map<String, Value>,
}

impl Layer {
    fn origin(&self) -> SettingsOrigin {
        SettingsOrigin {
            source: self.source,
            file: self.file.clone(),
        }
    }
}

/// The settings layers of a daemon, a session or a request.
///
/// Cheap to clone: a session derives its stack with [`SettingsStack::with_project_dir`], a
/// request with [`SettingsStack::with_request`].
#[derive(Clone)]
pub struct SettingsStack {
    defaults: Map<String, Value>,
    /// Non-default layers, at most one per source, ordered by source.
    layers: Vec<Layer>,
    user_file: Option<PathBuf>,
    warnings: Vec<SettingsWarning>,
}

impl Default for SettingsStack {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for SettingsStack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let layers: Vec<_> = self
            .layers
            .iter()
            .map(|layer| {
                (
                    layer.source,
                    &layer.file,
                    redacted(&Value::Object(layer.value.clone())),
                )
            })
            .collect();
        f.debug_struct("SettingsStack")
            .field("layers", &layers)
            .field("user_file", &self.user_file)
            .field("warnings", &self.warnings)
            .finish_non_exhaustive()
    }
}

impl SettingsStack {
    /// A stack of the built-in defaults only, with no user file.
    pub fn new() -> Self {
        let defaults = match serde_json::to_value(Settings::default()) {
            Ok(Value::Object(map)) => map,
            // Settings is a struct of plain data: it always serializes to an object.
            _ => unreachable!("Settings serializes to a JSON object"),
        };
        SettingsStack {
            defaults,
            layers: Vec::new(),
            user_file: None,
            warnings: Vec::new(),
        }
    }

    /// Loads the user file (`None`: no user layer) and the project file of `project_dir`,
    /// failing on the first broken layer.
    pub fn load(
        user_file: Option<&Path>,
        project_dir: Option<&Path>,
    ) -> Result<Self, SettingsError> {
        let mut stack = Self::with_user_file(user_file);
        for (source, file) in Self::file_layers(user_file, project_dir) {
            stack = stack.with_file_layer(source, &file)?;
        }
        Ok(stack)
    }

    /// Like [`SettingsStack::load`], but a broken file is skipped and recorded in
    /// [`SettingsStack::warnings`] instead: the daemon keeps running on the other layers.
    pub fn load_with_fallback(user_file: Option<&Path>, project_dir: Option<&Path>) -> Self {
        let mut stack = Self::with_user_file(user_file);
        for (source, file) in Self::file_layers(user_file, project_dir) {
            match stack.with_file_layer(source, &file) {
                Ok(next) => stack = next,
                Err(error) => stack.warn(source, Some(file), &error),
            }
        }
        stack
    }

    /// [`SettingsStack::load_with_fallback`] with the user file in the platform config
    /// directory (or `$COMPACTD_CONFIG_DIR`).
    pub fn discover(project_dir: Option<&Path>) -> Self {
        Self::load_with_fallback(paths::user_settings_file().as_deref(), project_dir)
    }

    /// This stack with the project layer read from `project_dir` (replacing any project layer).
    /// A missing file means no project layer.
    pub fn with_project_dir(&self, project_dir: &Path) -> Result<Self, SettingsError> {
        let file = paths::project_settings_file(project_dir);
        let mut stack = self.clone();
        stack.remove_layer(SettingsSource::Project);
        stack
            .warnings
            .retain(|warning| warning.source != SettingsSource::Project);
        stack.with_file_layer(SettingsSource::Project, &file)
    }

    /// Sets the `initialize` layer from the client's settings options (a JSON object).
    pub fn set_initialize(&mut self, options: &Value) -> Result<(), SettingsError> {
        *self = self.with_value_layer(SettingsSource::Initialize, options)?;
        Ok(())
    }

    /// This stack with a request layer of `overrides` (a JSON object) on top.
    pub fn with_request(&self, overrides: &Value) -> Result<Self, SettingsError> {
        self.with_value_layer(SettingsSource::Request, overrides)
    }

    /// The user file this stack reads and [`SettingsStack::update`] writes.
    pub fn user_file(&self) -> Option<&Path> {
        self.user_file.as_deref()
    }

    /// Layers skipped while loading, and project keys ignored because the user does not trust
    /// the project, for the caller to report.
    pub fn warnings(&self) -> &[SettingsWarning] {
        &self.warnings
    }

    /// The effective settings: all layers merged, deserialized and validated.
    pub fn effective(&self) -> Result<Settings, SettingsError> {
        let merged = Value::Object(self.merged());
        let settings: Settings = serde_path_to_error::deserialize(&merged).map_err(|error| {
            let path = path_segments(error.path());
            self.invalid(path, error.into_inner().to_string())
        })?;
        validate::validate(&settings)
            .map_err(|Violation { path, message }| self.invalid(path, message))?;
        Ok(settings)
    }

    /// Every leaf key of the merged settings with its value and the layer it came from.
    /// `apiKey` values are redacted.
    pub fn explain(&self) -> Vec<ExplainedSetting> {
        let mut leaves = Vec::new();
        collect_leaves(&self.merged(), &mut Vec::new(), &mut leaves);
        leaves
            .into_iter()
            .map(|(path, value)| {
                let origin = self.origin_of(&path);
                let value = redacted_leaf(path.last().map(String::as_str), value);
                ExplainedSetting {
                    key: format_key_path(&path),
                    path,
                    value,
                    source: origin.source,
                    file: origin.file,
                }
            })
            .collect()
    }

    /// Applies `patch` (a JSON object; `null` removes a key from the layer) to `target` after
    /// checking that the result is valid, and returns the new effective settings. For
    /// [`UpdateTarget::UserFile`] the file is re-read, patched and replaced atomically; on any
    /// error neither the file nor this stack changes.
    pub fn update(
        &mut self,
        target: UpdateTarget,
        patch: &Value,
    ) -> Result<Settings, SettingsError> {
        let (source, file) = match target {
            UpdateTarget::UserFile => (
                SettingsSource::User,
                Some(self.user_file.clone().ok_or(SettingsError::NoUserFile)?),
            ),
            UpdateTarget::Initialize => (SettingsSource::Initialize, None),
        };
        let origin = SettingsOrigin { source, file };
        let patch = as_object(patch, &origin)?;
        let mut value = match &origin.file {
            // Re-read: the file may have been edited since it was loaded.
            Some(file) => read_layer_file(source, file)?.unwrap_or_default(),
            None => self.layer_value(source).cloned().unwrap_or_default(),
        };
        apply_patch(&mut value, patch);
        let mut candidate = self.clone();
        candidate.put_layer(Layer {
            source,
            file: origin.file.clone(),
            value,
        });
        let settings = candidate.effective()?;
        if let Some(file) = &origin.file {
            let value = candidate.layer_value(source).cloned().unwrap_or_default();
            write_atomically(file, &value).map_err(|source| SettingsError::Write {
                origin: origin.clone(),
                source,
            })?;
            candidate
                .warnings
                .retain(|warning| warning.source != SettingsSource::User);
        }
        *self = candidate;
        Ok(settings)
    }

    fn with_user_file(user_file: Option<&Path>) -> Self {
        SettingsStack {
            user_file: user_file.map(Path::to_path_buf),
            ..Self::new()
        }
    }

    fn file_layers(
        user_file: Option<&Path>,
        project_dir: Option<&Path>,
    ) -> Vec<(SettingsSource, PathBuf)> {
        let user = user_file.map(|file| (SettingsSource::User, file.to_path_buf()));
        let project =
            project_dir.map(|dir| (SettingsSource::Project, paths::project_settings_file(dir)));
        user.into_iter().chain(project).collect()
    }

    fn with_file_layer(&self, source: SettingsSource, file: &Path) -> Result<Self, SettingsError> {
        let Some(mut value) = read_layer_file(source, file)? else {
            return Ok(self.clone());
        };
        let ignored = match source {
            SettingsSource::Project => self.restrict_project_layer(file, &mut value),
            _ => None,
        };
        let mut stack = self.with_layer(Layer {
            source,
            file: Some(file.to_path_buf()),
            value,
        })?;
        stack
            .warnings
            .extend(ignored.map(|message| SettingsWarning {
                source,
                file: Some(file.to_path_buf()),
                message,
            }));
        Ok(stack)
    }

    /// Removes the keys that decide where data and credentials go from the project layer
    /// read from `file` (`<project>/.compactd/settings.json`) unless the user file trusts the
    /// project, and the trust list in any case; the warning to show when some were removed.
    fn restrict_project_layer(
        &self,
        file: &Path,
        layer: &mut Map<String, Value>,
    ) -> Option<String> {
        let project_dir = file.parent().and_then(Path::parent).unwrap_or(file);
        let trusted = trust::is_trusted(self.layer_value(SettingsSource::User), project_dir);
        let ignored = trust::strip_routing_keys(layer, trusted);
        (!ignored.is_empty()).then(|| trust::ignored_message(file, project_dir, &ignored, trusted))
    }

    fn with_value_layer(
        &self,
        source: SettingsSource,
        value: &Value,
    ) -> Result<Self, SettingsError> {
        let origin = SettingsOrigin { source, file: None };
        let value = as_object(value, &origin)?.clone();
        self.with_layer(Layer {
            source,
            file: None,
            value,
        })
    }

    /// This stack with `layer` in place, if the result is valid.
    fn with_layer(&self, layer: Layer) -> Result<Self, SettingsError> {
        let mut candidate = self.clone();
        candidate.put_layer(layer);
        candidate.effective()?;
        Ok(candidate)
    }

    fn put_layer(&mut self, layer: Layer) {
        self.remove_layer(layer.source);
        let at = self.layers.partition_point(|l| l.source < layer.source);
        self.layers.insert(at, layer);
    }

    fn remove_layer(&mut self, source: SettingsSource) {
        self.layers.retain(|layer| layer.source != source);
    }

    fn layer_value(&self, source: SettingsSource) -> Option<&Map<String, Value>> {
        self.layers
            .iter()
            .find(|layer| layer.source == source)
            .map(|layer| &layer.value)
    }

    fn warn(&mut self, source: SettingsSource, file: Option<PathBuf>, error: &SettingsError) {
        self.warnings.push(SettingsWarning {
            source,
            file,
            message: error.to_string(),
        });
    }

    fn merged(&self) -> Map<String, Value> {
        let mut merged = self.defaults.clone();
        for layer in &self.layers {
            merge(&mut merged, &layer.value);
        }
        merged
    }

    /// The highest layer holding a non-null value at exactly `path`, else the defaults.
    fn origin_of(&self, path: &[String]) -> SettingsOrigin {
        self.layers
            .iter()
            .rev()
            .find(|layer| lookup(&layer.value, path).is_some_and(|v| !v.is_null()))
            .map_or(
                SettingsOrigin {
                    source: SettingsSource::Default,
                    file: None,
                },
                Layer::origin,
            )
    }

    /// The layer to blame for an error at `path`: the one holding the value there, or, when
    /// no layer holds that exact path (an error about a whole object), its longest prefix.
    fn origin_of_error(&self, path: &[String]) -> SettingsOrigin {
        (1..=path.len())
            .rev()
            .map(|len| self.origin_of(&path[..len]))
            .find(|origin| origin.source != SettingsSource::Default)
            .unwrap_or(SettingsOrigin {
                source: SettingsSource::Default,
                file: None,
            })
    }

    fn invalid(&self, path: Vec<String>, message: String) -> SettingsError {
        SettingsError::Invalid {
            origin: self.origin_of_error(&path),
            key: format_key_path(&path),
            message,
        }
    }
}

/// Reads a layer file: `None` when it does not exist, an empty layer when it is blank.
fn read_layer_file(
    source: SettingsSource,
    file: &Path,
) -> Result<Option<Map<String, Value>>, SettingsError> {
    let origin = || SettingsOrigin {
        source,
        file: Some(file.to_path_buf()),
    };
    let bytes = match crate::files::read_regular(file) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(SettingsError::Read {
                origin: origin(),
                source,
            });
        }
    };
    // Bad UTF-8 is a syntax error with a place to look, not an unreadable file.
    let text = String::from_utf8(bytes).map_err(|error| SettingsError::Syntax {
        origin: origin(),
        message: invalid_utf8_message(error.as_bytes(), error.utf8_error().valid_up_to()),
    })?;
    if text.trim().is_empty() {
        return Ok(Some(Map::new()));
    }
    let value: Value = serde_json::from_str(&text).map_err(|error| SettingsError::Syntax {
        origin: origin(),
        message: format!("invalid JSON: {error}"),
    })?;
    as_object(&value, &origin()).map(|map| Some(map.clone()))
}

/// "invalid UTF-8 at line L column C", 1-based like serde_json's syntax errors (the column
/// counts bytes).
fn invalid_utf8_message(bytes: &[u8], valid_up_to: usize) -> String {
    let before = &bytes[..valid_up_to];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let column = valid_up_to - line_start + 1;
    format!("invalid UTF-8 at line {line} column {column}")
}

fn as_object<'a>(
    value: &'a Value,
    origin: &SettingsOrigin,
) -> Result<&'a Map<String, Value>, SettingsError> {
    value.as_object().ok_or_else(|| SettingsError::Syntax {
        origin: origin.clone(),
        message: "settings must be a JSON object".to_owned(),
    })
}

/// Writes `value` as pretty JSON to `file` through a temp file in the same directory, fsync
/// and rename, so readers see the old file or the new one, never a torn one.
fn write_atomically(file: &Path, value: &Map<String, Value>) -> io::Result<()> {
    let dir = file
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let mut text = serde_json::to_string_pretty(value).map_err(io::Error::other)?;
    text.push('\n');
    let mut temp = tempfile::Builder::new()
        .prefix(".settings.json.")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    temp.write_all(text.as_bytes())?;
    if let Ok(metadata) = fs::metadata(file) {
        // Keep the user's permissions; a new file keeps the temp file's private mode.
        temp.as_file().set_permissions(metadata.permissions())?;
    }
    temp.as_file().sync_all()?;
    temp.persist(file).map_err(|error| error.error)?;
    sync_dir(dir)
}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}

/// Merges `overlay` onto `base`: objects merge, `null` keeps the base value, anything else
/// replaces it.
fn merge(base: &mut Map<String, Value>, overlay: &Map<String, Value>) {
    for (key, value) in overlay {
        match value {
            Value::Null => {}
            Value::Object(overlay_object) => {
                let slot = base
                    .entry(key.clone())
                    .or_insert_with(|| Value::Object(Map::new()));
                if !slot.is_object() {
                    *slot = Value::Object(Map::new());
                }
                if let Value::Object(base_object) = slot {
                    merge(base_object, overlay_object);
                }
            }
            other => {
                base.insert(key.clone(), other.clone());
            }
        }
    }
}

/// Applies an update patch to a layer: objects merge, `null` removes the key from the layer
/// (so the layer below shows through), anything else replaces.
fn apply_patch(layer: &mut Map<String, Value>, patch: &Map<String, Value>) {
    for (key, value) in patch {
        match value {
            Value::Null => {
                layer.remove(key);
            }
            Value::Object(patch_object) => {
                let mut object = match layer.remove(key) {
                    Some(Value::Object(existing)) => existing,
                    _ => Map::new(),
                };
                apply_patch(&mut object, patch_object);
                layer.insert(key.clone(), Value::Object(object));
            }
            other => {
                layer.insert(key.clone(), other.clone());
            }
        }
    }
}

fn lookup<'a>(map: &'a Map<String, Value>, path: &[String]) -> Option<&'a Value> {
    let (first, rest) = path.split_first()?;
    let value = map.get(first)?;
    if rest.is_empty() {
        return Some(value);
    }
    match value {
        Value::Object(inner) => lookup(inner, rest),
        Value::Array(items) => {
            let index: usize = rest[0].parse().ok()?;
            let item = items.get(index)?;
            match (&rest[1..], item) {
                ([], item) => Some(item),
                (deeper, Value::Object(inner)) => lookup(inner, deeper),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Leaves are non-object values and empty objects (an empty map is still a key to show).
fn collect_leaves(
    map: &Map<String, Value>,
    prefix: &mut Vec<String>,
    out: &mut Vec<(Vec<String>, Value)>,
) {
    for (key, value) in map {
        prefix.push(key.clone());
        match value {
            Value::Object(inner) if !inner.is_empty() => collect_leaves(inner, prefix, out),
            leaf => out.push((prefix.clone(), leaf.clone())),
        }
        prefix.pop();
    }
}

fn path_segments(path: &serde_path_to_error::Path) -> Vec<String> {
    use serde_path_to_error::Segment;
    path.iter()
        .map(|segment| match segment {
            Segment::Seq { index } => index.to_string(),
            Segment::Map { key } => key.clone(),
            Segment::Enum { variant } => variant.clone(),
            Segment::Unknown => "?".to_owned(),
        })
        .collect()
}

/// A leaf value as it may be shown: an `apiKey` as `***`, credentials in a `baseUrl` or a
/// database `url` as `***`.
fn redacted_leaf(key: Option<&str>, value: Value) -> Value {
    match (key, value) {
        (Some("apiKey"), value) if !value.is_null() => Value::String(REDACTED.to_owned()),
        (Some("baseUrl"), Value::String(url)) => Value::String(super::redact_url_credentials(&url)),
        (Some("url"), Value::String(url)) => Value::String(super::redact_url(&url)),
        (_, value) => value,
    }
}

/// A copy of `value` with every `apiKey` string replaced by `***` and the credentials in
/// URLs hidden.
pub(crate) fn redacted(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, value)| {
                    let value = match value {
                        Value::Object(_) | Value::Array(_) => redacted(value),
                        leaf => redacted_leaf(Some(key), leaf.clone()),
                    };
                    (key.clone(), value)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(redacted).collect()),
        other => other.clone(),
    }
}
