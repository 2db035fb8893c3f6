//! The store: every SQL statement of the service, next to the migrations in
//! `migrations/{postgres,sqlite}` it relies on.
//!
//! One [`Store`] serves both databases; each database has a module of its
//! own (`postgres/`, `sqlite/`) holding its statements in its own dialect
//! and types: `timestamptz`, `jsonb`, `boolean` and arrays on Postgres;
//! unix milliseconds, JSON text and 0/1 on SQLite. A statement whose text
//! and binds are the same on both is written once, in `portable/`, and
//! compiled for each. A module per area
//! (`jobs.rs`, `webhooks.rs`, ...) holds the area's types and the
//! [`Store`] methods, which pick the database's function. Every statement
//! is a literal inside [`sql!`], so `tests/statements.rs` prepares each
//! one against a freshly migrated database of its kind, and a typo or a
//! wrong column fails the tests rather than production.
//!
//! Statuses and states are literals in the statements that find rows by
//! them: Postgres's generic plan for a parameter can use no partial index
//! (`WHERE status = 'RUNNING'`) and guesses the share of rows in a status
//! from the number of statuses, not from the table. A status written into
//! a row is checked by its column's `CHECK` on Postgres.

#[macro_use]
mod sql;

mod attempts;
mod audit;
pub mod batch;
mod dashboard;
mod earlier_apalis;
mod error;
mod gauges;
mod idempotency;
mod jobs;
mod keyring;
mod keys;
mod kinds;
mod ledger;
mod outbox;
mod periods;
mod portable;
mod postgres;
pub mod queue;
mod results;
mod retention;
mod rows;
mod sagas;
mod schedules;
mod secrets;
mod sqlite;
mod submit;
#[cfg(feature = "test-hooks")]
mod test_hooks;
mod webhooks;
mod work;

