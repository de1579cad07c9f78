//! The schema of the state database: sqlx migrations, one folder per
//! backend (`state/migrations/sqlite/`, `state/migrations/postgres/`),
//! embedded at build time by `sqlx::migrate!` and recorded in the store's
//! `_sqlx_migrations` table with the SHA-384 checksum of each file.
//!
//! Adding to the schema: add `NNNN_what_it_does.sql` with the next number
//! to *both* folders (a step one backend does not need is a file holding
//! only a comment, so one number names one schema), then rebuild (the
//! macro embeds the files it found; `touch state/src/migrate.rs` if cargo
//! does not notice the new file). Never edit a released file: the store
//! remembers its checksum, sqlx refuses to run against a changed one, and
//! the test `released_migrations_are_unchanged` fails first.
//!
//! **Concurrency.** Everything below runs in one transaction that first
//! takes a database-wide lock: `BEGIN IMMEDIATE` on SQLite, where sqlx
//! itself takes none (its `lock()` is a no-op there and each migration is a
//! deferred transaction, so two processes opening a new file together would
//! both apply migration 1, and one would fail); a transaction-scoped
//! advisory lock on PostgreSQL, under the key the old runner used, so that
//! an older recon migrating at the same moment waits too. sqlx's own
//! session-level PostgreSQL lock is switched off: ours covers it, and a
//! session lock would outlive a failed migration on a pooled connection.
//! Each migration runs in a savepoint of that transaction, so a failure
//! leaves the store as it was. Two processes migrating at once therefore
//! apply every migration exactly once: the second waits, then finds them
//! applied.
//!
//! **New stores** are created in one step: inside the same locked
//! transaction, a store with no schema object at all (SQLite: an empty
//! file; PostgreSQL: no relation or function in the schema new objects go
//! to) gets the schema every migration leaves, from
//! `state/schema/sqlite.sql` (the DDL as SQLite records it, in creation
//! order) or `state/schema/postgres.sql` (pg_dump's schema-only DDL of a
//! store migrated step by step, unqualified), and every migration is
//! recorded in `_sqlx_migrations` as applied (embedded description and
//! checksum, execution time 0). The files are generated from the
//! migrations, never edited: the tests
//! `squashed_sqlite_schema_is_what_the_migrations_make` and
//! `squashed_postgres_schema_is_what_the_migrations_make` build one store
//! migration by migration and one from the file, and fail when their
//! schemas (PostgreSQL: catalog by catalog, storage options included) or
//! records differ or when the file is behind the newest migration
//! (`RECON_WRITE_SCHEMA=1 cargo test -p recon-state squashed` writes both
//! again; PostgreSQL's needs pg_dump). Until they are brought up to date,
//! new stores run the migrations one by one; a store that has anything in
//! it always does.
//!
//! **Stores made by earlier recon releases** were created by a hand-written
//! runner that listed its steps 1–5 in `recon_schema_version`. Migrations
//! 0001–0005 are those steps, statement for statement. On the first open
//! by this recon, inside the same locked transaction, the steps listed
//! there are recorded in `_sqlx_migrations` as applied (the embedded
//! description and checksum, the original `applied_at`, execution time 0)
//! without running their DDL, `recon_schema_version` is dropped, and then
//! any newer migration runs. Dropping it leaves one record of the schema
//! instead of two that could disagree; an older recon pointed at a migrated
//! store then fails to open (its runner tries to create `recon_runs` again,
//! rolls back and changes nothing) rather than run on a schema it does not
//! track. Going back to an older recon needs a backup of the state
//! database taken before the upgrade.

#[cfg(test)]
pub(crate) mod legacy;
#[cfg(test)]
pub(crate) use legacy::STEPS;

use sqlx::migrate::{Migrate, MigrateError, Migrator};
use sqlx::{AnyConnection, AnyPool, Row};

use crate::backend::Squashed;
use crate::{stable_hash, Backend, StateError};

/// The table in which the old runner listed its steps.
const LEGACY_TABLE: &str = "recon_schema_version";

/// The migrations of `backend`.
pub(crate) fn migrator(backend: Backend) -> &'static Migrator {
    backend.dialect().migrator()
}

