//! The queue both binaries share: Redis when `REDIS_URL` is set, else the
//! database (the database queue on Postgres, apalis's SQLite storage for
//! separate processes on SQLite), or, for the embedded default, a queue
//! inside the process. A message is
//! `{"job_id": "...", "rank_at": ..., "tenant_id": "..."}`; the Redis,
//! database and in-process queues hand messages out fairly between
//! tenants, and each tenant's in rank order (`docs/design.md`, Fair
//! scheduling and Priorities); apalis's SQLite storage in rank order. Also
//! here: the one path that hands committed jobs to the queue
//! ([`Handoff`]), and the outbox relay.

mod apalis_tables;
mod consumer;
mod database;
mod error;
mod memory;
mod primary;
mod redis;
mod relay;

use std::time::Duration;

use apalis::prelude::TaskSink;
use apalis_sqlite::SqliteStorage;
use serde_json::{Value, json};
use shared::{retry::Retry, settings::Settings};
use store::{Dialect, QueuedJob, Store};
use tracing::warn;

pub use consumer::{ALIVE, Consumer, Delivery};
pub use database::DatabaseQueue;
pub use error::{Error, Result};
pub use memory::{FAIR_SHARE, FairQueue, MEMORY_QUEUE_CAPACITY, MemoryQueue, Room};
pub use primary::{Primary, SENTINEL_SCHEME};
pub use redis::RedisQueue;
pub use relay::run_relay;

/// How [`Queue::recover`] waits for a database that is busy or down.
const RECOVER: Retry = Retry::doubling(Duration::from_secs(1), Duration::from_secs(16)).at_most(6);
/// The payload type: decoded as any JSON value, so a malformed message
/// is dropped by our handler instead of killing the apalis worker at fetch.
pub type Message = Value;

/// The message that carries a job: its id, its tenant for fair
/// scheduling, and its rank, so that a message returned to the queue
/// keeps its place.
pub fn message(job: &QueuedJob) -> Message {
    json!({ "job_id": job.job_id, "tenant_id": job.tenant_id, "rank_at": job.rank_at })
}

/// A task for apalis's SQLite storage, which fetches by `priority`, highest
/// first (then oldest first): the job's rank in seconds counted down from
/// `i32::MAX` (what apalis stores) at 2026-01-01, so an earlier rank is a
/// higher priority until 2094.
fn apalis_task(job: &QueuedJob) -> apalis::prelude::Task<Message> {
    const RANK_ORIGIN_S: i64 = 1_767_225_600; // 2026-01-01T00:00:00Z
    let since_origin = job.rank_at.div_euclid(1000) - RANK_ORIGIN_S;
    let priority = (i64::from(i32::MAX) - since_origin).clamp(0, i64::from(i32::MAX));
    apalis::prelude::TaskBuilder::new(message(job))
        .priority(usize::try_from(priority).unwrap_or(0))
        .build()
}

#[derive(Clone)]
pub enum Queue {
    Redis(RedisQueue),
    Sqlite(SqliteStorage<Message>),
    Postgres(DatabaseQueue),
    Memory(MemoryQueue),
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Queue::Redis(_) => "Queue::Redis",
            Queue::Sqlite(_) => "Queue::Sqlite",
            Queue::Postgres(_) => "Queue::Postgres",
            Queue::Memory(_) => "Queue::Memory",
        })
    }
}

/// Messages apalis's SQLite storage fetches at a time: one. apalis-core
/// 1.0 stops a worker's heartbeats while fetched messages wait in its
/// buffer for a free slot, and other workers then reclaim all its
/// messages, running ones included (`docs/design.md`, apalis item 2); a
/// worker that fetches one message at a time, when it has a slot, never
/// holds one waiting (test `worker/tests/prefetch_heartbeat.rs`).
pub const SQLITE_BATCH: usize = 1;

/// apalis's heartbeat (its SQL storages): its own orphan recovery
/// re-delivers a dead worker's messages after `HEARTBEAT *
/// MISSED_HEARTBEATS`; our lease does the real recovery, so this only needs
/// to be well above any stall.
const HEARTBEAT: Duration = Duration::from_secs(10);
const MISSED_HEARTBEATS: usize = 6;