use std::{
    str::FromStr,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use sqlx::{
    Connection, PgConnection, PgPool, Postgres, SqliteConnection, SqlitePool, Transaction,
    migrate::Migrator,
    postgres::{PgConnectOptions, PgPoolOptions},
    sqlite::{SqliteConnectOptions, SqlitePoolOptions},
};
use tokio::sync::{Mutex, OwnedMappedMutexGuard, OwnedMutexGuard};

pub use attempts::{Claim, LeaseCheck, SuccessWrite};
pub use audit::{Actor, AuditAction, AuditChange, AuditEntry, AuditFilter};
pub use dashboard::{
    DashboardSession, JobCounts, NewDashboardSession, ThroughputMinute, TokenCheck, WebhookHealth,
    check_session_token,
};
pub use earlier_apalis::EarlierApalisTable;
pub use error::{Error, Result, lose_answer, lost_answer};
pub use gauges::{KindSample, OUTBOX_COUNT_LIMIT, QueueSample, TenantSample};
pub use idempotency::{KeyLookup, StoredResponse};
pub use jobs::{CancelOutcome, JobFilter, KindTerms, NewJob, RetryOutcome};
pub use keyring::{KeySource, Keyring, MASTER_KEYS_SETTING};
pub use keys::{
    ApiKeyRecord, KeyScope, KeySync, NewApiKey, Revocation, RevokeOutcome, Scope, ValidKey,
    hash_key,
};
pub use kinds::{PutKind, RegisteredKind};
pub use ledger::{GstRow, ImportOutcome};
pub use outbox::{QueuedJob, SweepCursor};
pub use periods::{FilingEndpoint, LockOutcome, Period, ReopenOutcome};
pub use queue::{DueJobWaiter, IDLE_LOOK, QUEUE_CHANNEL, SQLITE_LOOK, WORK_CHANNEL, claim_cursor};
pub use results::{BytesChunk, StoredResult};
pub use retention::Pruned;
pub use sagas::{Fence, SagaPhase, SagaRun, SagaStep, TurnBack};
pub use schedules::{FirePlan, Fired, FiredJob, Schedule};
pub use secrets::SecretsReport;
pub use submit::{Publishing, Submission, SubmissionKey, Submitted};
pub use webhooks::{
    Delivery, DeliveryRecord, DueEvent, NewWebhook, Registration, Webhook, WebhookCaps,
};
pub use work::{
    ExternalJobState, Heartbeat, LeaseAsk, LeasedAttempt, LeasedKind, ReportedJob, WorkerRecord,
};

/// Our migrations keep their history in a table of their own, so apalis's
/// migrations (which use sqlx's default table) never see ours.
const MIGRATIONS_TABLE: &str = "receipt_migrations";

/// How long a call waits for a pooled connection before it fails (and a
/// request is answered 503): every pool of a store waits as long.
const POOL_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// What every session of a direct connection to Postgres sets (behind a
/// pooler, which may refuse startup parameters, the role's settings do:
/// docs/operations.md): no statement runs for more than a minute, a
/// transaction left idle (its client gone silent mid-transaction) is ended
/// after a minute, releasing its locks, and the server probes a quiet
/// connection after 30 s, so a client that vanished is found within about
/// a minute. Migrations run on a connection of their own, without them.
const SESSION_TIMEOUTS: [(&str, &str); 5] = [
    ("statement_timeout", "60s"),
    ("idle_in_transaction_session_timeout", "60s"),
    ("tcp_keepalives_idle", "30"),
    ("tcp_keepalives_interval", "10"),
    ("tcp_keepalives_count", "3"),
];

/// `DATABASE_POOL_SIZE`'s default, for a store opened from a URL alone.
const DEFAULT_POOL_SIZE: u32 = 20;

/// Connections of [`Store::per_job_pool`]: a process's group commits of
/// each kind go one at a time (submits; claims and successes, apart or
/// together), so a few serve them all.
const GENERIC_PLAN_CONNECTIONS: u32 = 4;
/// How often a Postgres store reads the database's clock again
/// ([`Store::sync_clock`]): between readings the process counts time on its
/// monotonic clock, which drifts from the database's by far less than a
/// millisecond in this time.
const CLOCK_SYNC_EVERY: Duration = Duration::from_secs(10);
/// A host's clock this far off the database's, or a database clock that
/// moves this far between two readings, is logged.
const CLOCK_WORTH_TELLING_MS: i64 = 1_000;

/// The Postgres NOTIFY channel a final status is announced on.
pub const FINISHED_CHANNEL: &str = "receipt_job_finished";

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
}

#[derive(Clone, Debug)]
pub struct Store {
    db: Db,
    /// The URL the pool was opened with (for SQLite, with `mode=rwc`).
    url: String,
    /// Postgres itself for what needs a session (`DATABASE_DIRECT_URL`
    /// behind a transaction-mode pooler; else the pool's URL).
    session_url: String,
    /// `PRIORITY_AGING`: what one priority step is worth in a job's rank.
    priority_aging: Duration,
    /// See [`Store::events_committed`]; shared by the store's clones.
    events_committed: Arc<AtomicU64>,
    /// Whether the job rows are the queue, as [`Store::record_queue`]
    /// last recorded it; shared by the store's clones.
    queue_in_job_rows: Arc<AtomicBool>,
    /// Postgres, not behind a pooler: connections that keep one generic
    /// plan per prepared statement (see [`Store::per_job_pool`]).
    generic_plans: Option<PgPool>,
    /// Behind a transaction-mode pooler: every call of a pool runs in a
    /// transaction of its own ([`on_postgres!`]).
    transaction_per_call: bool,
    /// Postgres: dropped with the last of the store's clones, which stops
    /// the task that keeps the process's clock by the database's
    /// ([`Store::sync_clock`]).
    _clock_keeper: Option<Arc<tokio::sync::oneshot::Sender<()>>>,
    /// The master keys that seal secrets at rest, and the data keys
    /// opened so far; shared by the store's clones.
    keyring: Keyring,
}

#[derive(Clone, Debug)]
enum Db {
    Postgres(PgPool),
    Sqlite(SqliteDb),
}