/// The folder of `backend`'s migrations, relative to the repository root.
pub(crate) fn folder(backend: Backend) -> &'static str {
    backend.dialect().folder()
}

/// The newest schema version this build knows.
pub(crate) fn latest(backend: Backend) -> i64 {
    migrator(backend)
        .iter()
        .map(|m| m.version)
        .max()
        .unwrap_or(0)
}

/// The file of migration `version`, relative to the repository root (sqlx
/// reads `0003_a_b.sql` as version 3, description `a b`), or a plain
/// `migration N` if this build has no such migration.
pub(crate) fn file_of(backend: Backend, version: i64) -> String {
    match migrator(backend).iter().find(|m| m.version == version) {
        Some(m) => format!(
            "{}/{:04}_{}.sql",
            folder(backend),
            m.version,
            m.description.replace(' ', "_")
        ),
        None => format!("migration {version}"),
    }
}

/// Brings the schema up to date (see the module docs); with `squash`
/// false a new store runs every migration one by one (the tests compare
/// the two).
pub(crate) async fn run_with(
    pool: &AnyPool,
    backend: Backend,
    display: &str,
    squash: bool,
) -> Result<(), StateError> {
    let fail = |message: String| StateError::Migrate {
        url: display.to_string(),
        message,
    };
    let dialect = backend.dialect();
    let mut tx = match dialect.begin_write() {
        Some(begin) => pool.begin_with(begin).await,
        None => pool.begin().await,
    }
    .map_err(|e| fail(format!("starting the migration transaction: {e}")))?;
    if let Some(lock) = dialect.migration_lock() {
        sqlx::query(lock)
            .bind(stable_hash("recon:schema-migrations"))
            .execute(&mut *tx)
            .await
            .map_err(|e| fail(format!("waiting for the migration lock: {e}")))?;
    }
    import_legacy(&mut tx, backend).await.map_err(fail)?;
    let squashed = match dialect.squashed().filter(|_| squash) {
        Some(schema) => create_squashed(&mut tx, backend, schema)
            .await
            .map_err(fail)?,
        None => None,
    };
    let migrator = migrator(backend);
    let applied: Vec<i64> = async {
        tx.ensure_migrations_table().await?;
        tx.list_applied_migrations().await
    }
    .await
    .map_err(|e| fail(explain(backend, e)))?
    .into_iter()
    .map(|m| m.version)
    .collect();
    migrator
        .run(&mut *tx)
        .await
        .map_err(|e| fail(explain(backend, e)))?;
    tx.commit()
        .await
        .map_err(|e| fail(format!("committing the schema: {e}")))?;
    if let Some(version) = squashed {
        tracing::debug!(
            message = "Created a new state store's schema in one step.",
            version,
        );
    }
    for m in migrator.iter().filter(|m| !applied.contains(&m.version)) {
        tracing::debug!(
            message = "Applied a state schema migration.",
            file = %file_of(backend, m.version),
        );
    }
    Ok(())
}

/// Creates a new store's schema from the backend's squashed DDL and
/// records every migration it holds as applied (see the module docs):
/// `Some(version)` when it did, `None` on a store that has any schema
/// object already, or when a newer migration exists than the DDL holds
/// (the migrations then run one by one, as they always may).
async fn create_squashed(
    conn: &mut AnyConnection,
    backend: Backend,
    schema: &Squashed,
) -> Result<Option<i64>, String> {
    let context = "creating the schema of a new store";
    let Some(version) = schema.version().filter(|v| *v == latest(backend)) else {
        return Ok(None);
    };
    let objects: i64 = sqlx::query(schema.objects)
        .fetch_one(&mut *conn)
        .await
        .and_then(|r| r.try_get(0))
        .map_err(|e| format!("{context}: {e}"))?;
    if objects != 0 {
        return Ok(None);
    }
    sqlx::raw_sql(schema.sql)
        .execute(&mut *conn)
        .await
        .map_err(|e| format!("{context}: {e}"))?;
    conn.ensure_migrations_table()
        .await
        .map_err(|e| format!("{context}: {e}"))?;
    let rows: Vec<(i64, &str, String)> = migrator(backend)
        .iter()
        .map(|m| {
            (
                m.version,
                &*m.description,
                recon_core::lower_hex(&m.checksum),
            )
        })
        .collect();
    sqlx::query(schema.record)
        .bind(crate::store::json_text(&rows))
        .execute(&mut *conn)
        .await
        .map_err(|e| format!("{context}: recording its migrations: {e}"))?;
    Ok(Some(version))
}

