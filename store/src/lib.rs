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
pub mod batch;
mod dashboard;
mod error;
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
    Any, AnyConnection, AnyPool, Connection, Executor, Transaction,
    any::{AnyConnectOptions, AnyPoolOptions},
    migrate::Migrator,
};

pub use attempts::{Claim, LeaseCheck};
pub use dashboard::{
    DashboardSession, JobCounts, NewDashboardSession, ThroughputMinute, TokenCheck, WebhookHealth,
    check_session_token,
};
pub use idempotency::{KeyLookup, StoredResponse};
pub use jobs::{CancelOutcome, JobFilter, NewJob, RetryOutcome};
pub use keys::{ApiKeyRecord, KeySync, NewApiKey, Revocation, RevokeOutcome, ValidKey, hash_key};
pub use ledger::{GstRow, ImportOutcome};
pub use outbox::QueuedJob;
pub use periods::{FilingEndpoint, LockOutcome, Period, ReopenOutcome};
pub use results::StoredResult;
pub use retention::Pruned;
pub use sagas::{Fence, SagaPhase, SagaRun, SagaStep, TurnBack};
pub use submit::{Submission, SubmissionKey, Submitted};
pub use webhooks::{
    Delivery, DeliveryRecord, DueEvent, NewWebhook, Registration, Webhook, WebhookCaps,
};

use tokio::sync::{Mutex, OwnedMappedMutexGuard, OwnedMutexGuard};

pub use error::{Error, Result, lose_answer, lost_answer};

/// Our migrations keep their history in a table of their own, so apalis's
/// migrations (which use sqlx's default table) never see ours.
const MIGRATIONS_TABLE: &str = "receipt_migrations";

/// The Postgres NOTIFY channel a final status is announced on.
pub const FINISHED_CHANNEL: &str = "receipt_job_finished";

/// A transaction that writes; store functions that take one compose into
/// the caller's transaction. On SQLite it runs on the process's one
/// writing connection, which it holds (and with it this process's turn to
/// write, see [`Store::write_turn`]) until it ends.
pub struct WriteTx(TxOn);

enum TxOn {
    Pool(Transaction<'static, Any>),
    /// `None` once committed or rolled back.
    Writer(Option<WriterGuard>),
}

type WriterGuard = OwnedMappedMutexGuard<Option<AnyConnection>, AnyConnection>;

impl std::ops::Deref for WriteTx {
    type Target = AnyConnection;

    fn deref(&self) -> &AnyConnection {
        match &self.0 {
            TxOn::Pool(tx) => tx,
            TxOn::Writer(Some(conn)) => conn,
            TxOn::Writer(None) => unreachable!("a WriteTx is used only before it ends"),
        }
    }
}

impl std::ops::DerefMut for WriteTx {
    fn deref_mut(&mut self) -> &mut AnyConnection {
        match &mut self.0 {
            TxOn::Pool(tx) => tx,
            TxOn::Writer(Some(conn)) => conn,
            TxOn::Writer(None) => unreachable!("a WriteTx is used only before it ends"),
        }
    }
}

impl WriteTx {
    pub async fn commit(mut self) -> std::result::Result<(), sqlx::Error> {
        match std::mem::replace(&mut self.0, TxOn::Writer(None)) {
            TxOn::Pool(tx) => tx.commit().await,
            TxOn::Writer(Some(mut conn)) => {
                let committed = conn.execute("COMMIT").await.map(|_| ());
                if committed.is_err() {
                    // A failed COMMIT may leave the transaction open: end it
                    // before the next writer's BEGIN.
                    let _ = conn.execute("ROLLBACK").await;
                }
                committed
            }
            TxOn::Writer(None) => Ok(()),
        }
    }

