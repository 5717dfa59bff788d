//! The queries: create, load, read what changed, the locked write (append or rewrite),
//! listing, import and export.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::{StreamExt, TryStreamExt};
use tokio_postgres::types::ToSql;

use super::watch::CHANNEL;
use super::{PgStore, StoreError};
use crate::session::catalog::{ImportReport, SessionRow};
use crate::session::file::{ContextDigest, SeqLine};

/// A database failure, before it is given the store's target.
#[derive(Debug)]
pub(crate) struct DbError {
    pub(crate) message: String,
    pub(crate) not_found: bool,
    pub(crate) exists: bool,
}

impl DbError {
    pub(crate) fn msg(message: impl Into<String>) -> Self {
        DbError {
            message: message.into(),
            not_found: false,
            exists: false,
        }
    }

    fn not_found(id: &str) -> Self {
        DbError {
            message: format!("session {id} not found"),
            not_found: true,
            exists: false,
        }
    }

    /// The session is already there (`message` says so).
    fn exists(message: String) -> Self {
        DbError {
            message,
            not_found: false,
            exists: true,
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

/// The session-level fields a write updates.
#[derive(Clone, Debug)]
pub struct WriteMeta {
    pub leaf_id: Option<String>,
    /// Entries (markers excluded) after the write.
    pub entry_count: i64,
    /// What opening the session at `leaf_id` must read; `None`: the whole session.
    pub digest: Option<ContextDigest>,
}

/// A session as opened: whole, or only what the context at its leaf needs.
#[derive(Debug)]
pub enum Loaded {
    /// The whole session as a file (header line, then every line).
    Whole(Vec<u8>),
    /// The header line, the lines `(seq, bytes)` of the digest's prefix entries (in path
    /// order) and every line from `from_seq` on (in order).
    Partial {
        header: Vec<u8>,
        prefix: Vec<SeqLine>,
        tail: Vec<SeqLine>,
        from_seq: i64,
        /// Entries (markers excluded) stored in all.
        entry_count: i64,
    },
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
                    context_leaf = $7, context_from = $8, context_prefix = $9,
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
    let digest = meta.digest.as_ref();
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
                &digest.map(|d| d.leaf.as_str()),
                &digest.map(|d| d.from.as_str()),
                &digest.map(|d| d.prefix.as_slice()),
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

type Reply<T> = std::sync::mpsc::SyncSender<Result<T, DbError>>;

/// What the task holding a session row locked does next.
enum Command {
    /// Write and commit (the last command).
    Finish(Finish, Reply<Head>),
    /// The lines before `seq`, in order, read in the locked transaction.
    LinesBefore(i64, Reply<Vec<SeqLine>>),
    /// Which of these ids an entry line of the session has.
    Existing(Vec<String>, Reply<Vec<String>>),
}

/// A session row held `FOR UPDATE` by a task on the store's runtime until [`Locked::finish`]
/// commits a write or the value is dropped (rollback). Meanwhile the caller may read more of
/// the session in the same transaction.
pub struct Locked<'a> {
    store: &'a PgStore,
    /// The row as locked.
    pub head: Head,
    /// What other writers did since the caller's last read.
    pub changes: Changes,
    commands: tokio::sync::mpsc::UnboundedSender<Command>,
}

impl Locked<'_> {
    fn ask<T: Send + 'static>(
        &self,
        command: impl FnOnce(Reply<T>) -> Command,
    ) -> Result<T, StoreError> {
        let (reply, answer) = std::sync::mpsc::sync_channel(1);
        if self.commands.send(command(reply)).is_err() {
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

    /// Writes and commits; the new head.
    pub(crate) fn finish(self, op: Finish) -> Result<Head, StoreError> {
        self.ask(|reply| Command::Finish(op, reply))
    }

    /// The session's lines before `seq` (all of them: a partly loaded session made whole
    /// under the lock).
    pub(crate) fn lines_before(&self, seq: i64) -> Result<Vec<SeqLine>, StoreError> {
        self.ask(|reply| Command::LinesBefore(seq, reply))
    }

    /// Which of `ids` the session already has (among lines this process did not load).
    pub(crate) fn existing(&self, ids: Vec<String>) -> Result<Vec<String>, StoreError> {
        self.ask(|reply| Command::Existing(ids, reply))
    }
}

impl PgStore {
    /// Stores a new session: its header line and no entries. Fails if the id exists.
    pub fn create(
        &self,
        header_line: Vec<u8>,
        header: &crate::session::entry::SessionHeader,
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
                .ok_or_else(|| DbError::exists(format!("session {id} already exists")))?;
            Ok(Head::of(&row))
        })
    }

    /// The whole session as a file (header line, then every line), with its head; one snapshot.
    pub fn load(&self, id: &str) -> Result<(Vec<u8>, Head), StoreError> {
        let id = id.to_owned();
        let read = Arc::clone(&self.lines_read);
        self.call(move |pool| async move {
            let mut client = pool.get().await.map_err(pool_error)?;
            load_in(&mut client, &id, &read).await
        })
    }

    /// What opening session `id` at its stored leaf needs (see [`Loaded`]), with its head;
    /// one snapshot.
    pub fn load_context(&self, id: &str) -> Result<(Loaded, Head), StoreError> {
        let id = id.to_owned();
        let read = Arc::clone(&self.lines_read);
        self.call(move |pool| async move {
            let mut client = pool.get().await.map_err(pool_error)?;
            load_context_in(&mut client, &id, &read).await
        })
    }

    /// The lines of session `id` before `seq`, if the session is still at `generation` (no
    /// rewrite since): the rest of a partly loaded session. `None` after a rewrite.
    pub fn lines_before(
        &self,
        id: &str,
        seq: i64,
        generation: i64,
    ) -> Result<Option<Vec<SeqLine>>, StoreError> {
        let id = id.to_owned();
        let read = Arc::clone(&self.lines_read);
        self.call(move |pool| async move {
            let mut client = pool.get().await.map_err(pool_error)?;
            let txn = client
                .build_transaction()
                .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()
                .await?;
            let now: i64 = txn
                .query_opt(
                    "SELECT generation FROM compactd_sessions WHERE id = $1",
                    &[&id],
                )
                .await?
                .ok_or_else(|| DbError::not_found(&id))?
                .get(0);
            let lines = if now == generation {
                Some(lines_before_in(&txn, &id, seq, &read).await?)
            } else {
                None
            };
            txn.commit().await?;
            Ok(lines)
        })
    }

    /// Entry lines fetched from the database by this store so far (every read counts: opens,
    /// other writers' lines, the rest of a partly loaded session).
    pub fn lines_read(&self) -> u64 {
        self.lines_read.load(Ordering::Relaxed)
    }

    /// What changed since `seen` (one statement, one snapshot; a second for a rewrite).
    pub fn changes(&self, id: &str, seen: Head) -> Result<Changes, StoreError> {
        let id = id.to_owned();
        let read = Arc::clone(&self.lines_read);
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
                let (file, head) = load_in(&mut client, &id, &read).await?;
                return Ok(Changes::Rewritten { file, head });
            }
            let mut lines = Vec::new();
            for row in &rows {
                if let Some(line) = row.get::<_, Option<&[u8]>>("line") {
                    read.fetch_add(1, Ordering::Relaxed);
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
        let (commands, mut inbox) = tokio::sync::mpsc::unbounded_channel::<Command>();
        let pool = self.pool.clone();
        let timeout = self.timeout;
        let read = Arc::clone(&self.lines_read);
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
                    let file = file_in(&tx, &id, &read).await?;
                    Changes::Rewritten { file, head }
                } else {
                    read.fetch_add(rows.len() as u64, Ordering::Relaxed);
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
                // The caller reads more or builds its lines now; dropping `Locked` (the
                // sender) rolls back.
                while let Some(command) = inbox.recv().await {
                    match command {
                        Command::LinesBefore(seq, reply) => {
                            let _ = reply.send(lines_before_in(&tx, &id, seq, &read).await);
                        }
                        Command::Existing(ids, reply) => {
                            let _ = reply.send(existing_in(&tx, &id, &ids).await);
                        }
                        Command::Finish(op, reply) => {
                            let result = async {
                                let head = write_in(&tx, &id, head, op).await?;
                                tx.commit().await?;
                                Ok(head)
                            }
                            .await;
                            let _ = reply.send(result);
                            return Ok(());
                        }
                    }
                }
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
            commands,
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
        header: &crate::session::entry::SessionHeader,
        lines: Vec<StoredLine>,
        meta: WriteMeta,
        replace: bool,
        progress: impl Fn(usize, u64) + Send + Sync + 'static,
    ) -> Result<ImportReport, StoreError> {
        let (id, cwd, title, created) = (
            header.id.clone(),
            header.cwd.clone(),
            header.display_title().map(str::to_owned),
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
                return Err(DbError::exists(format!(
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
                exists: false,
            })?;
            written += chunk.len() as u64;
            lines += 1;
            progress(lines.saturating_sub(1), written);
        }
        Ok(written)
    }
}

/// Carries out a locked write in `tx` (not committed); the new head.
async fn write_in(
    tx: &deadpool_postgres::Transaction<'_>,
    id: &str,
    head: Head,
    op: Finish,
) -> Result<Head, DbError> {
    match op {
        Finish::Append { lines, meta } => {
            let added: i64 = lines.iter().map(|l| l.bytes.len() as i64 + 1).sum();
            insert_lines(tx, id, head.next_seq, &lines, |_, _| {}).await?;
            bump(
                tx,
                id,
                head.next_seq + lines.len() as i64,
                &meta,
                added,
                false,
            )
            .await
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
            insert_lines(tx, id, 0, &lines, |_, _| {}).await?;
            bump(tx, id, lines.len() as i64, &meta, total, true).await
        }
    }
}

/// The lines of `id` before `seq`, with their seq, in order.
async fn lines_before_in(
    client: &impl deadpool_postgres::GenericClient,
    id: &str,
    seq: i64,
    read: &AtomicU64,
) -> Result<Vec<SeqLine>, DbError> {
    let statement = client
        .prepare_cached(
            "SELECT seq, line FROM compactd_lines
             WHERE session_id = $1 AND seq < $2 ORDER BY seq",
        )
        .await?;
    let rows = client.query(&statement, &[&id, &seq]).await?;
    read.fetch_add(rows.len() as u64, Ordering::Relaxed);
    Ok(rows.into_iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// Which of `ids` name an entry line of `id`.
async fn existing_in(
    client: &impl deadpool_postgres::GenericClient,
    id: &str,
    ids: &[String],
) -> Result<Vec<String>, DbError> {
    let statement = client
        .prepare_cached(
            "SELECT DISTINCT entry_id FROM compactd_lines
             WHERE session_id = $1 AND entry_id = ANY($2)",
        )
        .await?;
    let rows = client.query(&statement, &[&id, &ids]).await?;
    Ok(rows.into_iter().map(|r| r.get(0)).collect())
}

async fn load_in(
    client: &mut deadpool_postgres::Client,
    id: &str,
    read: &AtomicU64,
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
    let file = file_in(&txn, id, read).await?;
    txn.commit().await?;
    Ok((file, head))
}

/// What opening `id` at its leaf reads, in one snapshot: with a digest for the stored leaf,
/// the digest's entries and the lines from its `from` on; otherwise every line.
async fn load_context_in(
    client: &mut deadpool_postgres::Client,
    id: &str,
    read: &AtomicU64,
) -> Result<(Loaded, Head), DbError> {
    let txn = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await?;
    let statement = txn
        .prepare_cached(
            "SELECT s.version, s.generation, s.next_seq, s.header, s.entry_count,
                    s.context_prefix,
                    -- The digest holds for the leaf the row names (the one opening uses).
                    CASE WHEN s.context_leaf = s.leaf_id THEN
                        (SELECT min(l.seq) FROM compactd_lines l
                         WHERE l.session_id = s.id AND l.entry_id = s.context_from)
                    END AS from_seq
             FROM compactd_sessions s WHERE s.id = $1",
        )
        .await?;
    let row = txn
        .query_opt(&statement, &[&id])
        .await?
        .ok_or_else(|| DbError::not_found(id))?;
    let head = Head::of(&row);
    let from_seq: Option<i64> = row.get("from_seq");
    let loaded = match from_seq {
        None => Loaded::Whole(file_in(&txn, id, read).await?),
        Some(from_seq) => {
            let prefix_ids: Vec<String> = row
                .get::<_, Option<Vec<String>>>("context_prefix")
                .unwrap_or_default();
            let lines = txn
                .prepare_cached(
                    "SELECT seq, line, entry_id FROM compactd_lines
                     WHERE session_id = $1 AND seq >= $2
                     UNION ALL
                     SELECT l.seq, l.line, l.entry_id FROM compactd_lines l
                     WHERE l.session_id = $1 AND l.seq < $2 AND l.seq IN (
                         SELECT min(p.seq) FROM compactd_lines p
                         WHERE p.session_id = $1 AND p.entry_id = ANY($3)
                         GROUP BY p.entry_id)
                     ORDER BY 1",
                )
                .await?;
            let rows = txn.query(&lines, &[&id, &from_seq, &prefix_ids]).await?;
            read.fetch_add(rows.len() as u64, Ordering::Relaxed);
            let mut tail = Vec::new();
            let mut found: std::collections::HashMap<String, SeqLine> =
                std::collections::HashMap::new();
            for row in rows {
                let seq: i64 = row.get(0);
                if seq >= from_seq {
                    tail.push((seq, row.get(1)));
                } else if let Some(entry) = row.get::<_, Option<String>>(2) {
                    found.insert(entry, (seq, row.get(1)));
                }
            }
            // In path order; a missing entry (impossible for a digest this build wrote)
            // means reading everything.
            let prefix: Option<Vec<SeqLine>> = prefix_ids.iter().map(|p| found.remove(p)).collect();
            match prefix {
                Some(prefix) => Loaded::Partial {
                    header: row.get("header"),
                    prefix,
                    tail,
                    from_seq,
                    entry_count: row.get("entry_count"),
                },
                None => Loaded::Whole(file_in(&txn, id, read).await?),
            }
        }
    };
    txn.commit().await?;
    Ok((loaded, head))
}

/// The header and every line of `id` as one file, read in the caller's transaction.
async fn file_in(
    client: &impl deadpool_postgres::GenericClient,
    id: &str,
    read: &AtomicU64,
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
    read.fetch_add(rows.len() as u64, Ordering::Relaxed);
    Ok(as_file(&header, rows))
}
