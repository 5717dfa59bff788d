//! The queries: create, load, read what changed, the locked write (append or rewrite),
//! listing, import and export.

use std::io::Write;

use futures::{StreamExt, TryStreamExt};
use tokio_postgres::types::ToSql;

use super::watch::CHANNEL;
use super::{PgStore, StoreError};

/// A database failure, before it is given the store's target.
#[derive(Debug)]
pub(crate) struct DbError {
    pub(crate) message: String,
    pub(crate) not_found: bool,
}

impl DbError {
    pub(crate) fn msg(message: impl Into<String>) -> Self {
        DbError {
            message: message.into(),
            not_found: false,
        }
    }

    fn not_found(id: &str) -> Self {
        DbError {
            message: format!("session {id} not found"),
            not_found: true,
        }
    }
}

impl From<tokio_postgres::Error> for DbError {
    fn from(e: tokio_postgres::Error) -> Self {
        let message = match e.as_db_error() {
            Some(db) => format!("{}: {}", db.severity(), db.message()),
            None => match std::error::Error::source(&e) {
                Some(source) => format!("{e}: {source}"),
                None => e.to_string(),
            },
        };
        DbError::msg(message)
    }
}

pub(crate) fn pool_error(e: deadpool_postgres::PoolError) -> DbError {
    use deadpool_postgres::PoolError;
    match e {
        PoolError::Backend(e) => DbError::from(e),
        PoolError::Timeout(_) => {
            DbError::msg("no connection available in time (the database may be down)")
        }
        other => DbError::msg(other.to_string()),
    }
}

/// Where a session's rows stand: compared with what a process last read to know what changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    /// Bumped by every write.
    pub version: i64,
    /// Bumped by every rewrite: lines read before it are stale.
    pub generation: i64,
    /// The `seq` of the next line.
    pub next_seq: i64,
}

impl Head {
    fn of(row: &tokio_postgres::Row) -> Head {
        Head {
            version: row.get("version"),
            generation: row.get("generation"),
            next_seq: row.get("next_seq"),
        }
    }
}

/// One line to store, with the fields of its entry (`None` for a malformed line).
#[derive(Clone, Debug)]
pub struct StoredLine {
    pub entry_id: Option<String>,
    pub parent_id: Option<String>,
    pub type_name: Option<String>,
    pub bytes: Vec<u8>,
}

/// What the database holds beyond what a process read.
#[derive(Debug)]
pub enum Changes {
    Nothing,
    /// New lines after the ones read, each ending in `\n`.
    Appended {
        lines: Vec<u8>,
        head: Head,
    },
    /// Another writer rewrote the session: the whole file, header first.
    Rewritten {
        file: Vec<u8>,
        head: Head,
    },
}

/// A session as `session/list` shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionRow {
    pub id: String,
    pub cwd: String,
    pub title: Option<String>,
    pub created: String,
    pub entry_count: usize,
    /// The last write (ISO-8601, UTC, milliseconds).
    pub modified: String,
    /// The last write in microseconds since the Unix epoch: the listing's order.
    pub updated_micros: i64,
}

/// What [`PgStore::import`] did with one file.
#[derive(Clone, Debug)]
pub struct ImportReport {
    pub id: String,
    pub lines: usize,
    pub bytes: u64,
}

/// The session-level fields a write updates.
#[derive(Clone, Debug)]
pub struct WriteMeta {
    pub leaf_id: Option<String>,
    /// Entries (markers excluded) after the write.
    pub entry_count: i64,
}

/// `updated_at` as the protocol writes times.
const MODIFIED: &str = r#"to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')"#;

/// Rows per insert statement in bulk writes.
const BATCH_ROWS: usize = 2000;
/// Bytes per insert statement in bulk writes.
const BATCH_BYTES: usize = 8 << 20;

/// The header and every line as one file, each line ending in `\n`.
fn as_file(header: &[u8], lines: impl IntoIterator<Item = Vec<u8>>) -> Vec<u8> {
    let mut out = Vec::with_capacity(header.len() + 1);
    out.extend_from_slice(header);
    out.push(b'\n');
    for line in lines {
        out.extend_from_slice(&line);
        out.push(b'\n');
    }
    out
}