    pub async fn rollback(mut self) -> std::result::Result<(), sqlx::Error> {
        match std::mem::replace(&mut self.0, TxOn::Writer(None)) {
            TxOn::Pool(tx) => tx.rollback().await,
            TxOn::Writer(Some(mut conn)) => conn.execute("ROLLBACK").await.map(|_| ()),
            TxOn::Writer(None) => Ok(()),
        }
    }
}

/// A transaction dropped without an end (an error, a cancelled request)
/// is rolled back before the writing connection serves anyone else: the
/// rollback keeps the turn until it is done.
impl Drop for WriteTx {
    fn drop(&mut self) {
        if let TxOn::Writer(writer) = &mut self.0
            && let Some(mut conn) = writer.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move {
                if let Err(error) = conn.execute("ROLLBACK").await {
                    tracing::warn!(%error, "rolling back an abandoned SQLite transaction failed");
                }
            });
        }
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
            Err(Error::Config(format!(
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
    /// Postgres itself for what needs a session (`DATABASE_DIRECT_URL`
    /// behind a transaction-mode pooler; else the pool's URL).
    session_url: String,
    /// SQLite only: the one connection this process writes with, and the
    /// turn to use it (see [`Store::write_turn`]); `None` once closed.
    write_gate: Option<Arc<Mutex<Option<AnyConnection>>>>,
}

impl Store {
    /// Opens the database the settings name (`DATABASE_URL`, through the
    /// pooler `DATABASE_POOLER` says is there).
    pub async fn open(settings: &shared::settings::Settings) -> Result<Self> {
        use shared::settings::DatabasePooler;
        match settings.database_pooler {
            DatabasePooler::None => Self::connect(&settings.database_url).await,
            DatabasePooler::Transaction => {
                let direct = settings.database_direct_url.as_deref().ok_or_else(|| {
                    Error::Config(
                        "DATABASE_POOLER=transaction needs DATABASE_DIRECT_URL: migrations \
                         and LISTEN need a session of their own, which a transaction-mode \
                         pooler does not keep"
                            .into(),
                    )
                })?;
                for url in [&settings.database_url, direct] {
                    if Dialect::of_url(url)? != Dialect::Postgres {
                        return Err(Error::Config(
                            "DATABASE_POOLER=transaction is for Postgres URLs".into(),
                        ));
                    }
                }
                // A transaction-mode pooler may give each transaction another
                // server: a statement prepared by name on one is unknown on
                // the next, or already taken there. Without a cache, sqlx
                // prepares the unnamed statement in the exchange that runs
                // it (see vendor/PATCHES.md).
                let separator = if settings.database_url.contains('?') {
                    '&'
                } else {
                    '?'
                };
                let url = format!(
                    "{}{separator}statement-cache-capacity=0",
                    settings.database_url
                );
                Self::connect_to(&url, Some(direct)).await
            }
        }
    }

    /// Opens a pool; for SQLite, creates the file (and its folder) if needed.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_to(url, None).await
    }

    async fn connect_to(url: &str, session_url: Option<&str>) -> Result<Self> {
        sqlx::any::install_default_drivers();
        let dialect = Dialect::of_url(url)?;
        let url = match dialect {
            Dialect::Sqlite => sqlite_url_creating(url)?,
            Dialect::Postgres => url.to_owned(),
        };
        let session_url = session_url.map_or_else(|| url.clone(), str::to_owned);
        let options = AnyConnectOptions::from_str(&url)?;
        let mut writer = None;
        let pool = match dialect {
            Dialect::Postgres => {
                AnyPoolOptions::new()
                    .max_connections(20)
                    .acquire_timeout(Duration::from_secs(5))
                    .connect_with(options)
                    .await?
            }
            Dialect::Sqlite => {
                let mut conn = AnyConnection::connect_with(&options).await?;
                configure_sqlite(&mut conn).await?;
                writer = Some(conn);
                AnyPoolOptions::new()
                    .max_connections(8)
                    .acquire_timeout(Duration::from_secs(5))
                    // A connection to a file in this process cannot have
                    // gone away while idle: no ping on every acquire.
                    .test_before_acquire(false)
                    .after_connect(|conn, _| Box::pin(configure_sqlite(conn)))
                    .connect_with(options)
                    .await?
            }
        };
        let write_gate = writer.map(|conn| Arc::new(Mutex::new(Some(conn))));
        if dialect == Dialect::Sqlite {
            tokio::spawn(checkpoint_in_background(pool.clone()));
        }
        Ok(Store {
            pool,
            dialect,
            url,
            session_url,
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

    /// Postgres itself, for a session of its own (LISTEN, a queue that
    /// listens): not a transaction-mode pooler.
    pub fn session_url(&self) -> &str {
        &self.session_url
    }

    pub async fn migrate(&self) -> Result<()> {
        let mut migrator: Migrator = match self.dialect {
            Dialect::Postgres => sqlx::migrate!("../migrations/postgres"),
            Dialect::Sqlite => sqlx::migrate!("../migrations/sqlite"),
        };
        migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
        if self.session_url == self.url {
            migrator.run(&self.pool).await?;
        } else {
            // The migrator's lock is a session's advisory lock: taken and
            // released on one connection to Postgres itself.
            let mut conn = AnyConnection::connect(&self.session_url).await?;
            let outcome = migrator.run(&mut conn).await;
            let _ = conn.close().await;
            outcome?;
        }
        Ok(())
    }

    pub async fn ping(&self) -> Result<()> {
        self.pool.execute("SELECT 1").await?;
        Ok(())
    }

    pub async fn close(&self) {
        self.pool.close().await;
        if let Some(gate) = &self.write_gate
            && let Some(conn) = gate.lock().await.take()
        {
            let _ = conn.close().await;
        }
    }

    /// A transaction that will write. SQLite takes the write lock at BEGIN,
    /// so two writers queue instead of one failing when it upgrades a read
    /// lock; it writes on the process's writing connection, so a write
    /// neither takes a connection from the pool nor gives it back (sqlx
    /// pings a connection it is given back: a round trip to its thread).
    pub async fn begin_write(&self) -> Result<WriteTx> {
        let Some(gate) = &self.write_gate else {
            return Ok(WriteTx(TxOn::Pool(self.pool.begin().await?)));
        };
        let mut conn = OwnedMutexGuard::try_map(gate.clone().lock_owned().await, Option::as_mut)
            .map_err(|_| sqlx::Error::PoolClosed)?;
        conn.execute("BEGIN IMMEDIATE").await?;
        Ok(WriteTx(TxOn::Writer(Some(conn))))
    }

    /// SQLite: this process's writers take turns here, in order, instead
    /// of in SQLite's busy handler, which sleeps (1, 2, 5, 10 ms and more)
    /// between tries: under load those sleeps were most of a write's
    /// latency. Writers in other processes still meet the busy handler.
    /// Postgres locks rows, not the database: no turn.
    pub(crate) async fn write_turn(&self) -> Option<OwnedMutexGuard<Option<AnyConnection>>> {
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

/// Every SQLite connection's settings. WAL lets readers run beside the one
/// writer; NORMAL is durable across a process crash.
async fn configure_sqlite(conn: &mut AnyConnection) -> std::result::Result<(), sqlx::Error> {
    for pragma in [
        "PRAGMA journal_mode = WAL",
        "PRAGMA synchronous = NORMAL",
        "PRAGMA busy_timeout = 10000",
        "PRAGMA foreign_keys = ON",
        // Checkpoints run in the background (below), not inside whichever
        // commit fills the WAL.
        "PRAGMA wal_autocheckpoint = 0",
    ] {
        conn.execute(pragma).await?;
    }
    Ok(())
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
        std::fs::create_dir_all(parent)
            .map_err(|e| Error::Config(format!("cannot create {}: {e}", parent.display())))?;
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
pub async fn forward_finished_notifications(url: String, signals: shared::notify::Signals) {
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

#[cfg(test)]
mod tests {
    use super::*;

    async fn probe_rows(store: &Store) -> Vec<i64> {
        sqlx::query_scalar("SELECT n FROM probe ORDER BY n")
            .fetch_all(&store.pool)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_sqlite_write_ended_without_commit_is_undone_before_the_next_writer() {
        let dir = std::env::temp_dir().join(format!("receipt-store-{}", uuid::Uuid::now_v7()));
        let store = Store::connect(&format!("sqlite://{}/jobs.db", dir.display()))
            .await
            .unwrap();
        let mut tx = store.begin_write().await.unwrap();
        tx.execute("CREATE TABLE probe (n INTEGER NOT NULL)")
            .await
            .unwrap();
        tx.commit().await.unwrap();

        // Dropped mid-way (an error, a cancelled request): rolled back.
        let mut tx = store.begin_write().await.unwrap();
        tx.execute("INSERT INTO probe (n) VALUES (1)")
            .await
            .unwrap();
        drop(tx);
        // A failed statement, then dropped.
        let mut tx = store.begin_write().await.unwrap();
        tx.execute("INSERT INTO probe (n) VALUES (2)")
            .await
            .unwrap();
        assert!(
            tx.execute("INSERT INTO probe (n) VALUES (NULL)")
                .await
                .is_err()
        );
        drop(tx);
        // Rolled back on purpose.
        let mut tx = store.begin_write().await.unwrap();
        tx.execute("INSERT INTO probe (n) VALUES (3)")
            .await
            .unwrap();
        tx.rollback().await.unwrap();

        let mut tx = store.begin_write().await.unwrap();
        tx.execute("INSERT INTO probe (n) VALUES (4)")
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(probe_rows(&store).await, [4]);

        store.close().await;
        assert!(store.begin_write().await.is_err(), "closed");
        let _ = std::fs::remove_dir_all(dir);
    }
}
