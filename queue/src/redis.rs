//! The production queue: Redis lists, fair between tenants, fed to apalis
//! as a stream so apalis still runs the worker pool.
//!
//! Keys, all under the queue's prefix `{QUEUE_NAME}:jobs`
//! (`docs/operations.md` lists their bounds):
//! - `:queued:{tenant}`: a tenant's waiting messages, a sorted set scored
//!   by rank (`shared::model::Priority::rank_at`), first first;
//!   `:fifo:{tenant}`: a list of them, oldest first, as versions before
//!   ranks pushed them (still fetched, first, so an upgrade loses none);
//! - `:ring`: the tenants whose FIFO is not empty, each once, in turn;
//! - `:wake`: a few tokens an idle consumer blocks on (`BLPOP`);
//! - `:inflight:{consumer}`: messages a consumer fetched and has not
//!   finished; `:alive:{consumer}`: its heartbeat, with a time to live;
//!   `:consumers`: the consumers that may hold messages;
//!   `:fetched:{consumer}`: its last fetch's number and messages, so a
//!   fetch whose answer was lost is answered again (`lua/fetch.lua`);
//! - `:held`: for each job, how many of its messages the queue holds
//!   (waiting or in flight), so the relay finds published jobs whose
//!   message was lost by asking ([`RedisQueue::holds`]);
//! - `:intact`: present while Redis holds what was published into it
//!   ([`crate::Queue::lost_messages`]).
//!
//! A consumer fetches no more messages than it has free slots, so nothing
//! it holds waits for a slot; what it holds is returned to the FIFOs within
//! [`ALIVE`] of its process dying (`lua/reap.lua`), not after
//! `REPUBLISH_AFTER`.

use std::{
    collections::VecDeque,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use apalis::prelude::{MemorySink, MemoryStorage, MemoryStorageError, Task};
use futures::{Sink, SinkExt, StreamExt, lock::Mutex as AsyncMutex};
use redis::{
    AsyncConnectionConfig,
    aio::{ConnectionManagerConfig, MultiplexedConnection},
};
use store::QueuedJob;
use tokio::sync::Semaphore;
use tracing::warn;

use crate::{Message, Result, primary::Primary};

static PUSH: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("lua/push.lua")));
static FETCH: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("lua/fetch.lua")));
static REAP: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("lua/reap.lua")));

/// How long a consumer's heartbeat lives: its in-flight messages go back to
/// the queue this long after its process stops refreshing it. Long enough
/// for a stalled Redis round trip or two, short against `REPUBLISH_AFTER`.
pub const ALIVE: Duration = Duration::from_secs(5);
/// How often a consumer refreshes its heartbeat.
const HEARTBEAT: Duration = Duration::from_secs(1);
/// How long an idle consumer blocks for a wake-up before it looks again
/// on its own (a wake-up lost with a reconnect costs no more than this).
const BLOCK: Duration = Duration::from_secs(1);

#[derive(Clone)]
pub struct RedisQueue {
    conn: Primary,
    prefix: String,
}

impl RedisQueue {
    /// Connects to the server `url` names, or to the primary its Sentinels
    /// name (`redis+sentinel://`, see [`Primary`]).
    pub async fn connect(url: &str, prefix: String) -> Result<Self> {
        // redis-rs's 500 ms default response timeout would turn one slow
        // answer into a failed fetch.
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(Duration::from_secs(10)))
            .set_connection_timeout(Some(Duration::from_secs(5)));
        let conn = Primary::connect(url, config).await?;
        Ok(Self { conn, prefix })
    }

    pub fn key(&self, name: &str) -> String {
        format!("{}:{name}", self.prefix)
    }

    pub fn connection(&self) -> Primary {
        self.conn.clone()
    }

    /// Pushes one message per job into its tenant's queue at the job's
    /// rank, in one round trip, and wakes idle consumers.
    pub async fn push(&self, jobs: &[QueuedJob]) -> Result<()> {
        if jobs.is_empty() {
            return Ok(());
        }
        let mut invocation = PUSH.key(&self.prefix);
        for job in jobs {
            invocation
                .arg(&job.tenant_id)
                .arg(&job.job_id)
                .arg(job.rank_at)
                .arg(crate::message(job).to_string());
        }
        let _: u64 = invocation.invoke_async(&mut self.conn.clone()).await?;
        Ok(())
    }

    /// Whether the queue holds a message for each of these jobs, waiting or
    /// in flight (counted in `:held` by the push and fetch scripts).
    pub async fn holds(&self, job_ids: &[&str]) -> Result<Vec<bool>> {
        if job_ids.is_empty() {
            return Ok(Vec::new());
        }
        let counts: Vec<Option<i64>> = redis::cmd("HMGET")
            .arg(self.key("held"))
            .arg(job_ids)
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(counts
            .into_iter()
            .map(|count| count.is_some_and(|count| count > 0))
            .collect())
    }

    /// Returns the in-flight messages of consumers whose heartbeat expired;
    /// returns how many.
    pub async fn return_abandoned(&self) -> Result<u64> {
        Ok(REAP
            .key(&self.prefix)
            .arg("")
            .invoke_async(&mut self.conn.clone())
            .await?)
    }

    /// A consumer with `slots` slots, under a name no other consumer uses.
    /// Its heartbeat runs until it is dropped.
    pub fn consumer(&self, name: String, slots: usize) -> Consumer {
        let heartbeat = {
            let (queue, name) = (self.clone(), name.clone());
            tokio::spawn(async move {
                let key = queue.key(&format!("alive:{name}"));
                loop {
                    let refreshed: Result<(), _> = redis::cmd("SET")
                        .arg(&key)
                        .arg(1)
                        .arg("PX")
                        .arg(ALIVE.as_millis() as u64)
                        .query_async(&mut queue.conn.clone())
                        .await;
                    if let Err(error) = refreshed {
                        warn!(%error, "refreshing the queue consumer's heartbeat failed");
                    }
                    tokio::time::sleep(HEARTBEAT).await;
                }
            })
        };
        Consumer(Arc::new(ConsumerInner {
            queue: self.clone(),
            name,
            free: Arc::new(Semaphore::new(slots)),
            acks: Mutex::new(Vec::new()),
            fetch_number: AtomicU64::new(1),
            heartbeat,
        }))
    }
}