async fn insert_lines(
    client: &impl deadpool_postgres::GenericClient,
    id: &str,
    first_seq: i64,
    lines: &[StoredLine],
    mut progress: impl FnMut(usize, u64),
) -> Result<(), DbError> {
    let statement = client
        .prepare_cached(
            "INSERT INTO compactd_lines (session_id, seq, entry_id, parent_id, type, line)
             SELECT $1, s, e, p, t, l
             FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::bytea[])
                  AS u(s, e, p, t, l)",
        )
        .await?;
    let mut seq = first_seq;
    let mut start = 0;
    while start < lines.len() {
        let mut end = start;
        let mut bytes = 0;
        while end < lines.len() && end - start < BATCH_ROWS && (bytes < BATCH_BYTES || end == start)
        {
            bytes += lines[end].bytes.len();
            end += 1;
        }
        let chunk = &lines[start..end];
        let seqs: Vec<i64> = (seq..seq + chunk.len() as i64).collect();
        let ids: Vec<Option<&str>> = chunk.iter().map(|l| l.entry_id.as_deref()).collect();
        let parents: Vec<Option<&str>> = chunk.iter().map(|l| l.parent_id.as_deref()).collect();
        let types: Vec<Option<&str>> = chunk.iter().map(|l| l.type_name.as_deref()).collect();
        let bodies: Vec<&[u8]> = chunk.iter().map(|l| l.bytes.as_slice()).collect();
        let params: [&(dyn ToSql + Sync); 6] = [&id, &seqs, &ids, &parents, &types, &bodies];
        client.execute(&statement, &params).await?;
        seq += chunk.len() as i64;
        progress(end, bytes as u64);
        start = end;
    }
    Ok(())
}

/// Bumps the version (and with `rewrite` the generation), sets the leaf and counts, and
/// queues the notification, all in one statement.
async fn bump(
    client: &impl deadpool_postgres::GenericClient,
    id: &str,
    next_seq: i64,
    meta: &WriteMeta,
    added_bytes: i64,
    rewrite: bool,
) -> Result<Head, DbError> {
    let statement = client
        .prepare_cached(&format!(
            "WITH u AS (
                UPDATE compactd_sessions
                SET version = version + 1,
                    generation = generation + $6::bigint,
                    next_seq = $2, leaf_id = $3, entry_count = $4,
                    bytes = CASE WHEN $6::bigint = 1 THEN $5 ELSE bytes + $5 END,
                    updated_at = now()
                WHERE id = $1
                RETURNING version, generation, next_seq
            )
            SELECT version, generation, next_seq,
                   pg_notify('{CHANNEL}', version::text || ' ' || $1) AS notified
            FROM u"
        ))
        .await?;
    let generation_step: i64 = i64::from(rewrite);
    let row = client
        .query_opt(
            &statement,
            &[
                &id,
                &next_seq,
                &meta.leaf_id,
                &meta.entry_count,
                &added_bytes,
                &generation_step,
            ],
        )
        .await?
        .ok_or_else(|| DbError::not_found(id))?;
    Ok(Head::of(&row))
}

/// How a locked write ends.
pub(crate) enum Finish {
    Append {
        lines: Vec<StoredLine>,
        meta: WriteMeta,
    },
    Rewrite {
        header: Vec<u8>,
        lines: Vec<StoredLine>,
        meta: WriteMeta,
    },
}

type FinishReply = std::sync::mpsc::SyncSender<Result<Head, DbError>>;

/// A session row held `FOR UPDATE` by a task on the store's runtime until [`Locked::finish`]
/// commits a write or the value is dropped (rollback).
pub struct Locked<'a> {
    store: &'a PgStore,
    /// The row as locked.
    pub head: Head,
    /// What other writers did since the caller's last read.
    pub changes: Changes,
    finish: Option<tokio::sync::oneshot::Sender<(Finish, FinishReply)>>,
}

