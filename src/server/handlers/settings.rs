//! `settings/get` (effective values and the layer of each) and `settings/update`.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::engine::EngineError;
use crate::protocol::{
    SettingValue, SettingsGetParams, SettingsGetResult, SettingsUpdateParams, SettingsUpdateResult,
};
use crate::rpc::{RequestCtx, RpcError};
use crate::server::{Daemon, from_proto, to_proto};
use crate::settings::{Settings, SettingsError, SettingsSource, UpdateTarget};

pub async fn get(
    daemon: Arc<Daemon>,
    _: RequestCtx,
    params: SettingsGetParams,
) -> Result<SettingsGetResult, RpcError> {
    let stack = match &params.session_id {
        Some(id) => daemon
            .engine
            .session_settings_stack(id)
            .map_err(to_proto::error)?,
        None => daemon.engine.settings(),
    };
    let settings = stack
        .effective()
        .map_err(|e| to_proto::error(EngineError::Settings(e.to_string())))?;
    Ok(SettingsGetResult {
        settings: as_map(&settings),
        sources: stack
            .explain()
            .into_iter()
            .map(|s| SettingValue {
                key: s.key,
                path: s.path,
                value: s.value,
                source: s.source,
                file: s.file.map(|f| f.display().to_string()),
            })
            .collect(),
        user_file: stack.user_file().map(|f| f.display().to_string()),
        warnings: stack.warnings().iter().map(|w| w.message.clone()).collect(),
    })
}

pub async fn update(
    daemon: Arc<Daemon>,
    _: RequestCtx,
    params: SettingsUpdateParams,
) -> Result<SettingsUpdateResult, RpcError> {
    let target = from_proto::settings_target(params.target);
    let patch = Value::Object(params.patch);
    // A file the system failed to read or write is an `ioError` (with the errno), not a
    // refusal of the settings: the client should retry, not fix its patch.
    let mut io_failure = None;
    let updated = daemon.engine.update_settings(|stack| {
        let settings = stack.update(target, &patch).map_err(|e| {
            io_failure = io_error(&e);
            EngineError::Settings(update_error(target, e))
        })?;
        let file = match target {
            UpdateTarget::UserFile => stack.user_file().map(|f| f.display().to_string()),
            UpdateTarget::Initialize => None,
        };
        Ok((settings, file))
    });
    let (settings, file) = match (updated, io_failure) {
        (Ok(done), _) => done,
        (Err(_), Some(io)) => return Err(io),
        (Err(e), None) => return Err(to_proto::error(e)),
    };
    Ok(SettingsUpdateResult {
        settings: as_map(&settings),
        file,
    })
}

/// The message of a refused update. The `session` target is the connection's in-memory layer
/// (where `initialize` options also go): its errors name it as the client knows it.
fn update_error(target: UpdateTarget, error: SettingsError) -> String {
    const SESSION: &str = "the session settings (settings/update target \"session\")";
    match (target, error) {
        (
            UpdateTarget::Initialize,
            SettingsError::Invalid {
                origin,
                key,
                message,
            },
        ) if origin.source == SettingsSource::Initialize => {
            format!("settings error in {SESSION}: {key}: {message}")
        }
        (UpdateTarget::Initialize, SettingsError::Syntax { origin, message })
            if origin.source == SettingsSource::Initialize =>
        {
            format!("settings error in {SESSION}: {message}")
        }
        (_, error) => error.to_string(),
    }
}

/// The `ioError` of a settings file the system could not read or write (its bytes were not
/// the problem); `None` for any other refusal.
fn io_error(error: &SettingsError) -> Option<RpcError> {
    let (SettingsError::Read { origin, source } | SettingsError::Write { origin, source }) = error
    else {
        return None;
    };
    if source.kind() == std::io::ErrorKind::InvalidData {
        return None;
    }
    let path = origin.file.as_deref()?;
    Some(to_proto::io_failure(error.to_string(), path, source))
}

/// Effective settings as JSON; secrets serialise as `***`.
fn as_map(settings: &Settings) -> Map<String, Value> {
    match serde_json::to_value(settings) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}