struct ConsumerInner {
    queue: RedisQueue,
    name: String,
    /// Slots not holding a message: a fetch takes at most this many.
    free: Arc<Semaphore>,
    /// Messages whose handlers returned, acknowledged with the next fetch
    /// (one round trip for both: a finished handler frees the slot that
    /// fetch fills) or, for a consumer that stops, by its release.
    acks: Mutex<Vec<String>>,
    /// The number of the next fetch: the same until a fetch is answered,
    /// so a fetch whose answer was lost gets its messages when tried again.
    fetch_number: AtomicU64,
    heartbeat: tokio::task::JoinHandle<()>,
}

impl Drop for ConsumerInner {
    fn drop(&mut self) {
        self.heartbeat.abort();
    }
}

/// One worker's view of the queue: fetches into its in-flight list, at
/// most as many messages as it has free slots.
#[derive(Clone)]
pub struct Consumer(Arc<ConsumerInner>);

type BoxedMemorySink =
    Box<dyn Sink<Task<Message>, Error = MemoryStorageError> + Send + Sync + Unpin>;

impl Consumer {
    /// An apalis backend fetching for this consumer: apalis runs the
    /// handlers; each handler's [`Delivery`] frees its slot.
    pub fn storage(&self) -> MemoryStorage<Message> {
        let unused_sink: BoxedMemorySink =
            Box::new(futures::sink::drain().sink_map_err(|never| match never {}));
        let start = (self.clone(), VecDeque::new(), None);
        let messages =
            futures::stream::unfold(start, |(consumer, mut fetched, mut blocking)| async move {
                loop {
                    if let Some(message) = fetched.pop_front() {
                        return Some((Task::new(message), (consumer, fetched, blocking)));
                    }
                    fetched = consumer.fetch(&mut blocking).await;
                }
            });
        MemoryStorage::new_with(
            MemorySink::new(Arc::new(AsyncMutex::new(unused_sink))),
            messages.boxed(),
        )
    }