impl Locked<'_> {
    /// Writes and commits; the new head.
    pub(crate) fn finish(mut self, op: Finish) -> Result<Head, StoreError> {
        let (reply, answer) = std::sync::mpsc::sync_channel(1);
        let sent = self
            .finish
            .take()
            .map(|tx| tx.send((op, reply)).is_ok())
            .unwrap_or(false);
        if !sent {
            return Err(self.store.error(DbError::msg(
                "the write's transaction ended before it was committed",
            )));
        }
        super::blocking(move || {
            answer
                .recv()
                .unwrap_or_else(|_| Err(DbError::msg("the database task stopped")))
        })
        .map_err(|e| self.store.error(e))
    }
}

impl PgStore {
    /// Stores a new session: its header line and no entries. Fails if the id exists.
    pub fn create(
        &self,
        header_line: Vec<u8>,
        header: &crate::session::SessionHeader,
    ) -> Result<Head, StoreError> {
        let (id, cwd, title, created) = (
            header.id.clone(),
            header.cwd.clone(),
            header.title.clone(),
            header.timestamp.clone(),
        );
        self.call(move |pool| async move {
            let client = pool.get().await.map_err(pool_error)?;
            let statement = client
                .prepare_cached(
                    "INSERT INTO compactd_sessions (id, cwd, title, created, header, bytes)
                     VALUES ($1, $2, $3, $4, $5, $6)
                     ON CONFLICT (id) DO NOTHING
                     RETURNING version, generation, next_seq",
                )
                .await?;
            let bytes = header_line.len() as i64 + 1;
            let row = client
                .query_opt(
                    &statement,
                    &[&id, &cwd, &title, &created, &header_line, &bytes],
                )
                .await?
                .ok_or_else(|| DbError::msg(format!("session {id} already exists")))?;
            Ok(Head::of(&row))
        })
    }

    /// The whole session as a file (header line, then every line), with its head; one snapshot.
    pub fn load(&self, id: &str) -> Result<(Vec<u8>, Head), StoreError> {
        let id = id.to_owned();
        self.call(move |pool| async move {
            let mut client = pool.get().await.map_err(pool_error)?;
            load_in(&mut client, &id).await
        })
    }

    /// What changed since `seen` (one statement, one snapshot; a second for a rewrite).
    pub fn changes(&self, id: &str, seen: Head) -> Result<Changes, StoreError> {
        let id = id.to_owned();
        self.call(move |pool| async move {
            let mut client = pool.get().await.map_err(pool_error)?;
            let statement = client
                .prepare_cached(
                    "SELECT s.version, s.generation, s.next_seq, l.line
                     FROM compactd_sessions s
                     LEFT JOIN compactd_lines l
                       ON l.session_id = s.id AND s.generation = $3 AND l.seq >= $2
                     WHERE s.id = $1
                     ORDER BY l.seq",
                )
                .await?;
            let rows = client
                .query(&statement, &[&id, &seen.next_seq, &seen.generation])
                .await?;
            let first = rows.first().ok_or_else(|| DbError::not_found(&id))?;
            let head = Head::of(first);
            if head == seen {
                return Ok(Changes::Nothing);
            }
            if head.generation != seen.generation {
                let (file, head) = load_in(&mut client, &id).await?;
                return Ok(Changes::Rewritten { file, head });
            }
            let mut lines = Vec::new();
            for row in &rows {
                if let Some(line) = row.get::<_, Option<&[u8]>>("line") {
                    lines.extend_from_slice(line);
                    lines.push(b'\n');
                }
            }
            Ok(Changes::Appended { lines, head })
        })
    }

