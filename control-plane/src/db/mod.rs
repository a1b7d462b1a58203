//! The database handle: one sqlx `Any` pool over SQLite or PostgreSQL, chosen by URL.
//!
//! Every statement is written once, with `$1`-style placeholders that both backends
//! accept, and only the column types both share (TEXT, BIGINT, BOOLEAN, DOUBLE). Where
//! the dialects differ the migrations are kept in one folder per backend.

pub mod bulk;
#[cfg(test)]
mod migrations_in_step;
#[cfg(test)]
mod migrations_landed;
#[cfg(test)]
mod writers_in_turn;

use std::ops::{Deref, DerefMut};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::migrate::Migrator;
use sqlx::{Any, AnyConnection, AnyPool, Executor, Transaction};
use tokio::sync::{Mutex, OwnedMutexGuard};

static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("./migrations/postgres");

/// Which database engine sits behind the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// How long a SQLite writer waits for the database's one write lock before it fails
/// (`PRAGMA busy_timeout`, and the same for its turn in [`Db::begin_write`]).
const SQLITE_WRITE_WAIT: Duration = Duration::from_secs(10);

/// A pooled connection to the control plane's database.
#[derive(Clone, Debug)]
pub struct Db {
    pool: AnyPool,
    backend: Backend,
    /// SQLite: the writers' queue (see [`Db::begin_write`]).
    writers: Arc<Mutex<()>>,
}

/// A transaction that writes; see [`Db::begin_write`]. Used as the connection it runs
/// on (`&mut *tx`), ended by [`WriteTx::commit`], rolled back when dropped.
pub struct WriteTx {
    tx: Transaction<'static, Any>,
    /// SQLite: this writer's turn, given to the next one once the transaction ends.
    _turn: Option<OwnedMutexGuard<()>>,
}

impl WriteTx {
    pub async fn commit(self) -> Result<(), sqlx::Error> {
        self.tx.commit().await
    }

    pub async fn rollback(self) -> Result<(), sqlx::Error> {
        self.tx.rollback().await
    }
}

impl Deref for WriteTx {
    type Target = AnyConnection;

    fn deref(&self) -> &AnyConnection {
        &self.tx
    }
}

impl DerefMut for WriteTx {
    fn deref_mut(&mut self) -> &mut AnyConnection {
        &mut self.tx
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DbSetupError {
    #[error("unsupported database URL scheme (use sqlite:// or postgres://)")]
    UnsupportedScheme,
    #[error("cannot connect to the database: {0}")]
    Connect(#[source] sqlx::Error),
    #[error("cannot apply migrations: {0}")]
    Migrate(#[source] sqlx::migrate::MigrateError),
}

impl Db {
    /// Connects to `url`, creating a SQLite file when it does not exist yet.
    pub async fn connect(url: &str, max_connections: u32) -> Result<Db, DbSetupError> {
        sqlx::any::install_default_drivers();
        let backend = if url.starts_with("sqlite:") {
            Backend::Sqlite
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            Backend::Postgres
        } else {
            return Err(DbSetupError::UnsupportedScheme);
        };
        let url = match backend {
            Backend::Sqlite if !url.contains("mode=") => {
                let sep = if url.contains('?') { '&' } else { '?' };
                format!("{url}{sep}mode=rwc")
            }
            _ => url.to_owned(),
        };
        let options = AnyConnectOptions::from_str(&url).map_err(DbSetupError::Connect)?;
        let pool = AnyPoolOptions::new()
            .max_connections(max_connections.max(1))
            .acquire_timeout(Duration::from_secs(10))
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    if backend == Backend::Sqlite {
                        // WAL lets readers proceed while one writer commits; the busy
                        // timeout makes concurrent writers queue instead of failing.
                        conn.execute("PRAGMA journal_mode = WAL").await?;
                        let busy_timeout = SQLITE_WRITE_WAIT.as_millis();
                        conn.execute(format!("PRAGMA busy_timeout = {busy_timeout}").as_str())
                            .await?;
                        conn.execute("PRAGMA foreign_keys = ON").await?;
                        conn.execute("PRAGMA synchronous = NORMAL").await?;
                    } else {
                        // JIT compilation costs 15-25 ms a query and pays off only for
                        // long analytical scans: the cost views' month of rollups crossed
                        // its threshold and doubled in latency (benches/README.md).
                        conn.execute("SET jit = off").await?;
                    }
                    Ok(())
                })
            })
            .connect_with(options)
            .await
            .map_err(DbSetupError::Connect)?;
        Ok(Db {
            pool,
            backend,
            writers: Arc::default(),
        })
    }

