//! The embedded migrations, applied at connect: versioned, each recorded in
//! `compactd_migrations`, so applying them again (another daemon, a restart) does nothing. They
//! run in one transaction under an advisory lock, so daemons that start together take turns
//! and a failure leaves the schema as it was.

use super::ops::DbError;

/// `(version, name, SQL)`, in order. Never edit a released migration: add one.
const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "sessions and their lines",
        r#"
CREATE TABLE compactd_sessions (
    id          text PRIMARY KEY,
    cwd         text NOT NULL,
    title       text,
    created     text NOT NULL,
    header      bytea NOT NULL,
    version     bigint NOT NULL DEFAULT 1,
    generation  bigint NOT NULL DEFAULT 1,
    next_seq    bigint NOT NULL DEFAULT 0,
    leaf_id     text,
    entry_count bigint NOT NULL DEFAULT 0,
    bytes       bigint NOT NULL DEFAULT 0,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX compactd_sessions_by_update ON compactd_sessions (updated_at DESC, id);
CREATE INDEX compactd_sessions_by_cwd ON compactd_sessions (cwd, updated_at DESC, id);
CREATE TABLE compactd_lines (
    session_id  text NOT NULL REFERENCES compactd_sessions (id) ON DELETE CASCADE,
    seq         bigint NOT NULL,
    entry_id    text,
    parent_id   text,
    type        text,
    line        bytea NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE INDEX compactd_lines_by_entry ON compactd_lines (session_id, entry_id);
"#,
    ),
    (
        2,
        "what opening a session at its leaf reads",
        r#"
ALTER TABLE compactd_sessions
    ADD COLUMN context_leaf   text,
    ADD COLUMN context_from   text,
    ADD COLUMN context_prefix text[];
"#,
    ),
];

/// An arbitrary constant: the advisory lock that serialises migrations.
const MIGRATION_LOCK: i64 = 0x636f_6d70_6163_7464;

/// The highest migration version this build knows.
pub(super) fn latest() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.0)
}

pub(super) async fn migrate(client: &mut deadpool_postgres::Client) -> Result<(), DbError> {
    // DDL is transactional: all of it commits, or none.
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    let exists: Option<String> = tx
        .query_one("SELECT to_regclass('compactd_migrations')::text", &[])
        .await?
        .get(0);
    if exists.is_none() {
        tx.batch_execute(
            "CREATE TABLE compactd_migrations (
                version    integer PRIMARY KEY,
                name       text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now()
            )",
        )
        .await?;
    }
    let applied: Vec<i32> = tx
        .query("SELECT version FROM compactd_migrations", &[])
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    if let Some(&newest) = applied.iter().max()
        && newest > latest()
    {
        return Err(DbError::msg(format!(
            "the database was migrated by a newer compactd (schema version {newest}, this one knows {})",
            latest()
        )));
    }
    for &(version, name, sql) in MIGRATIONS {
        if applied.contains(&version) {
            continue;
        }
        tx.batch_execute(sql).await?;
        tx.execute(
            "INSERT INTO compactd_migrations (version, name) VALUES ($1, $2)",
            &[&version, &name],
        )
        .await?;
        tracing::info!(version, name, "applied a database migration");
    }
    tx.commit().await?;
    Ok(())
}