/// The embedded database: a pool for reads, and the one connection this
/// process writes with, behind the turn to use it (see
/// [`Store::write_turn`]); `None` once closed.
#[derive(Clone, Debug)]
struct SqliteDb {
    pool: SqlitePool,
    writer: Arc<Mutex<Option<SqliteConnection>>>,
}

/// Runs `$pg` with the Postgres pool or `$lite` with the SQLite one: the
/// one place a [`Store`] method chooses its database's statement.
macro_rules! on_pool {
    ($store:expr, $pool:ident => $pg:expr, $lite_pool:ident => $lite:expr $(,)?) => {
        match &$store.db {
            crate::Db::Postgres(pg_pool) => {
                crate::on_postgres!($store, pg_pool, $pool => $pg)
            }
            crate::Db::Sqlite(db) => {
                let $lite_pool = &db.pool;
                $lite
            }
        }
    };
}

/// Runs `$pg` with `$pg_pool`, a Postgres pool of the store: directly, or,
/// behind a transaction-mode pooler, on a transaction of its own, so that
/// every exchange of its statements reaches one server (a pooler may give
/// each exchange outside a transaction another, and sqlx parses a
/// statement in one exchange and binds it in the next). `$pg` may use
/// `$pool` once: as a `&PgPool` or a `&mut PgConnection`.
macro_rules! on_postgres {
    ($store:expr, $pg_pool:expr, $pool:ident => $pg:expr) => {{
        if $store.transaction_per_call {
            let mut tx = $pg_pool.begin().await?;
            let out = {
                let $pool = &mut *tx;
                $pg
            };
            tx.commit().await?;
            out
        } else {
            #[allow(clippy::redundant_locals)]
            let $pool = $pg_pool;
            $pg
        }
    }};
}

/// [`on_pool!`] inside a transaction: runs `$pg` or `$lite` with the
/// transaction's connection.
macro_rules! on_tx {
    ($tx:expr, $conn:ident => $pg:expr, $lite_conn:ident => $lite:expr $(,)?) => {
        match $tx.connection() {
            crate::TxConnection::Postgres($conn) => $pg,
            crate::TxConnection::Sqlite($lite_conn) => $lite,
        }
    };
}

pub(crate) use {on_pool, on_postgres, on_tx};

/// A transaction that writes; store functions that take one compose into
/// the caller's transaction. On SQLite it runs on the process's one
/// writing connection, which it holds (and with it this process's turn to
/// write, see [`Store::write_turn`]) until it ends.
pub struct WriteTx {
    on: TxOn,
    /// Whether the transaction wrote webhook events: its commit then
    /// moves [`Store::events_committed`].
    wrote_events: bool,
    events_committed: Arc<AtomicU64>,
}

enum TxOn {
    Postgres(Transaction<'static, Postgres>),
    /// `None` once committed or rolled back.
    Sqlite(Option<WriterGuard>),
}

type WriterGuard = OwnedMappedMutexGuard<Option<SqliteConnection>, SqliteConnection>;

/// The connection a [`WriteTx`] runs on.
pub(crate) enum TxConnection<'t> {
    Postgres(&'t mut PgConnection),
    Sqlite(&'t mut SqliteConnection),
}

impl WriteTx {
    pub(crate) fn connection(&mut self) -> TxConnection<'_> {
        match &mut self.on {
            TxOn::Postgres(tx) => TxConnection::Postgres(tx),
            TxOn::Sqlite(Some(conn)) => TxConnection::Sqlite(conn),
            TxOn::Sqlite(None) => unreachable!("a WriteTx is used only before it ends"),
        }
    }

    pub(crate) fn wrote_events(&mut self) {
        self.wrote_events = true;
    }

    pub async fn commit(mut self) -> Result<()> {
        match std::mem::replace(&mut self.on, TxOn::Sqlite(None)) {
            TxOn::Postgres(tx) => tx.commit().await?,
            TxOn::Sqlite(Some(mut conn)) => sqlite::session::commit(&mut conn).await?,
            TxOn::Sqlite(None) => {}
        }
        if self.wrote_events {
            self.events_committed.fetch_add(1, Ordering::Release);
        }
        Ok(())
    }

    pub async fn rollback(mut self) -> Result<()> {
        match std::mem::replace(&mut self.on, TxOn::Sqlite(None)) {
            TxOn::Postgres(tx) => tx.rollback().await?,
            TxOn::Sqlite(Some(mut conn)) => sqlite::session::rollback(&mut conn).await?,
            TxOn::Sqlite(None) => {}
        }
        Ok(())
    }
}

/// A transaction dropped without an end (an error, a cancelled request)
/// is rolled back before the writing connection serves anyone else: the
/// rollback keeps the turn until it is done.
impl Drop for WriteTx {
    fn drop(&mut self) {
        if let TxOn::Sqlite(writer) = &mut self.on
            && let Some(mut conn) = writer.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move {
                if let Err(error) = sqlite::session::rollback(&mut conn).await {
                    tracing::warn!(%error, "rolling back an abandoned SQLite transaction failed");
                }
            });
        }
    }
}