    /// Locks the session row and reads what changed since `seen`, for a write.
    pub fn lock(&self, id: &str, seen: Head) -> Result<Locked<'_>, StoreError> {
        let id = id.to_owned();
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
        let (finish_tx, finish_rx) = tokio::sync::oneshot::channel::<(Finish, FinishReply)>();
        let pool = self.pool.clone();
        let timeout = self.timeout;
        self.runtime.handle().spawn(async move {
            let ready = ready_tx.clone();
            let work = async move {
                let mut client = pool.get().await.map_err(pool_error)?;
                let tx = client.transaction().await?;
                let lock = tx
                    .prepare_cached(
                        "SELECT version, generation, next_seq FROM compactd_sessions
                         WHERE id = $1 FOR UPDATE",
                    )
                    .await?;
                let since = tx
                    .prepare_cached(
                        "SELECT line FROM compactd_lines
                         WHERE session_id = $1 AND seq >= $2 ORDER BY seq",
                    )
                    .await?;
                // Pipelined: the second runs once the first holds the lock, and sees every
                // commit before it.
                let lock_params: [&(dyn ToSql + Sync); 1] = [&id];
                let since_params: [&(dyn ToSql + Sync); 2] = [&id, &seen.next_seq];
                let (row, rows) = futures::try_join!(
                    tx.query_opt(&lock, &lock_params),
                    tx.query(&since, &since_params)
                )?;
                let head = Head::of(&row.ok_or_else(|| DbError::not_found(&id))?);
                let changes = if head == seen {
                    Changes::Nothing
                } else if head.generation != seen.generation {
                    let file = file_in(&tx, &id).await?;
                    Changes::Rewritten { file, head }
                } else {
                    let mut lines = Vec::new();
                    for row in &rows {
                        lines.extend_from_slice(row.get::<_, &[u8]>(0));
                        lines.push(b'\n');
                    }
                    Changes::Appended { lines, head }
                };
                if ready.send(Ok((head, changes))).is_err() {
                    return Ok(());
                }
                // The caller builds its lines now; dropping `Locked` rolls back.
                let Ok((op, reply)) = finish_rx.await else {
                    return Ok(());
                };
                let result = async {
                    let head = match op {
                        Finish::Append { lines, meta } => {
                            let added: i64 = lines.iter().map(|l| l.bytes.len() as i64 + 1).sum();
                            insert_lines(&tx, &id, head.next_seq, &lines, |_, _| {}).await?;
                            bump(
                                &tx,
                                &id,
                                head.next_seq + lines.len() as i64,
                                &meta,
                                added,
                                false,
                            )
                            .await?
                        }
                        Finish::Rewrite {
                            header,
                            lines,
                            meta,
                        } => {
                            let total: i64 = header.len() as i64
                                + 1
                                + lines.iter().map(|l| l.bytes.len() as i64 + 1).sum::<i64>();
                            tx.execute("DELETE FROM compactd_lines WHERE session_id = $1", &[&id])
                                .await?;
                            tx.execute(
                                "UPDATE compactd_sessions SET header = $2 WHERE id = $1",
                                &[&id, &header],
                            )
                            .await?;
                            insert_lines(&tx, &id, 0, &lines, |_, _| {}).await?;
                            bump(&tx, &id, lines.len() as i64, &meta, total, true).await?
                        }
                    };
                    tx.commit().await?;
                    Ok(head)
                }
                .await;
                let _ = reply.send(result);
                Ok(())
            };
            let outcome: Result<(), DbError> = match tokio::time::timeout(timeout * 4, work).await {
                Ok(r) => r,
                Err(_) => Err(DbError::msg(format!(
                    "the write did not finish within {} ms",
                    (timeout * 4).as_millis()
                ))),
            };
            if let Err(e) = outcome {
                let _ = ready_tx.send(Err(e));
            }
        });
        let (head, changes) = super::blocking(move || {
            ready_rx
                .recv()
                .unwrap_or_else(|_| Err(DbError::msg("the database task stopped")))
        })
        .map_err(|e| self.error(e))?;
        Ok(Locked {
            store: self,
            head,
            changes,
            finish: Some(finish_tx),
        })
    }

    /// The stored sessions (those of `cwd` when given), most recently written first (then by
    /// id), after `after` (`(updated_at in µs since the epoch, id)` of the last session of the
    /// previous page), at most `limit`: a range of the `(updated_at, id)` or
    /// `(cwd, updated_at, id)` index, reading no lines.
    pub fn list(
        &self,
        cwd: Option<&str>,
        limit: Option<i64>,
        after: Option<(i64, String)>,
    ) -> Result<Vec<SessionRow>, StoreError> {
        let cwd = cwd.map(str::to_owned);
        self.call(move |pool| async move {
            let client = pool.get().await.map_err(pool_error)?;
            let mut conditions = Vec::new();
            let mut params: Vec<&(dyn ToSql + Sync)> = vec![&limit];
            if let Some(cwd) = &cwd {
                params.push(cwd);
                conditions.push(format!("cwd = ${}", params.len()));
            }
            if let Some((micros, id)) = &after {
                params.push(micros);
                let t = format!(
                    "'epoch'::timestamptz + ${}::bigint * interval '1 microsecond'",
                    params.len()
                );
                params.push(id);
                // `updated_at <= t` bounds the index range; the rest sorts out equal times.
                conditions.push(format!(
                    "updated_at <= {t} AND (updated_at < {t} OR id > ${})",
                    params.len()
                ));
            }
            let filter = if conditions.is_empty() {
                String::new()
            } else {
                format!("WHERE {}", conditions.join(" AND "))
            };
            let statement = client
                .prepare_cached(&format!(
                    "SELECT id, cwd, title, created, entry_count, {MODIFIED},
                            (extract(epoch FROM updated_at) * 1000000)::bigint
                     FROM compactd_sessions {filter}
                     ORDER BY updated_at DESC, id LIMIT $1"
                ))
                .await?;
            let rows = client.query(&statement, &params).await?;
            Ok(rows
                .iter()
                .map(|r| SessionRow {
                    id: r.get(0),
                    cwd: r.get(1),
                    title: r.get(2),
                    created: r.get(3),
                    entry_count: usize::try_from(r.get::<_, i64>(4)).unwrap_or(0),
                    modified: r.get(5),
                    updated_micros: r.get(6),
                })
                .collect())
        })
    }

    /// Whether session `id` is stored.
    pub fn exists(&self, id: &str) -> Result<bool, StoreError> {
        let id = id.to_owned();
        self.call(move |pool| async move {
            let client = pool.get().await.map_err(pool_error)?;
            Ok(client
                .query_opt("SELECT 1 FROM compactd_sessions WHERE id = $1", &[&id])
                .await?
                .is_some())
        })
    }

    /// Stores a whole session (header line, lines) in one transaction, reporting
    /// `(lines, bytes)` written so far. Fails if the id exists, unless `replace`.
    pub fn import(
        &self,
        header_line: Vec<u8>,
        header: &crate::session::SessionHeader,
        lines: Vec<StoredLine>,
        meta: WriteMeta,
        replace: bool,
        progress: impl Fn(usize, u64) + Send + Sync + 'static,
    ) -> Result<ImportReport, StoreError> {
        let (id, cwd, title, created) = (
            header.id.clone(),
            header.cwd.clone(),
            header.title.clone(),
            header.timestamp.clone(),
        );
        let total: u64 = header_line.len() as u64
            + 1
            + lines.iter().map(|l| l.bytes.len() as u64 + 1).sum::<u64>();
        // No timeout: a large import may take longer than one request.
        let pool = self.pool.clone();
        let n = lines.len();
        let result = self.wait(async move {
            let mut client = pool.get().await.map_err(pool_error)?;
            let tx = client.transaction().await?;
            if replace {
                tx.execute("DELETE FROM compactd_sessions WHERE id = $1", &[&id])
                    .await?;
            }
            let inserted = tx
                .execute(
                    "INSERT INTO compactd_sessions (id, cwd, title, created, header)
                     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING",
                    &[&id, &cwd, &title, &created, &header_line],
                )
                .await?;
            if inserted == 0 {
                return Err(DbError::msg(format!(
                    "session {id} is already stored (use --replace to overwrite it)"
                )));
            }
            let mut written = header_line.len() as u64 + 1;
            insert_lines(&tx, &id, 0, &lines, |done, bytes| {
                written += bytes;
                progress(done, written);
            })
            .await?;
            let _ = bump(&tx, &id, n as i64, &meta, total as i64, true).await?;
            tx.commit().await?;
            Ok(ImportReport {
                id,
                lines: n,
                bytes: total,
            })
        });
        result.map_err(|e| self.error(e))
    }

    /// Writes session `id` as a JSONL file to `out`, streaming its lines; `progress` gets
    /// `(lines, bytes)` written so far. Returns the bytes written.
    pub fn export(
        &self,
        id: &str,
        out: &mut dyn Write,
        progress: &mut dyn FnMut(usize, u64),
    ) -> Result<u64, StoreError> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Vec<u8>, DbError>>(64);
        let pool = self.pool.clone();
        let id_owned = id.to_owned();
        self.runtime.handle().spawn(async move {
            let work = async {
                let mut client = pool.get().await.map_err(pool_error)?;
                let txn = client
                    .build_transaction()
                    .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
                    .read_only(true)
                    .start()
                    .await?;
                let header: Vec<u8> = txn
                    .query_opt(
                        "SELECT header FROM compactd_sessions WHERE id = $1",
                        &[&id_owned],
                    )
                    .await?
                    .ok_or_else(|| DbError::not_found(&id_owned))?
                    .get(0);
                let mut first = header;
                first.push(b'\n');
                if tx.send(Ok(first)).is_err() {
                    return Ok(());
                }
                let params: [&(dyn ToSql + Sync); 1] = [&id_owned];
                let stream = txn
                    .query_raw(
                        "SELECT line FROM compactd_lines WHERE session_id = $1 ORDER BY seq",
                        params,
                    )
                    .await?;
                let mut stream = std::pin::pin!(stream);
                while let Some(row) = stream.try_next().await? {
                    let mut line: Vec<u8> = row.get(0);
                    line.push(b'\n');
                    let sender = tx.clone();
                    // The channel is bounded: wait off the runtime's only thread.
                    let sent = tokio::task::spawn_blocking(move || sender.send(Ok(line)).is_ok())
                        .await
                        .unwrap_or(false);
                    if !sent {
                        return Ok(());
                    }
                }
                txn.commit().await?;
                Ok::<(), DbError>(())
            };
            if let Err(e) = work.await {
                let _ = tx.send(Err(e));
            }
        });
        let mut written = 0u64;
        let mut lines = 0usize;
        for chunk in rx {
            let chunk = chunk.map_err(|e| self.error(e))?;
            out.write_all(&chunk).map_err(|e| StoreError {
                target: self.target.clone(),
                message: format!("cannot write the export: {e}"),
                not_found: false,
            })?;
            written += chunk.len() as u64;
            lines += 1;
            progress(lines.saturating_sub(1), written);
        }
        Ok(written)
    }
}

