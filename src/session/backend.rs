//! Which backend holds the sessions: the one place that names them. Files in a directory are
//! the default; a backend that keeps sessions by id (PostgreSQL, `postgres/`) is connected
//! here and handed out as a [`Catalog`]. A third backend is its folder, an arm in [`connect`],
//! its scheme in [`stored_id`] and a value of `storage.backend`.

use std::sync::Arc;

use super::SessionError;
use super::catalog::Catalog;
use super::postgres::{PgOptions, PgStore, SCHEME as POSTGRES};
use crate::settings::{Settings, StorageBackend};

/// The id in `path_or_id` when it names a stored session (`SCHEME:ID` of a backend this build
/// has), with the scheme.
pub fn stored_id(path_or_id: &str) -> Option<(&'static str, &str)> {
    let (scheme, id) = path_or_id.split_once(':')?;
    let scheme = [POSTGRES].into_iter().find(|s| *s == scheme)?;
    Some((scheme, id))
}

/// Why [`connect`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The settings do not say where the backend is.
    #[error("{0}")]
    Settings(String),
    /// It could not be reached or prepared; the message names it without its password.
    #[error(transparent)]
    Session(#[from] SessionError),
}

/// The catalog `settings.storage` chooses, connected (for a database: pool, migrations,
/// listener); `None` for session files in a directory.
pub fn connect(settings: &Settings) -> Result<Option<Arc<dyn Catalog>>, ConnectError> {
    match settings.storage.backend {
        StorageBackend::File => Ok(None),
        StorageBackend::Postgres => {
            let pg = &settings.storage.postgres;
            let url = pg.resolved_url().ok_or_else(|| {
                ConnectError::Settings(format!(
                    "storage.backend is \"postgres\" but neither storage.postgres.url nor ${} is set",
                    pg.url_env
                ))
            })?;
            let options = PgOptions {
                url,
                pool_size: pg.pool_size,
                timeout: std::time::Duration::from_millis(pg.timeout_ms.max(1)),
                fresh_reads: pg.fresh_reads,
            };
            let store =
                PgStore::connect(&options).map_err(|e| SessionError::Storage(e.to_string()))?;
            Ok(Some(Arc::new(store)))
        }
    }
}