/// Takes over the schema history of a store made by the old runner (see
/// the module docs). Nothing to do on other stores.
async fn import_legacy(conn: &mut AnyConnection, backend: Backend) -> Result<(), String> {
    let context = format!("taking over the schema history in {LEGACY_TABLE}");
    let exists: i64 = sqlx::query(backend.dialect().legacy_table_count())
        .fetch_one(&mut *conn)
        .await
        .and_then(|r| r.try_get(0))
        .map_err(|e| format!("{context}: {e}"))?;
    if exists == 0 {
        return Ok(());
    }
    let rows = sqlx::query("SELECT version, applied_at FROM recon_schema_version ORDER BY version")
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| format!("{context}: {e}"))?;
    let steps: Vec<(i64, String)> = rows
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect::<Result<_, sqlx::Error>>()
        .map_err(|e| format!("{context}: {e}"))?;
    let migrator = migrator(backend);
    // The old runner applied its steps in order, so they are 1..=n.
    let listed: Vec<i64> = steps.iter().map(|(v, _)| *v).collect();
    if let Some(newest) = listed.last().filter(|v| **v > latest(backend)) {
        return Err(newer_store(*newest, backend));
    }
    if listed.iter().zip(1..).any(|(v, want)| *v != want) {
        return Err(format!(
            "{context}: it lists steps {listed:?}, not 1 to {} in order; was it edited by hand? \
             Restore the state database from a backup, or point recon at a new one",
            listed.len()
        ));
    }
    conn.ensure_migrations_table()
        .await
        .map_err(|e| format!("{context}: {e}"))?;
    let insert = backend.dialect().legacy_import();
    for (version, applied_at) in &steps {
        let Some(m) = migrator.iter().find(|m| m.version == *version) else {
            return Err(newer_store(*version, backend));
        };
        sqlx::query(insert)
            .bind(m.version)
            .bind(m.description.to_string())
            .bind(applied_at.clone())
            .bind(m.checksum.to_vec())
            .execute(&mut *conn)
            .await
            .map_err(|e| format!("{context}: recording step {version}: {e}"))?;
    }
    sqlx::query("DROP TABLE recon_schema_version")
        .execute(&mut *conn)
        .await
        .map_err(|e| format!("{context}: dropping it: {e}"))?;
    tracing::info!(
        message = "Took over the schema history of an earlier recon release.",
        steps = ?listed,
    );
    Ok(())
}

/// The message for a store migrated further than this build knows.
fn newer_store(version: i64, backend: Backend) -> String {
    format!(
        "the database is at schema version {version}, newer than this recon understands ({}); \
         upgrade recon, or point it at another state database",
        latest(backend)
    )
}

/// What a sqlx migration error means for whoever runs recon, and what to do.
fn explain(backend: Backend, e: MigrateError) -> String {
    match e {
        MigrateError::VersionMismatch(v) => format!(
            "{} differs from the migration applied to this database (checksum mismatch): a \
             released migration was edited. If you changed that file, restore it as released \
             (git checkout) and put the change in a new migration with the next number; \
             otherwise use a released recon build",
            file_of(backend, v)
        ),
        MigrateError::VersionMissing(v) => newer_store(v, backend),
        MigrateError::Dirty(v) => format!(
            "{} is recorded as failed in _sqlx_migrations, so the schema may be half-changed; \
             restore the state database from a backup, or point recon at a new one",
            file_of(backend, v)
        ),
        MigrateError::ExecuteMigration(source, v) => format!(
            "{} failed: {source}; nothing was changed. Is this a recon state database?",
            file_of(backend, v)
        ),
        other => other.to_string(),
    }
}