/// `PRIORITY_AGING`'s default, for a store opened by URL alone.
pub const DEFAULT_PRIORITY_AGING: Duration = Duration::from_secs(300);

impl Store {
    /// Opens the database the settings name (`DATABASE_URL`, through the
    /// pooler `DATABASE_POOLER` says is there).
    pub async fn open(settings: &shared::settings::Settings) -> Result<Self> {
        let keyring =
            Keyring::from_setting(settings.master_keys.as_deref(), &settings.database_url)?;
        let mut store = Self::open_database(settings).await?;
        store.priority_aging = settings.priority_aging;
        store.keyring = keyring;
        Ok(store)
    }

    /// The store with these master keys (a store opened by URL alone has
    /// those of [`Keyring::from_setting`] with the setting unset).
    pub fn with_keyring(mut self, keyring: Keyring) -> Self {
        self.keyring = keyring;
        self
    }

    /// The store with `PRIORITY_AGING` set to `aging`.
    pub fn with_priority_aging(mut self, aging: Duration) -> Self {
        self.priority_aging = aging;
        self
    }

    async fn open_database(settings: &shared::settings::Settings) -> Result<Self> {
        use shared::settings::DatabasePooler;
        match settings.database_pooler {
            DatabasePooler::None => {
                Self::connect_to(&settings.database_url, None, settings.database_pool_size).await
            }
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
                // uses the unnamed statement, and every call runs in a
                // transaction of its own (`on_postgres!`), which keeps the
                // exchange that parses it and the one that binds it on one
                // server.
                let separator = if settings.database_url.contains('?') {
                    '&'
                } else {
                    '?'
                };
                let url = format!(
                    "{}{separator}statement-cache-capacity=0",
                    settings.database_url
                );
                Self::connect_to(&url, Some(direct), settings.database_pool_size).await
            }
        }
    }

    /// Opens a pool; for SQLite, creates the file (and its folder) if needed.
    /// Its master keys are those of [`Keyring::from_setting`] with
    /// `RECEIPT_MASTER_KEYS` unset (see [`Store::with_keyring`]).
    pub async fn connect(url: &str) -> Result<Self> {
        let keyring = Keyring::from_setting(None, url)?;
        Ok(Self::connect_to(url, None, DEFAULT_POOL_SIZE)
            .await?
            .with_keyring(keyring))
    }

    /// `pool_size`: the Postgres pool's connections at most.
    async fn connect_to(url: &str, session_url: Option<&str>, pool_size: u32) -> Result<Self> {
        let mut generic_plans = None;
        let (db, url) = match Dialect::of_url(url)? {
            Dialect::Postgres => {
                let mut options = PgConnectOptions::from_str(url)?;
                if session_url.is_none() {
                    options = options.options(SESSION_TIMEOUTS);
                }
                let pool = PgPoolOptions::new()
                    .max_connections(pool_size)
                    .acquire_timeout(POOL_ACQUIRE_TIMEOUT)
                    .connect_with(options.clone())
                    .await?;
                // Behind a transaction-mode pooler statements are not kept
                // (each is planned where it runs), and a pooler may refuse
                // a connection that sets parameters.
                generic_plans = session_url.is_none().then(|| {
                    PgPoolOptions::new()
                        .max_connections(GENERIC_PLAN_CONNECTIONS)
                        .acquire_timeout(POOL_ACQUIRE_TIMEOUT)
                        .connect_lazy_with(options.options([
                            ("plan_cache_mode", "force_generic_plan"),
                            ("enable_seqscan", "off"),
                        ]))
                });
                (Db::Postgres(pool), url.to_owned())
            }
            Dialect::Sqlite => {
                let url = sqlite_url_creating(url)?;
                let options = SqliteConnectOptions::from_str(&url)?;
                let mut writer = SqliteConnection::connect_with(&options).await?;
                sqlite::session::configure(&mut writer).await?;
                let pool = SqlitePoolOptions::new()
                    .max_connections(8)
                    .acquire_timeout(POOL_ACQUIRE_TIMEOUT)
                    // A connection to a file in this process cannot have
                    // gone away while idle: no ping on every acquire.
                    .test_before_acquire(false)
                    .after_connect(|conn, _| Box::pin(sqlite::session::configure(conn)))
                    .connect_with(options)
                    .await?;
                tokio::spawn(checkpoint_in_background(pool.clone()));
                let db = SqliteDb {
                    pool,
                    writer: Arc::new(Mutex::new(Some(writer))),
                };
                (Db::Sqlite(db), url)
            }
        };
        let transaction_per_call = session_url.is_some();
        let session_url = session_url.map_or_else(|| url.clone(), str::to_owned);
        let mut store = Store {
            db,
            url,
            session_url,
            priority_aging: DEFAULT_PRIORITY_AGING,
            events_committed: Arc::default(),
            queue_in_job_rows: Arc::default(),
            generic_plans,
            transaction_per_call,
            _clock_keeper: None,
            keyring: Keyring::none(),
        };
        if store.dialect() == Dialect::Postgres {
            if let Err(error) = store.sync_clock().await {
                tracing::warn!(%error, "could not read the database's clock; reading it again shortly");
            }
            // The task's clone holds no keeper: the store's own clones do.
            let (keeper, stopped) = tokio::sync::oneshot::channel();
            tokio::spawn(store.clone().keep_clock(stopped));
            store._clock_keeper = Some(Arc::new(keeper));
        }
        Ok(store)
    }

    /// Reads the database's clock and sets this process's one clock by it
    /// (`shared::time`): every time Receipt decides by is the database's,
    /// whatever this host's clock says. SQLite's clock is this process's:
    /// nothing to read.
    pub async fn sync_clock(&self) -> Result<()> {
        let Db::Postgres(pool) = &self.db else {
            return Ok(());
        };
        let first = !shared::time::is_set();
        let sent = std::time::Instant::now();
        let database_ms = on_postgres!(self, pool, pool => postgres::database_time_ms(pool).await?);
        let moved = shared::time::set_from_database(database_ms, sent, std::time::Instant::now());
        let host_off_ms = shared::time::wall_clock_ms() - shared::time::now_ms();
        if first && host_off_ms.abs() >= CLOCK_WORTH_TELLING_MS {
            tracing::warn!(
                host_off_ms,
                "this host's clock is off the database's; Receipt keeps every time by the database's clock"
            );
        } else if moved.abs() >= CLOCK_WORTH_TELLING_MS {
            tracing::warn!(
                moved_ms = moved,
                "the database's clock moved against this host's monotonic clock; Receipt follows it"
            );
        }
        Ok(())
    }

    /// Reads the database's clock every [`CLOCK_SYNC_EVERY`] until the last
    /// of the store's clones is dropped.
    async fn keep_clock(self, mut stopped: tokio::sync::oneshot::Receiver<()>) {
        loop {
            tokio::select! {
                _ = &mut stopped => return,
                () = tokio::time::sleep(CLOCK_SYNC_EVERY) => {}
            }
            if let Err(error) = self.sync_clock().await {
                tracing::debug!(%error, "could not read the database's clock; keeping the last reading");
            }
        }
    }

    /// Postgres: the pool for the statements every job runs through (its
    /// submit, its claim, its success). Each finds its rows by key from
    /// arrays of ids, so one plan serves whatever it is given, yet Postgres,
    /// which cannot size the arrays of a generic plan, would plan each call
    /// afresh, and planning is a large part of such a statement's cost. Its
    /// connections keep one generic plan per statement
    /// (`plan_cache_mode = force_generic_plan`). That plan may be made
    /// while the tables hold a few rows, where a sequential scan looks
    /// cheapest, and is kept behind any backlog: sequential scans are off
    /// on these connections (`enable_seqscan`), and the statements' guards
    /// are written so that only primary keys serve them.
    /// `api/tests/it/query_plans.rs` checks both. Behind a pooler: `pool`
    /// itself.
    fn per_job_pool<'pool>(&'pool self, pool: &'pool PgPool) -> &'pool PgPool {
        self.generic_plans.as_ref().unwrap_or(pool)
    }

    pub fn dialect(&self) -> Dialect {
        match self.db {
            Db::Postgres(_) => Dialect::Postgres,
            Db::Sqlite(_) => Dialect::Sqlite,
        }
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

    /// Applies the migrations not yet applied. Migrations are numbered by
    /// the day they were written and only grow
    /// (`store/tests/migration_versions.rs`); those once numbered by later
    /// days were renumbered, and a database that applied them under their
    /// old numbers has its record moved to the new ones first, so the
    /// migrator finds them applied.
    pub async fn migrate(&self) -> Result<()> {
        match &self.db {
            Db::Postgres(_) => {
                let migrator = migrator(Dialect::Postgres);
                // On a connection of their own to Postgres itself: the
                // migrator's lock is a session's advisory lock, and a
                // migration (an index on a large table) may run for longer
                // than the pools' statement timeout.
                let mut conn = PgConnection::connect(&self.session_url).await?;
                let mut outcome = postgres::carry_renamed_migrations(&mut conn)
                    .await
                    .map(drop)
                    .map_err(Error::from);
                if outcome.is_ok() {
                    outcome = migrator.run(&mut conn).await.map_err(Error::from);
                }
                let _ = conn.close().await;
                outcome?;
            }
            Db::Sqlite(db) => {
                sqlite::carry_renamed_migrations(&mut *db.pool.acquire().await?).await?;
                migrator(Dialect::Sqlite).run(&db.pool).await?;
            }
        }
        Ok(())
    }

    pub async fn ping(&self) -> Result<()> {
        on_pool!(self,
            pool => postgres::session::ping(pool).await?,
            pool => sqlite::session::ping(pool).await?,
        );
        Ok(())
    }

    pub async fn close(&self) {
        match &self.db {
            Db::Postgres(pool) => {
                pool.close().await;
                if let Some(generic) = &self.generic_plans {
                    generic.close().await;
                }
            }
            Db::Sqlite(db) => {
                db.pool.close().await;
                if let Some(conn) = db.writer.lock().await.take() {
                    let _ = conn.close().await;
                }
            }
        }
    }

    /// A transaction that will write. SQLite takes the write lock at BEGIN,
    /// so two writers queue instead of one failing when it upgrades a read
    /// lock; it writes on the process's writing connection, so a write
    /// neither takes a connection from the pool nor gives it back (sqlx
    /// pings a connection it is given back: a round trip to its thread).
    pub async fn begin_write(&self) -> Result<WriteTx> {
        match &self.db {
            Db::Postgres(pool) => Ok(self.write_tx(TxOn::Postgres(pool.begin().await?))),
            Db::Sqlite(db) => {
                let mut conn =
                    OwnedMutexGuard::try_map(db.writer.clone().lock_owned().await, Option::as_mut)
                        .map_err(|_| sqlx::Error::PoolClosed)?;
                sqlite::session::begin_immediate(&mut conn).await?;
                Ok(self.write_tx(TxOn::Sqlite(Some(conn))))
            }
        }
    }

    fn write_tx(&self, on: TxOn) -> WriteTx {
        WriteTx {
            on,
            wrote_events: false,
            events_committed: self.events_committed.clone(),
        }
    }

    /// How many of this process's transactions that wrote webhook events
    /// have committed: the webhook dispatcher looks for due events when it
    /// moves, not after every job that ends with no webhook to call.
    pub fn events_committed(&self) -> u64 {
        self.events_committed.load(Ordering::Acquire)
    }

    /// SQLite: this process's writers take turns here, in order, instead
    /// of in SQLite's busy handler, which sleeps (1, 2, 5, 10 ms and more)
    /// between tries and so made most of a write's latency under load.
    /// Writers in other processes still meet the busy handler. A statement
    /// that writes outside a [`WriteTx`] holds the turn while it runs.
    /// Postgres locks rows, not the database: no turn.
    pub(crate) async fn write_turn(&self) -> Option<OwnedMutexGuard<Option<SqliteConnection>>> {
        match &self.db {
            Db::Postgres(_) => None,
            Db::Sqlite(db) => Some(db.writer.clone().lock_owned().await),
        }
    }

    /// What every final-status transaction does besides the status: one
    /// webhook event per matching webhook (the events outbox: none lost,
    /// none invented), and, on Postgres, a NOTIFY for other processes' long
    /// polls, delivered when the transaction commits.
    /// `traceparent` names the span of the write, whose trace the events'
    /// deliveries join (without one, the job's own trace).
    async fn announce_final(
        &self,
        tx: &mut WriteTx,
        job_id: &str,
        traceparent: Option<&str>,
    ) -> Result<()> {
        self.announce_final_all(tx, &[job_id.to_owned()], |_| traceparent)
            .await
    }

    /// [`Store::announce_final`] for several jobs: one NOTIFY carries all
    /// their ids, comma-separated.
    async fn announce_final_all<'t>(
        &self,
        tx: &mut WriteTx,
        job_ids: &[String],
        traceparent: impl Fn(&str) -> Option<&'t str>,
    ) -> Result<()> {
        if job_ids.is_empty() {
            return Ok(());
        }
        self.create_events(tx, job_ids, traceparent).await?;
        if let TxConnection::Postgres(conn) = tx.connection() {
            postgres::notify_finished(conn, job_ids).await?;
        }
        Ok(())
    }
}