async fn load_in(
    client: &mut deadpool_postgres::Client,
    id: &str,
) -> Result<(Vec<u8>, Head), DbError> {
    let txn = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await?;
    let row = txn
        .query_opt(
            "SELECT version, generation, next_seq FROM compactd_sessions WHERE id = $1",
            &[&id],
        )
        .await?
        .ok_or_else(|| DbError::not_found(id))?;
    let head = Head::of(&row);
    let file = file_in(&txn, id).await?;
    txn.commit().await?;
    Ok((file, head))
}

/// The header and every line of `id` as one file, read in the caller's transaction.
async fn file_in(
    client: &impl deadpool_postgres::GenericClient,
    id: &str,
) -> Result<Vec<u8>, DbError> {
    let header: Vec<u8> = client
        .query_opt("SELECT header FROM compactd_sessions WHERE id = $1", &[&id])
        .await?
        .ok_or_else(|| DbError::not_found(id))?
        .get(0);
    let statement = client
        .prepare_cached("SELECT line FROM compactd_lines WHERE session_id = $1 ORDER BY seq")
        .await?;
    let params: [&(dyn ToSql + Sync); 1] = [&id];
    let rows: Vec<Vec<u8>> = client
        .query_raw(&statement, params)
        .await?
        .map(|row| row.map(|r| r.get::<_, Vec<u8>>(0)))
        .try_collect()
        .await?;
    Ok(as_file(&header, rows))
}