    /// Applies the embedded migrations of this backend that have not run yet.
    pub async fn migrate(&self) -> Result<(), DbSetupError> {
        let migrator = match self.backend {
            Backend::Sqlite => &SQLITE_MIGRATIONS,
            Backend::Postgres => &POSTGRES_MIGRATIONS,
        };
        migrator
            .run(&self.pool)
            .await
            .map_err(DbSetupError::Migrate)
    }

    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Starts a transaction that will write.
    ///
    /// On SQLite it takes the write lock up front (`BEGIN IMMEDIATE`): a deferred
    /// transaction that reads and then writes can fail with `SQLITE_BUSY` without waiting
    /// when another writer committed in between.
    ///
    /// SQLite has one writer at a time, and a transaction that finds the lock taken
    /// sleeps in SQLite's busy handler, waking in steps of up to 100 ms to try again: a
    /// herd of writers is then served by polling, not in order, and the lock lies idle
    /// between a commit and the next writer's wake-up. So the writers of this process
    /// take turns first, in the order they came (a fair queue), and each begins when the
    /// one before it has ended. A writer of another process (another control plane on
    /// the same file, or the `sqlite3` shell) still meets the busy handler.
    pub async fn begin_write(&self) -> Result<WriteTx, sqlx::Error> {
        let turn = self.turn().await?;
        let tx = match self.backend {
            Backend::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await?,
            Backend::Postgres => self.pool.begin().await?,
        };
        Ok(WriteTx { tx, _turn: turn })
    }

    /// Runs one statement that writes, by itself (autocommit), in its turn among the
    /// writers as [`Db::begin_write`] takes it: a single-statement write without a
    /// transaction's `BEGIN` and `COMMIT`, two more round trips to SQLite's worker (a
    /// proxy's acknowledgement waited about a fifth longer with them).
    pub async fn execute_in_turn<'q>(
        &self,
        statement: sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>>,
    ) -> Result<sqlx::any::AnyQueryResult, sqlx::Error> {
        let _turn = self.turn().await?;
        statement.execute(&self.pool).await
    }

    /// This writer's turn on SQLite, once the writers that came before it have ended
    /// (see [`Db::begin_write`]); PostgreSQL's writers need none.
    async fn turn(&self) -> Result<Option<OwnedMutexGuard<()>>, sqlx::Error> {
        match self.backend {
            Backend::Sqlite => {
                tokio::time::timeout(SQLITE_WRITE_WAIT, self.writers.clone().lock_owned())
                    .await
                    .map(Some)
                    .map_err(|_| sqlx::Error::PoolTimedOut)
            }
            Backend::Postgres => Ok(None),
        }
    }

    /// Checks that the database answers; used by `/readyz`.
    pub async fn ping(&self) -> Result<(), sqlx::Error> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map(|_| ())
    }
}

/// Whether `error` is a violation of a unique constraint (a conflict, not a failure).
pub fn is_unique_violation(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(db) if db.kind() == sqlx::error::ErrorKind::UniqueViolation)
}

/// A JSON column written by this service (lists and maps of proxy keys), decoded; a value
/// that does not decode reads as empty rather than failing the whole read.
pub fn json_column<T: serde::de::DeserializeOwned + Default>(text: &str) -> T {
    serde_json::from_str(text).unwrap_or_default()
}
