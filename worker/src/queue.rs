//! The queue: Redis when `REDIS_URL` is set, else the database (apalis's
//! SQLite or Postgres storage), or, for the embedded default, a channel
//! inside the process. A message is only `{"job_id": "..."}`.

use std::{sync::Arc, time::Duration};

use apalis::prelude::{MemorySink, MemoryStorage, MemoryStorageError, Task, TaskSink};
use apalis_postgres::PostgresStorage;
use apalis_redis::RedisStorage;
use apalis_sqlite::SqliteStorage;
use futures::{Sink, SinkExt, StreamExt, lock::Mutex as AsyncMutex};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use serde_json::{Value, json};
use shared::{
    settings::Settings,
    store::{Dialect, Store},
};

use crate::{Error, Result};

/// The payload type: decoded as any JSON value, so a malformed message
/// is dropped by our handler instead of killing the apalis worker at fetch.
pub type Message = Value;

#[derive(Clone)]
pub enum Queue {
    Redis {
        storage: Box<RedisStorage<Message, ConnectionManager>>,
        conn: ConnectionManager,
        client: redis::Client,
        /// Where a relay announces that it pushed (see [`Queue::forward_published`]).
        published_channel: String,
        /// A key that exists while Redis still holds what was published
        /// into it (see [`Queue::lost_messages`]).
        intact_key: String,
    },
    Sqlite(SqliteStorage<Message>),
    Postgres(PostgresStorage<Message>),
    Memory(MemoryQueue),
}

/// The embedded default's queue: the worker pool runs in the same process
/// as the relay, so a channel carries the job ids, with no second database
/// writing, locking and acknowledging every message. Nothing is lost with
/// it on a crash, because the outbox is the record: [`Queue::recover`]
/// makes every unclaimed job due again when the process starts.
#[derive(Clone)]
pub struct MemoryQueue {
    sender: tokio::sync::mpsc::Sender<Message>,
    receiver: Arc<tokio::sync::Mutex<tokio::sync::mpsc::Receiver<Message>>>,
}

/// Messages the in-process queue holds at most. No outbox row is marked
/// published without room reserved for it (see [`Queue::reserve_up_to`]), so a backlog
/// waits in the database, not in memory; this many last the workers a few
/// hundred milliseconds at full speed, longer than the relay's idle poll.
const MEMORY_QUEUE_CAPACITY: usize = 1024;

/// Places reserved in the in-process queue.
pub struct Room(Vec<tokio::sync::mpsc::OwnedPermit<Message>>);

impl Room {
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Sends one message per job id into the reserved places; places left
    /// over are given back.
    pub fn send(self, job_ids: &[String]) {
        for (permit, job_id) in self.0.into_iter().zip(job_ids) {
            permit.send(Queue::message(job_id));
        }
    }
}

type BoxedMemorySink =
    Box<dyn Sink<Task<Message>, Error = MemoryStorageError> + Send + Sync + Unpin>;

impl MemoryQueue {
    fn new() -> Self {
        let (sender, receiver) = tokio::sync::mpsc::channel(MEMORY_QUEUE_CAPACITY);
        Self {
            sender,
            receiver: Arc::new(tokio::sync::Mutex::new(receiver)),
        }
    }

    /// An apalis backend reading this channel. A restarted apalis worker
    /// gets a new one over the same channel, so no message is stranded in
    /// a dead worker's backend.
    pub fn storage(&self) -> MemoryStorage<Message> {
        // Messages come through `sender` (the relay, and the api right after
        // a submit's commit); apalis's own sink is never used.
        let unused_sink: BoxedMemorySink =
            Box::new(futures::sink::drain().sink_map_err(|never| match never {}));
        let messages = futures::stream::unfold(self.receiver.clone(), |receiver| async move {
            let message = receiver.lock().await.recv().await?;
            Some((Task::new(message), receiver))
        });
        MemoryStorage::new_with(
            MemorySink::new(Arc::new(AsyncMutex::new(unused_sink))),
            messages.boxed(),
        )
    }
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Queue::Redis { .. } => "Queue::Redis",
            Queue::Sqlite(_) => "Queue::Sqlite",
            Queue::Postgres(_) => "Queue::Postgres",
            Queue::Memory(_) => "Queue::Memory",
        })
    }
}

/// See [`Queue::forget_finished`].
static FORGET_FINISHED: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("lua/forget_finished.lua")));

/// apalis's heartbeat: its own orphan recovery re-delivers a dead worker's
/// messages after `HEARTBEAT * MISSED_HEARTBEATS`; our lease does the real
/// recovery, so this only needs to be well above any stall.
const HEARTBEAT: Duration = Duration::from_secs(10);
const MISSED_HEARTBEATS: usize = 6;

