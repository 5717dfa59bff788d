//! `session/create`, `session/open`, `session/fork`, `session/list` and `session/close`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::invalid;
use crate::engine::LoadProgress;
use crate::protocol::{
    Empty, SessionCreateParams, SessionForkParams, SessionInfo, SessionListItem, SessionListParams,
    SessionListResult, SessionLocator, SessionOpenParams, SessionRef,
};
use crate::rpc::{RequestCtx, RpcError};
use crate::server::{Daemon, from_proto, to_proto};

pub async fn create(
    daemon: Arc<Daemon>,
    _: RequestCtx,
    params: SessionCreateParams,
) -> Result<SessionInfo, RpcError> {
    let cwd = match params.cwd {
        Some(cwd) => PathBuf::from(cwd),
        None => std::env::current_dir()
            .map_err(|e| invalid("session/create", "cwd", format!("no cwd given and {e}")))?,
    };
    let info = daemon
        .engine
        .create(&cwd, params.path.map(PathBuf::from), params.title)
        .await
        .map_err(to_proto::error)?;
    Ok(to_proto::session_info(info))
}

pub async fn fork(
    daemon: Arc<Daemon>,
    _: RequestCtx,
    params: SessionForkParams,
) -> Result<SessionInfo, RpcError> {
    let info = daemon
        .engine
        .fork(
            &params.session_id,
            params.entry_id.as_deref(),
            params.path.map(PathBuf::from),
            params.title,
        )
        .await
        .map_err(to_proto::error)?;
    Ok(to_proto::session_info(info))
}

pub async fn open(
    daemon: Arc<Daemon>,
    _: RequestCtx,
    params: SessionOpenParams,
) -> Result<SessionInfo, RpcError> {
    let target = match params.locator() {
        Ok(SessionLocator::Path(path)) | Ok(SessionLocator::Id(path)) => path.to_owned(),
        Err(detail) => return Err(invalid("session/open", "path", detail)),
    };
    // Only a token the client gave: an open is usually quick, and a server-created token
    // would cost every open a round trip.
    let token = params.work_done_token.clone();
    let hub = daemon.hub.clone();
    let progress: LoadProgress = match &token {
        Some(token) => {
            hub.work_begin(
                token,
                format!("Opening {target}"),
                format!("opening {target}"),
            );
            let (hub, token) = (hub.clone(), token.clone());
            Arc::new(move |step| {
                let (message, percentage) = to_proto::load_step(step);
                hub.work_report(&token, message, percentage);
            })
        }
        None => Arc::new(|_| {}),
    };
    let read_only = params.read_only.unwrap_or(false);
    let opened = daemon.engine.open_with(&target, read_only, progress).await;
    if let Some(token) = &token {
        let end = match &opened {
            Ok(_) => "opened".to_owned(),
            Err(error) => error.to_string(),
        };
        hub.work_end(token, end);
    }
    let info = opened.map_err(to_proto::error)?;
    // In the result (`warnings`) for the client, and on stderr for whoever runs the daemon.
    for warning in &info.warnings {
        tracing::warn!(session = %info.id, "{warning}");
    }
    Ok(to_proto::session_info(info))
}

pub async fn list(
    daemon: Arc<Daemon>,
    _: RequestCtx,
    params: SessionListParams,
) -> Result<SessionListResult, RpcError> {
    let page = from_proto::list_page(params.limit, params.cursor.as_deref())
        .map_err(|(path, e)| invalid("session/list", path, e))?;
    let (found, next) = daemon
        .engine
        .list(params.cwd.as_deref().map(Path::new), page)
        .await
        .map_err(to_proto::error)?;
    let sessions = found
        .into_iter()
        .map(|s| SessionListItem {
            modified: s
                .modified
                .clone()
                .or_else(|| modified(&s.path))
                .unwrap_or_else(|| s.created.clone()),
            session_id: s.id,
            path: s.path.display().to_string(),
            cwd: s.cwd,
            title: s.title,
            created: s.created,
            open: s.open,
        })
        .collect();
    Ok(SessionListResult {
        sessions,
        next_cursor: next.map(|c| c.to_string()),
    })
}

/// The file's modification time (ISO 8601).
fn modified(path: &Path) -> Option<String> {
    let modified = std::fs::metadata(path).ok()?.modified().ok()?;
    let ms = modified
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_millis();
    Some(crate::session::ids::iso_from_ms(i64::try_from(ms).ok()?))
}

pub async fn close(
    daemon: Arc<Daemon>,
    _: RequestCtx,
    params: SessionRef,
) -> Result<Empty, RpcError> {
    daemon
        .engine
        .close(&params.session_id)
        .await
        .map_err(to_proto::error)?;
    Ok(Empty {})
}
