//! The store: every SQL statement of the service, next to the migrations in
//! `migrations/{postgres,sqlite}` it relies on. One code path serves both
//! databases through sqlx's `Any` driver; where their dialects differ, a
//! `Dialect` method says so.
//!
//! A job's status and an event's state are bound from `JobStatus` and
//! `EventState`, except in a statement that finds rows by status rather
//! than by key: there the status stays a literal, since Postgres's generic
//! plan for a parameter can use no partial index (`WHERE status =
//! 'RUNNING'`) and guesses the share of rows in a status from the number of
//! statuses, not from the table.

mod attempts;
mod dashboard;
mod idempotency;
mod jobs;
mod keys;
mod ledger;
mod outbox;
mod periods;
mod results;
mod retention;
mod sagas;
mod submit;
#[cfg(feature = "test-hooks")]
mod test_hooks;
mod webhooks;

use std::{str::FromStr, sync::Arc, time::Duration};

use sqlx::{
    Any, AnyConnection, AnyPool, Executor, Transaction,
    any::{AnyConnectOptions, AnyPoolOptions},
    migrate::Migrator,
};

pub use attempts::{Claim, LeaseCheck};
pub use dashboard::{
    DashboardSession, JobCounts, NewDashboardSession, ThroughputMinute, WebhookHealth,
};
pub use idempotency::{KeyLookup, StoredResponse};
pub use jobs::{CancelOutcome, JobFilter, NewJob, RetryOutcome};
pub use keys::{
    ApiKeyRecord, KeySync, NewApiKey, Revocation, RevokeOutcome, ValidKey, hash_key, new_key,
};
pub use ledger::{GstRow, ImportOutcome};
pub use outbox::QueuedJob;
pub use periods::{FilingEndpoint, LockOutcome, Period, ReopenOutcome};
pub use results::StoredResult;
pub use retention::{
    Pruned, delete_finished_postgres_messages, delete_finished_sqlite_messages,
    index_finished_postgres_messages,
};
pub use sagas::{Fence, SagaPhase, SagaRun, SagaStep, TurnBack};
pub use submit::{Submission, SubmissionKey, Submitted};
pub use webhooks::{Delivery, DeliveryRecord, DueEvent, NewWebhook, Webhook};

use tokio::sync::{Mutex, OwnedMutexGuard};

use crate::Result;

/// Our migrations keep their history in a table of their own, so apalis's
/// migrations (which use sqlx's default table) never see ours.
const MIGRATIONS_TABLE: &str = "receipt_migrations";

/// The Postgres NOTIFY channel a final status is announced on.
pub const FINISHED_CHANNEL: &str = "receipt_job_finished";

/// A transaction that writes; store functions that take one compose into
/// the caller's transaction. On SQLite it also holds this process's turn
/// to write (see [`Store::write_turn`]) until it ends.
pub struct WriteTx {
    tx: Transaction<'static, Any>,
    _turn: Option<OwnedMutexGuard<()>>,
}

impl std::ops::Deref for WriteTx {
    type Target = AnyConnection;

    fn deref(&self) -> &AnyConnection {
        &self.tx
    }
}

impl std::ops::DerefMut for WriteTx {
    fn deref_mut(&mut self) -> &mut AnyConnection {
        &mut self.tx
    }
}

impl WriteTx {
    pub async fn commit(self) -> std::result::Result<(), sqlx::Error> {
        self.tx.commit().await
    }