impl Queue {
    /// The queue of a process that runs its own worker pool: for the
    /// embedded default (SQLite, no Redis) a queue inside the process,
    /// otherwise the shared queue of [`Queue::connect`].
    pub async fn connect_in_process(settings: &Settings, store: &Store) -> Result<Self> {
        if settings.redis_url.is_none() && store.dialect() == Dialect::Sqlite {
            return Ok(Queue::Memory(MemoryQueue::default()));
        }
        Self::connect(settings, store).await
    }

    /// The name of the queue the settings name: in Redis, the prefix of its
    /// keys; in apalis's tables, the `job_type` of its rows.
    pub fn apalis_queue_name(settings: &Settings) -> String {
        format!("{}:jobs", settings.queue_name)
    }

    /// Connects to the queue the settings name and prepares its tables.
    pub async fn connect(settings: &Settings, store: &Store) -> Result<Self> {
        let queue_name = Self::apalis_queue_name(settings);
        if let Some(url) = &settings.redis_url {
            let queue = RedisQueue::connect(url, queue_name).await?;
            return Ok(Queue::Redis(queue));
        }
        match store.dialect() {
            Dialect::Sqlite => {
                let url = &sqlite_queue_url(store.url());
                // apalis's setup turns `synchronous` OFF on the connection it
                // runs on: run it on a pool of its own and throw that away.
                let setup_pool = apalis_sqlite::SqlitePool::connect(url).await?;
                SqliteStorage::setup(&setup_pool).await?;
                setup_pool.close().await;
                let options: apalis_sqlite::SqliteConnectOptions = url.parse()?;
                let options = options
                    .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                    .synchronous(sqlx::sqlite::SqliteSynchronous::Normal)
                    .busy_timeout(Duration::from_secs(10));
                let pool = apalis_sqlite::SqlitePoolOptions::new()
                    .max_connections(4)
                    .connect_with(options)
                    .await?;
                Ok(Queue::Sqlite(
                    SqliteStorage::new(&pool).with_config(
                        apalis_sqlite::Config::default()
                            .queue(&queue_name)
                            .batch_size(SQLITE_BATCH)
                            .heartbeat_interval(HEARTBEAT)
                            .missed_heartbeats(MISSED_HEARTBEATS),
                    ),
                ))
            }
            Dialect::Postgres => Ok(Queue::Postgres(DatabaseQueue::new(
                store.clone(),
                queue_name,
            )?)),
        }
    }

    /// Publishes one message per job. The in-process queue takes them
    /// whatever its room: callers that can wait use a [`Handoff`] instead.
    pub async fn publish(&self, jobs: &[QueuedJob]) -> Result<()> {
        let tasks = || futures::stream::iter(jobs.iter().map(apalis_task).collect::<Vec<_>>());
        match self.clone() {
            Queue::Redis(queue) => queue.push(jobs).await?,
            Queue::Sqlite(mut storage) => storage.push_all(tasks()).await?,
            Queue::Postgres(queue) => queue.push(jobs).await?,
            Queue::Memory(queue) => queue.push(jobs),
        }
        Ok(())
    }