fn migrator(dialect: Dialect) -> Migrator {
    let mut migrator = match dialect {
        Dialect::Postgres => sqlx::migrate!("../migrations/postgres"),
        Dialect::Sqlite => sqlx::migrate!("../migrations/sqlite"),
    };
    migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
    migrator
}

/// Copies the SQLite WAL back into the database five times a second,
/// without waiting for readers or writers (PASSIVE), until the pool
/// closes. An automatic checkpoint would run inside the commit that filled
/// the WAL and make that request wait for the copy and its fsync; a copy
/// once a second grew large enough to show in the submit tail.
async fn checkpoint_in_background(pool: SqlitePool) {
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if pool.is_closed() {
            return;
        }
        if let Err(error) = sqlite::session::checkpoint(&pool).await {
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

impl Store {
    /// Forwards the final statuses other processes commit to this
    /// process's long polls (and its dispatcher), until the task is
    /// dropped. On Postgres, from their NOTIFYs, on a session of its own;
    /// it reconnects after a failure, and the long polls' periodic
    /// re-check covers the gap. On SQLite every job ends in this process,
    /// whose signals already carry it: nothing to forward.
    pub async fn forward_finished_notifications(&self, signals: shared::notify::Signals) {
        if self.dialect() == Dialect::Postgres {
            forward_notifications(self.session_url(), signals).await;
        }
    }
}

async fn forward_notifications(url: &str, signals: shared::notify::Signals) {
    loop {
        match sqlx::postgres::PgListener::connect(url).await {
            Ok(mut listener) => match listener.listen(FINISHED_CHANNEL).await {
                Ok(()) => loop {
                    match listener.recv().await {
                        Ok(notification) => {
                            for job_id in notification.payload().split(',') {
                                signals.job_finished(job_id);
                            }
                            // Another process's end may have written events
                            // this process's dispatcher sends.
                            signals.events_changed();
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