    pub async fn rollback(self) -> std::result::Result<(), sqlx::Error> {
        self.tx.rollback().await
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Postgres,
    Sqlite,
}

impl Dialect {
    pub fn of_url(url: &str) -> Result<Self> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Dialect::Postgres)
        } else if url.starts_with("sqlite:") {
            Ok(Dialect::Sqlite)
        } else {
            Err(crate::Error::Config(format!(
                "DATABASE_URL must start with sqlite:// or postgres://, not {url:?}"
            )))
        }
    }

    /// Row locks that let several processes share a batch: Postgres takes
    /// them; SQLite has one writer at a time and needs none.
    fn skip_locked(self) -> &'static str {
        match self {
            Dialect::Postgres => " FOR UPDATE SKIP LOCKED",
            Dialect::Sqlite => "",
        }
    }

    fn for_update(self) -> &'static str {
        match self {
            Dialect::Postgres => " FOR UPDATE",
            Dialect::Sqlite => "",
        }
    }

    fn for_share(self) -> &'static str {
        match self {
            Dialect::Postgres => " FOR SHARE",
            Dialect::Sqlite => "",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Store {
    pool: AnyPool,
    dialect: Dialect,
    url: String,
    /// SQLite only: see [`Store::write_turn`].
    write_gate: Option<Arc<Mutex<()>>>,
}

impl Store {
    /// Opens a pool; for SQLite, creates the file (and its folder) if needed.
    pub async fn connect(url: &str) -> Result<Self> {
        sqlx::any::install_default_drivers();
        let dialect = Dialect::of_url(url)?;
        let url = match dialect {
            Dialect::Sqlite => sqlite_url_creating(url)?,
            Dialect::Postgres => url.to_owned(),
        };
        let options = AnyConnectOptions::from_str(&url)?;
        let pool = match dialect {
            Dialect::Postgres => {
                AnyPoolOptions::new()
                    .max_connections(20)
                    .acquire_timeout(Duration::from_secs(5))
                    .connect_with(options)
                    .await?
            }
            Dialect::Sqlite => {
                AnyPoolOptions::new()
                    .max_connections(8)
                    .acquire_timeout(Duration::from_secs(5))
                    .after_connect(|conn, _| {
                        Box::pin(async move {
                            // WAL lets readers run beside the one writer;
                            // NORMAL is durable across a process crash.
                            for pragma in [
                                "PRAGMA journal_mode = WAL",
                                "PRAGMA synchronous = NORMAL",
                                "PRAGMA busy_timeout = 10000",
                                "PRAGMA foreign_keys = ON",
                                // Checkpoints run in the background (below),
                                // not inside whichever commit fills the WAL.
                                "PRAGMA wal_autocheckpoint = 0",
                            ] {
                                conn.execute(pragma).await?;
                            }
                            Ok(())
                        })
                    })
                    .connect_with(options)
                    .await?
            }
        };
        let write_gate = (dialect == Dialect::Sqlite).then(|| Arc::new(Mutex::new(())));
        if dialect == Dialect::Sqlite {
            tokio::spawn(checkpoint_in_background(pool.clone()));
        }
        Ok(Store {
            pool,
            dialect,
            url,
            write_gate,
        })
    }

    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The URL the pool was opened with (for SQLite, with `mode=rwc`).
    pub fn url(&self) -> &str {
        &self.url
    }

    pub async fn migrate(&self) -> Result<()> {
        let mut migrator: Migrator = match self.dialect {
            Dialect::Postgres => sqlx::migrate!("../migrations/postgres"),
            Dialect::Sqlite => sqlx::migrate!("../migrations/sqlite"),
        };
        migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
        migrator.run(&self.pool).await?;
        Ok(())
    }

    pub async fn ping(&self) -> Result<()> {
        self.pool.execute("SELECT 1").await?;
        Ok(())
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// A transaction that will write. SQLite takes the write lock at BEGIN,
    /// so two writers queue instead of one failing when it upgrades a read
    /// lock.
    pub async fn begin_write(&self) -> Result<WriteTx> {
        let turn = self.write_turn().await;
        let tx = match self.dialect {
            Dialect::Postgres => self.pool.begin().await?,
            Dialect::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await?,
        };
        Ok(WriteTx { tx, _turn: turn })
    }

    /// SQLite: this process's writers take turns here, in order, instead
    /// of in SQLite's busy handler, which sleeps (1, 2, 5, 10 ms and more)
    /// between tries: under load those sleeps were most of a write's
    /// latency. Writers in other processes still meet the busy handler.
    /// Postgres locks rows, not the database: no turn.
    pub(super) async fn write_turn(&self) -> Option<OwnedMutexGuard<()>> {
        match &self.write_gate {
            Some(gate) => Some(gate.clone().lock_owned().await),
            None => None,
        }
    }

    /// What every final-status transaction does besides the status: one
    /// webhook event per matching webhook (the events outbox: none lost,
    /// none invented), and, on Postgres, a NOTIFY for other processes' long
    /// polls, delivered when the transaction commits.
    async fn announce_final(&self, tx: &mut WriteTx, job_id: &str) -> Result<()> {
        self.announce_final_all(tx, &[job_id.to_owned()]).await
    }

    /// [`Store::announce_final`] for several jobs: one NOTIFY carries all
    /// their ids, comma-separated.
    async fn announce_final_all(&self, tx: &mut WriteTx, job_ids: &[String]) -> Result<()> {
        if job_ids.is_empty() {
            return Ok(());
        }
        self.create_events(tx, job_ids).await?;
        if self.dialect == Dialect::Postgres {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(FINISHED_CHANNEL)
                .bind(job_ids.join(","))
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }
}

/// Copies the SQLite WAL back into the database five times a second,
/// without waiting for readers or writers (PASSIVE), until the pool
/// closes. An automatic checkpoint would run inside the commit that filled
/// the WAL and make that request wait for the copy and its fsync (embedded
/// submit p99 at 1,000/s: about 10 ms with it, 8.5 ms without; once a
/// second, each copy was large enough to cost a p99 of 15 ms).
async fn checkpoint_in_background(pool: AnyPool) {
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if pool.is_closed() {
            return;
        }
        if let Err(error) = pool.execute("PRAGMA wal_checkpoint(PASSIVE)").await {
            if pool.is_closed() {
                return;
            }
            tracing::warn!(%error, "SQLite checkpoint failed; trying again shortly");
        }
    }
}

/// `sqlite://data/jobs.db` opens read-write but fails on a missing file;
/// the embedded default must work from a fresh clone, so create it.
fn sqlite_url_creating(url: &str) -> Result<String> {
    let path = url
        .trim_start_matches("sqlite://")
        .trim_start_matches("sqlite:")
        .split('?')
        .next()
        .unwrap_or_default();
    let parent = std::path::Path::new(path).parent();
    if let Some(parent) = parent.filter(|p| path != ":memory:" && !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| {
            crate::Error::Config(format!("cannot create {}: {e}", parent.display()))
        })?;
    }
    Ok(if url.contains('?') {
        url.to_owned()
    } else {
        format!("{url}?mode=rwc")
    })
}

/// The size of list a Postgres statement is written for when it is given
/// `count` items: the next power of two. A statement is prepared and
/// planned per connection and per text, and with one text per batch size
/// planning took 6-10% of the CPU of the backends serving a busy pool.
fn padded_len(count: usize) -> usize {
    count.next_power_of_two()
}

/// `$first, $first+1, ...`: `count` numbered placeholders for an IN list.
fn placeholders(first: usize, count: usize) -> String {
    (first..first + count)
        .map(|n| format!("${n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `(${first}, ${first+1}, ...), (...)`: `rows` rows of `width` placeholders.
fn value_rows(first: usize, rows: usize, width: usize) -> String {
    (0..rows)
        .map(|row| format!("({})", placeholders(first + row * width, width)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `(a = $first AND b = $first+1) OR ...`, `count` times: a lookup by a
/// two-column key. Equalities joined by OR, not `(a, b) IN (VALUES ..)`,
/// which Postgres may answer with a hash join over a scan of the table.
/// Where every pair shares its `a` (one tenant's keys), Postgres factors it
/// out and may read all rows with that `a`: keep such lookups off hot paths.
fn pairs_equal(first: usize, count: usize, a: &str, b: &str) -> String {
    (0..count)
        .map(|i| {
            format!(
                "({a} = ${} AND {b} = ${})",
                first + 2 * i,
                first + 2 * i + 1
            )
        })
        .collect::<Vec<_>>()
        .join(" OR ")
}

/// Marks SQL assembled at run time as safe: the store builds such strings
/// only from constants and numbered placeholders, never from input.
fn built(sql: &str) -> sqlx::AssertSqlSafe<String> {
    sqlx::AssertSqlSafe(sql.to_owned())
}

/// Forwards Postgres NOTIFYs of final statuses (sent by any process's
/// commit) to this process's long polls. Reconnects after a failure; the
/// long polls' periodic re-check covers the gap.
pub async fn forward_finished_notifications(url: String, signals: crate::notify::Signals) {
    loop {
        match sqlx::postgres::PgListener::connect(&url).await {
            Ok(mut listener) => match listener.listen(FINISHED_CHANNEL).await {
                Ok(()) => loop {
                    match listener.recv().await {
                        Ok(notification) => {
                            for job_id in notification.payload().split(',') {
                                signals.job_finished(job_id);
                            }
                        }
                        Err(error) => {
                            tracing::warn!(%error, "lost the Postgres notification listener");
                            break;
                        }
                    }
                },
                Err(error) => tracing::warn!(%error, "LISTEN failed"),
            },
            Err(error) => tracing::warn!(%error, "cannot connect the notification listener"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