    /// How jobs of these tenants, about to be committed, reach the queue:
    /// pushed right after the commit when the queue takes them without
    /// waiting (Redis; the in-process queue when it has room for each, see
    /// [`MemoryQueue::reserve_for`]), else by the relay.
    pub fn handoff_for<'a>(&self, tenants: impl IntoIterator<Item = &'a str>) -> Handoff {
        match self {
            Queue::Redis(_) => Handoff::Push,
            Queue::Memory(queue) => queue
                .reserve_for(tenants)
                .map_or(Handoff::Relay, Handoff::Room),
            Queue::Sqlite(_) | Queue::Postgres(_) => Handoff::Relay,
        }
    }

    /// The relay's hand-off for up to `most` outbox rows, and how many it
    /// may lease: the in-process queue leases no more rows than it has room
    /// for, so a backlog stays in the outbox rather than in memory (and is
    /// not republished meanwhile).
    pub fn handoff_up_to(&self, most: usize) -> (Handoff, usize) {
        match self {
            Queue::Memory(queue) => {
                let room = queue.reserve_up_to(most);
                let len = room.len();
                (Handoff::Room(room), len)
            }
            _ => (Handoff::Push, most),
        }
    }

    /// Whether a message published into this queue can be lost while the
    /// job's outbox row says it was published: only Redis, whose pushes
    /// follow the commit that makes a job (an api killed in between, or a
    /// commit whose answer was lost), and which can lose writes in a crash
    /// or a failover. The database's queues are written in the relay's own
    /// transaction, and the in-process queue is recovered at start.
    pub fn can_lose_published(&self) -> bool {
        matches!(self, Queue::Redis(_))
    }

    /// The database queue's name: its messages can be written in the
    /// statement that makes their jobs (`store::Publishing::WithTheJob`).
    pub fn written_with_jobs(&self) -> Option<&str> {
        match self {
            Queue::Postgres(queue) => Some(queue.name()),
            _ => None,
        }
    }

    /// Those of `jobs` whose message this queue does not hold, waiting or
    /// in flight: published, unclaimed, and lost. Only Redis is asked
    /// ([`Queue::can_lose_published`]).
    pub async fn not_held(&self, jobs: Vec<QueuedJob>) -> Result<Vec<QueuedJob>> {
        let Queue::Redis(queue) = self else {
            return Ok(Vec::new());
        };
        let ids: Vec<&str> = jobs.iter().map(|job| job.job_id.as_str()).collect();
        let held = queue.holds(&ids).await?;
        Ok(jobs
            .into_iter()
            .zip(held)
            .filter_map(|(job, held)| (!held).then_some(job))
            .collect())
    }

    /// Returns the messages of consumers that died (see
    /// [`RedisQueue::return_abandoned`], [`DatabaseQueue::return_abandoned`]);
    /// nothing to do for the other queues, whose worker pools recover
    /// their own.
    pub async fn return_abandoned(&self) -> Result<u64> {
        match self {
            Queue::Redis(queue) => queue.return_abandoned().await,
            Queue::Postgres(queue) => queue.return_abandoned().await,
            _ => Ok(0),
        }
    }

    /// A consumer of `slots` slots named `name`, for the queues that feed
    /// apalis through one (Redis and the database queue); `None` for the
    /// others.
    pub fn consumer(&self, name: String, slots: usize) -> Option<Consumer> {
        match self {
            Queue::Redis(queue) => Some(queue.consumer(name, slots)),
            Queue::Postgres(queue) => Some(queue.consumer(name, slots)),
            _ => None,
        }
    }

    /// After a start, makes jobs whose messages only this queue could have
    /// held due for publishing again: an in-process queue starts empty, so
    /// messages a previous process published into it died with it; and on
    /// Postgres, messages left in apalis's queue table by an earlier
    /// version are read by no one.
    ///
    /// A database that is busy or briefly down is waited for (a long
    /// write, such as a large ledger import, can hold SQLite's one writer
    /// past its busy timeout), for about a minute and a half at most, so a
    /// pool does not fail to start on a transient outage.
    pub async fn recover(&self, store: &Store) -> Result<()> {
        let lost_with = match self {
            Queue::Memory(_) => true,
            Queue::Postgres(queue) => apalis_tables::left_unrun_postgres_messages(queue).await?,
            _ => false,
        };
        if lost_with {
            let due = RECOVER
                .run(
                    |_| store.make_outbox_due_now(),
                    |error, _| {
                        let again = error.is_unavailable();
                        if again {
                            tracing::warn!(%error, "the database is busy or down; recovering the queue again shortly");
                        }
                        again
                    },
                )
                .await?;
            if due > 0 {
                tracing::info!(due, "republishing unclaimed jobs of an earlier process");
            }
        }
        Ok(())
    }

    /// Whether the queue may have lost messages since [`Queue::mark_intact`]
    /// last ran: Redis restarted without persistence, was flushed, or
    /// failed over to a replica that had not caught up. Its marker key is
    /// then gone with the messages, and every job published but not yet
    /// claimed must be published again now rather than after
    /// `REPUBLISH_AFTER`. Always `false` for the other queues: the
    /// database's queue tables are as durable as the jobs themselves, and
    /// the in-process queue is recovered at start ([`Queue::recover`]).
    pub async fn lost_messages(&self) -> Result<bool> {
        let Queue::Redis(queue) = self else {
            return Ok(false);
        };
        let exists: bool = ::redis::cmd("EXISTS")
            .arg(queue.key("intact"))
            .query_async(&mut queue.connection())
            .await?;
        Ok(!exists)
    }

    /// Records that everything unclaimed has been made due for publishing
    /// since the queue was last found to have lost its messages.
    pub async fn mark_intact(&self) -> Result<()> {
        if let Queue::Redis(queue) = self {
            ::redis::cmd("SET")
                .arg(queue.key("intact"))
                .arg(shared::time::now_ms())
                .query_async::<()>(&mut queue.connection())
                .await?;
        }
        Ok(())
    }

    /// Deletes what the queue keeps of up to `limit` finished messages;
    /// returns how many it looked at, so a caller knows whether more wait.
    /// apalis's SQLite storage keeps a row per acknowledged message until
    /// someone deletes it; only rows whose handler has returned and been
    /// acknowledged are touched, never one waiting or in flight. The Redis,
    /// database and in-process queues keep nothing of a message once it is
    /// acknowledged; on Postgres, this deletes what apalis's storage of an
    /// earlier version left (after [`Queue::recover`] republished its jobs).
    ///
    /// apalis's own `Vacuum` is not used: on SQLite it deletes every
    /// finished row in one statement and then rebuilds the file (`VACUUM`);
    /// Postgres has none.
    pub async fn forget_finished(&self, queue_name: &str, limit: usize) -> Result<u64> {
        let limit_sql = i64::try_from(limit).unwrap_or(i64::MAX);
        Ok(match self {
            Queue::Redis(_) | Queue::Memory(_) => 0,
            Queue::Sqlite(storage) => {
                apalis_tables::delete_finished_sqlite_messages(
                    storage.pool(),
                    queue_name,
                    limit_sql,
                )
                .await?
            }
            Queue::Postgres(queue) => {
                apalis_tables::delete_left_postgres_messages(queue, limit_sql).await?
            }
        })
    }

    /// Whether the queue answers (for `/readyz`).
    pub async fn ping(&self) -> Result<()> {
        match self {
            Queue::Redis(queue) => {
                ::redis::cmd("PING")
                    .query_async::<String>(&mut queue.connection())
                    .await?;
            }
            Queue::Sqlite(storage) => {
                sqlx::query("SELECT 1").execute(storage.pool()).await?;
            }
            Queue::Postgres(queue) => queue.ping().await?,
            Queue::Memory(_) => {}
        }
        Ok(())
    }
}