    /// Waits for a free slot, then fetches as many messages as there are
    /// free slots (at least one), blocking on the wake-up list while the
    /// queue is empty.
    async fn fetch(
        &self,
        blocking: &mut Option<(u64, MultiplexedConnection)>,
    ) -> VecDeque<Message> {
        let Ok(first) = self.0.free.clone().acquire_owned().await else {
            return VecDeque::new();
        };
        first.forget();
        let mut slots = 1;
        while let Ok(more) = self.0.free.try_acquire() {
            more.forget();
            slots += 1;
        }
        loop {
            match self.fetch_and_acknowledge(slots).await {
                Ok(raw) if !raw.is_empty() => {
                    self.0.free.add_permits(slots - raw.len());
                    let mut messages = VecDeque::with_capacity(raw.len());
                    for raw in raw {
                        messages.push_back(self.decode(raw).await);
                    }
                    return messages;
                }
                Ok(_) => self.wait_for_push(blocking).await,
                Err(error) => {
                    warn!(%error, "fetching from the Redis queue failed; trying again");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }

    /// One fetch of up to `slots` messages, carrying the acknowledgements
    /// waiting since the last; they wait for the next one if it fails, and
    /// the next one asks again under the same number.
    async fn fetch_and_acknowledge(&self, slots: usize) -> Result<Vec<Vec<u8>>> {
        let acks = std::mem::take(&mut *self.lock_acks());
        let number = self.0.fetch_number.load(Ordering::Relaxed);
        let fetched: std::result::Result<Vec<Vec<u8>>, redis::RedisError> = FETCH
            .key(&self.0.queue.prefix)
            .arg(&self.0.name)
            .arg(slots)
            .arg(ALIVE.as_millis() as u64)
            .arg(number)
            .arg(&acks)
            .invoke_async(&mut self.0.queue.conn.clone())
            .await;
        // The window this number closes: the script ran, its answer never came.
        let fetched = if shared::failpoints::armed("queue::fetch_answer_lost") {
            Err(redis::RedisError::from((
                redis::ErrorKind::Io,
                "failpoint: the fetch's answer was lost",
            )))
        } else {
            fetched
        };
        match fetched {
            Ok(messages) => {
                self.0.fetch_number.fetch_add(1, Ordering::Relaxed);
                Ok(messages)
            }
            Err(error) => {
                self.lock_acks().extend(acks);
                Err(error.into())
            }
        }
    }

    fn lock_acks(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.0
            .acks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A message as JSON. One that does not read back as the same bytes
    /// (not JSON, or not as we write it) could not be acknowledged by its
    /// value later: it is acknowledged now, and its handler drops it.
    async fn decode(&self, raw: Vec<u8>) -> Message {
        let value: Option<Message> = serde_json::from_slice(&raw).ok();
        if let Some(value) = value
            && value.to_string().as_bytes() == raw.as_slice()
        {
            return value;
        }
        if let Err(error) = self.acknowledge_raw(&raw).await {
            warn!(%error, "could not drop an unreadable queue message");
        }
        Message::String(String::from_utf8_lossy(&raw).into_owned())
    }

    async fn wait_for_push(&self, blocking: &mut Option<(u64, MultiplexedConnection)>) {
        let primary = &self.0.queue.conn;
        // One made before a failover may be to a replica now, where no
        // push ever lands.
        if blocking
            .as_ref()
            .is_some_and(|(generation, _)| *generation != primary.generation())
        {
            *blocking = None;
        }
        if blocking.is_none() {
            // A connection of its own: a blocked command holds up every
            // other command on its connection.
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(Duration::from_secs(5)))
                .set_response_timeout(Some(BLOCK + Duration::from_secs(5)));
            match primary.dedicated(&config).await {
                Ok(conn) => *blocking = Some(conn),
                Err(error) => {
                    warn!(%error, "cannot connect to Redis to wait for messages");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    return;
                }
            }
        }
        let Some((generation, conn)) = blocking.as_mut() else {
            return;
        };
        let woken: Result<Option<(String, String)>, _> = redis::cmd("BLPOP")
            .arg(self.0.queue.key("wake"))
            .arg(BLOCK.as_secs_f64())
            .query_async(conn)
            .await;
        if let Err(error) = woken {
            warn!(%error, "waiting for queue messages failed; reconnecting");
            primary.failed(*generation, &error).await;
            *blocking = None;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    async fn acknowledge_raw(&self, raw: &[u8]) -> Result<()> {
        let key = self.0.queue.key(&format!("inflight:{}", self.0.name));
        redis::cmd("LREM")
            .arg(key)
            .arg(1)
            .arg(raw)
            .query_async::<i64>(&mut self.0.queue.conn.clone())
            .await?;
        Ok(())
    }

    /// A handler's hold on its message and slot (see [`Delivery`]).
    pub fn delivery(&self, message: &Message) -> Delivery {
        Delivery {
            consumer: self.clone(),
            raw: message.to_string(),
            finished: AtomicBool::new(false),
        }
    }

    /// Returns whatever this consumer still holds to the queue and stops
    /// its heartbeat: for a consumer that stops (its handlers are done, or
    /// were abandoned at the end of the shutdown grace).
    pub async fn release(&self) -> Result<u64> {
        self.0.heartbeat.abort();
        // Finished messages must not go back with the unfinished ones.
        self.fetch_and_acknowledge(0).await?;
        Ok(REAP
            .key(&self.0.queue.prefix)
            .arg(&self.0.name)
            .invoke_async(&mut self.0.queue.conn.clone())
            .await?)
    }
}

/// A message a handler holds. When the handler finished with it, dropping
/// this acknowledges the message (with the consumer's next fetch); dropped
/// unfinished (the handler was
/// abandoned), the message stays in flight until its consumer is released
/// or reaped, and then runs again. Either way its slot is free.
pub struct Delivery {
    consumer: Consumer,
    raw: String,
    finished: AtomicBool,
}

impl Delivery {
    pub fn finished(&self) {
        self.finished.store(true, Ordering::Relaxed);
    }
}

impl Drop for Delivery {
    fn drop(&mut self) {
        if self.finished.load(Ordering::Relaxed) {
            let raw = std::mem::take(&mut self.raw);
            self.consumer.lock_acks().push(raw);
        }
        // After the acknowledgement is queued, so the fetch this slot
        // wakes carries it.
        self.consumer.0.free.add_permits(1);
    }
}