impl Queue {
    /// The queue of a process that runs its own worker pool: for the
    /// embedded default (SQLite, no Redis) a channel inside the process,
    /// otherwise the shared queue of [`Queue::connect`].
    pub async fn connect_in_process(settings: &Settings, store: &Store) -> Result<Self> {
        if settings.redis_url.is_none() && store.dialect() == Dialect::Sqlite {
            return Ok(Queue::Memory(MemoryQueue::new()));
        }
        Self::connect(settings, store).await
    }

    /// The name of the apalis queue the settings name: in Redis, the prefix
    /// of its keys; in apalis's tables, the `job_type` of its rows.
    pub fn apalis_queue_name(settings: &Settings) -> String {
        format!("{}:jobs", settings.queue_name)
    }

    /// Connects to the queue the settings name and prepares its tables.
    pub async fn connect(settings: &Settings, store: &Store) -> Result<Self> {
        let queue_name = Self::apalis_queue_name(settings);
        if let Some(url) = &settings.redis_url {
            let client = redis::Client::open(url.as_str())?;
            // redis-rs's 500 ms default response timeout turns one slow
            // answer into a fatal stream error in apalis (apalis-redis#76).
            let config = ConnectionManagerConfig::new()
                .set_response_timeout(Some(Duration::from_secs(10)))
                .set_connection_timeout(Some(Duration::from_secs(5)));
            let conn = client.get_connection_manager_with_config(config).await?;
            let storage = RedisStorage::new(conn.clone()).with_config(
                apalis_redis::Config::default()
                    .queue(&queue_name)
                    .batch_size(usize::from(settings.queue_prefetch))
                    .heartbeat_interval(HEARTBEAT)
                    .missed_heartbeats(MISSED_HEARTBEATS),
            );
            return Ok(Queue::Redis {
                storage: Box::new(storage),
                conn,
                client,
                published_channel: format!("{queue_name}:published"),
                intact_key: format!("{queue_name}:intact"),
            });
        }
        match store.dialect() {
            Dialect::Sqlite => {
                let url = &sqlite_queue_url(store.url());
                // apalis's setup turns `synchronous` OFF on the connection it
                // runs on: run it on a pool of its own and throw that away.
                let setup_pool = apalis_sqlite::SqlitePool::connect(url).await?;
                SqliteStorage::setup(&setup_pool)
                    .await
                    .map_err(Error::apalis)?;
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
                            .batch_size(usize::from(settings.queue_prefetch))
                            .heartbeat_interval(HEARTBEAT)
                            .missed_heartbeats(MISSED_HEARTBEATS),
                    ),
                ))
            }
            Dialect::Postgres => {
                let pool = sqlx::postgres::PgPoolOptions::new()
                    .max_connections(8)
                    .connect(store.url())
                    .await?;
                PostgresStorage::setup(&pool).await.map_err(Error::apalis)?;
                shared::store::index_finished_postgres_messages(&pool).await?;
                Ok(Queue::Postgres(
                    PostgresStorage::new(&pool).with_config(
                        apalis_postgres::Config::default()
                            .queue(&queue_name)
                            .batch_size(usize::from(settings.queue_prefetch))
                            .heartbeat_interval(HEARTBEAT)
                            .missed_heartbeats(MISSED_HEARTBEATS),
                    ),
                ))
            }
        }
    }

    /// The message that carries a job: its id, nothing else.
    fn message(job_id: &str) -> Message {
        json!({ "job_id": job_id })
    }

    /// Publishes one message per job id.
    pub async fn publish(&self, job_ids: &[String]) -> Result<()> {
        let messages: Vec<Message> = job_ids.iter().map(|id| Self::message(id)).collect();
        match self.clone() {
            Queue::Redis {
                mut storage,
                mut conn,
                published_channel,
                ..
            } => {
                storage.push_bulk(messages).await.map_err(Error::apalis)?;
                // Wakes idle workers in every process now, instead of at
                // their next poll.
                redis::cmd("PUBLISH")
                    .arg(&published_channel)
                    .arg(job_ids.len())
                    .query_async::<i64>(&mut conn)
                    .await?;
            }
            Queue::Sqlite(mut storage) => {
                storage.push_bulk(messages).await.map_err(Error::apalis)?
            }
            Queue::Postgres(mut storage) => {
                storage.push_bulk(messages).await.map_err(Error::apalis)?
            }
            Queue::Memory(queue) => {
                for message in messages {
                    queue
                        .sender
                        .send(message)
                        .await
                        .map_err(|_| Error::QueueClosed)?;
                }
            }
        }
        Ok(())
    }

    /// Room for `count` messages in the in-process queue, held until used
    /// or dropped: for publishing jobs right after the commit that makes
    /// them, with no relay round. `None` for the other queues, or when
    /// there is not that much room.
    pub fn reserve(&self, count: usize) -> Option<Room> {
        self.reserve_up_to(count).filter(|room| room.len() == count)
    }

    /// As much room as the in-process queue has, up to `most` messages;
    /// `None` for the other queues, which do not bound their backlog.
    /// Whoever leases outbox rows for this queue reserves first, so rows
    /// marked as published never wait for room.
    pub fn reserve_up_to(&self, most: usize) -> Option<Room> {
        let Queue::Memory(queue) = self else {
            return None;
        };
        let permits = (0..most)
            .map_while(|_| queue.sender.clone().try_reserve_owned().ok())
            .collect();
        Some(Room(permits))
    }

    pub fn is_redis(&self) -> bool {
        matches!(self, Queue::Redis { .. })
    }

    /// Wakes this process's idle workers (`signals.published()`) whenever
    /// a relay in any process pushed to the Redis queue; returns at once
    /// for the other queues (their relay runs in the workers' process).
    /// Reconnects after a failure; the poll interval covers the gap.
    pub async fn forward_published(&self, signals: shared::notify::Signals) {
        let Queue::Redis {
            client,
            published_channel,
            ..
        } = self
        else {
            return;
        };
        loop {
            match client.get_async_pubsub().await {
                Ok(mut pubsub) => match pubsub.subscribe(published_channel).await {
                    Ok(()) => {
                        let mut messages = pubsub.on_message();
                        while messages.next().await.is_some() {
                            signals.published();
                        }
                        tracing::warn!("lost the Redis subscription for queue wake-ups");
                    }
                    Err(error) => tracing::warn!(%error, "SUBSCRIBE failed"),
                },
                Err(error) => tracing::warn!(%error, "cannot connect the Redis subscriber"),
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// After a start, makes jobs whose messages only this queue could have
    /// held due for publishing again: an in-process queue starts empty, so
    /// messages a previous process published into it died with it.
    pub async fn recover(&self, store: &Store) -> Result<()> {
        if let Queue::Memory(_) = self {
            let due = store.make_outbox_due_now().await?;
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
        let Queue::Redis {
            conn, intact_key, ..
        } = self
        else {
            return Ok(false);
        };
        let exists: bool = redis::cmd("EXISTS")
            .arg(intact_key)
            .query_async(&mut conn.clone())
            .await?;
        Ok(!exists)
    }

    /// Records that everything unclaimed has been made due for publishing
    /// since the queue was last found to have lost its messages.
    pub async fn mark_intact(&self) -> Result<()> {
        if let Queue::Redis {
            conn, intact_key, ..
        } = self
        {
            redis::cmd("SET")
                .arg(intact_key)
                .arg(shared::time::now_ms())
                .query_async::<()>(&mut conn.clone())
                .await?;
        }
        Ok(())
    }

    /// Deletes what the queue keeps of up to `limit` finished messages
    /// (per kind of record); returns how many it looked at, so a caller
    /// knows whether more wait. apalis keeps every acknowledged message
    /// until someone deletes it: in Redis its payload, a metadata hash and
    /// an entry in the done set (`lua/forget_finished.lua`); in its SQLite
    /// and Postgres storages a row. Only messages whose handler has
    /// returned and been acknowledged are touched, never one waiting or in
    /// flight. The in-process queue keeps nothing.
    ///
    /// apalis's own `Vacuum` is not used: on Redis it reads the whole
    /// payload hash in one script (Redis does nothing else meanwhile), also
    /// deletes `Failed` messages still waiting for a retry, and leaves the
    /// done set growing; on SQLite it deletes every finished row in one
    /// statement and then rebuilds the file (`VACUUM`); Postgres has none.
    pub async fn forget_finished(&self, queue_name: &str, limit: usize) -> Result<u64> {
        let limit_sql = i64::try_from(limit).unwrap_or(i64::MAX);
        Ok(match self {
            Queue::Redis { storage, conn, .. } => {
                let config = storage.get_config();
                let (taken, _forgotten): (u64, u64) = FORGET_FINISHED
                    .key(config.done_jobs_set())
                    .key(config.dead_jobs_set())
                    .key(config.job_data_hash())
                    .key(config.job_meta_hash())
                    .arg(limit)
                    .invoke_async(&mut conn.clone())
                    .await?;
                taken
            }
            Queue::Sqlite(storage) => {
                shared::store::delete_finished_sqlite_messages(
                    storage.pool(),
                    queue_name,
                    limit_sql,
                )
                .await?
            }
            Queue::Postgres(storage) => {
                shared::store::delete_finished_postgres_messages(
                    storage.pool(),
                    queue_name,
                    limit_sql,
                )
                .await?
            }
            Queue::Memory(_) => 0,
        })
    }

    /// Whether the queue answers (for `/readyz`).
    pub async fn ping(&self) -> Result<()> {
        match self {
            Queue::Redis { conn, .. } => {
                let mut conn = conn.clone();
                redis::cmd("PING").query_async::<String>(&mut conn).await?;
            }
            Queue::Sqlite(storage) => {
                sqlx::query("SELECT 1").execute(storage.pool()).await?;
            }
            Queue::Postgres(storage) => {
                sqlx::query("SELECT 1").execute(storage.pool()).await?;
            }
            Queue::Memory(queue) if queue.sender.is_closed() => {
                return Err(Error::QueueClosed);
            }
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