/// The embedded queue lives in a file of its own beside the database
/// (`data/jobs.db` -> `data/jobs.queue.db`): apalis's `Jobs` table would
/// otherwise collide with ours (SQLite names ignore case), and two files
/// have two write locks, so queue traffic does not wait on job writes.
fn sqlite_queue_url(url: &str) -> String {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    let stem = path.strip_suffix(".db").unwrap_or(path);
    if query.is_empty() {
        format!("{stem}.queue.db?mode=rwc")
    } else {
        format!("{stem}.queue.db?{query}")
    }
}

/// How jobs reach the queue once the transaction that makes them due
/// commits: the one path for the api's submits and the relay's leased
/// outbox rows. Their outbox rows are written (or leased) as published when
/// [`Handoff::publishes`] says so, and published again only if not claimed
/// in time, like any other.
pub enum Handoff {
    /// Room reserved in the in-process queue.
    Room(Room),
    /// A push to a queue that never makes the caller wait for room.
    Push,
    /// Left to the relay: the rows stay due.
    Relay,
}

impl Handoff {
    /// Whether the caller publishes the jobs itself right after its commit.
    pub fn publishes(&self) -> bool {
        !matches!(self, Handoff::Relay)
    }

    /// Hands jobs to the queue; answers whether the queue has them.
    pub async fn send(self, queue: &Queue, jobs: &[QueuedJob]) -> Result<bool> {
        if jobs.is_empty() {
            return Ok(true);
        }
        match self {
            Handoff::Room(room) => {
                room.send(jobs);
                Ok(true)
            }
            Handoff::Relay => Ok(false),
            Handoff::Push => queue.publish(jobs).await.map(|()| true),
        }
    }

    /// Publishes committed jobs. A push that fails hands the jobs back to
    /// the relay, due in a second; returns whether the queue has them.
    pub async fn publish(self, queue: &Queue, store: &Store, jobs: &[QueuedJob]) -> bool {
        match self.send(queue, jobs).await {
            Ok(published) => published,
            Err(error) => {
                warn!(%error, count = jobs.len(), "publishing to the queue failed; the relay will retry");
                let job_ids: Vec<String> = jobs.iter().map(|job| job.job_id.clone()).collect();
                let soon = shared::time::now_ms() + 1_000;
                if let Err(error) = store.retry_outbox_soon(&job_ids, soon).await {
                    warn!(%error, "could not hand the jobs to the relay; republished later");
                }
                false
            }
        }
    }
}
