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
//! - `:intact`: present while Redis holds what was published into it; its
//!   value is the count of keys Redis had evicted when it was set, so an
//!   eviction since says it may not ([`crate::Queue::lost_messages`]).
//!
//! A consumer fetches no more messages than it has free slots, so nothing
//! it holds waits for a slot; what it holds is returned to the FIFOs within
//! [`crate::ALIVE`] of its process dying (`lua/reap.lua`), not after
//! `REPUBLISH_AFTER`.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use futures::lock::Mutex as AsyncMutex;
use redis::{
    AsyncConnectionConfig,
    aio::{ConnectionManagerConfig, MultiplexedConnection},
};
use store::QueuedJob;
use tracing::warn;

use crate::{Result, primary::Primary};

static PUSH: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("lua/push.lua")));
static FETCH: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("lua/fetch.lua")));
static REAP: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("lua/reap.lua")));

/// How long a consumer's heartbeat lives: what it holds goes back to the
/// queue this long after its process stops refreshing it. Long enough for
/// a stalled round trip or two, short against `REPUBLISH_AFTER`.
pub const ALIVE: Duration = Duration::from_secs(5);
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
        let queue = Self { conn, prefix };
        queue.warn_unless_noeviction().await;
        Ok(queue)
    }

    /// A Redis that evicts keys when full may drop queued messages (the
    /// lost-message sweep republishes their jobs, seconds later) and the
    /// keys that find them; one that refuses writes (`noeviction`) only
    /// delays pushes, which the outbox retries. Said once at start, when
    /// Redis tells its policy (`INFO memory`; some managed Redis hide it).
    async fn warn_unless_noeviction(&self) {
        let info: redis::RedisResult<String> = redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut self.conn.clone())
            .await;
        let policy = info.ok().and_then(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("maxmemory_policy:"))
                .map(|policy| policy.trim().to_owned())
        });
        match policy.as_deref() {
            Some("noeviction") | None => {}
            Some(policy) => tracing::warn!(
                policy,
                "Redis's maxmemory-policy is not noeviction: when Redis is full it evicts \
                 keys, queued messages among them, and their jobs wait for the lost-message \
                 sweep; set maxmemory-policy noeviction (docs/operations.md, Redis)"
            ),
        }
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

    /// The fetches of a consumer named `name`, a name no other consumer
    /// uses.
    pub(crate) fn fetcher(&self, name: String) -> RedisFetcher {
        RedisFetcher {
            queue: self.clone(),
            name,
            fetch_number: AtomicU64::new(1),
            blocking: AsyncMutex::new(None),
        }
    }
}

/// A consumer's fetches from Redis (`lua/fetch.lua`).
pub(crate) struct RedisFetcher {
    queue: RedisQueue,
    name: String,
    /// The number of the next fetch: the same until a fetch is answered,
    /// so a fetch whose answer was lost gets its messages when tried again.
    fetch_number: AtomicU64,
    /// The connection an idle consumer blocks on, and the primary's
    /// generation it was made under.
    blocking: AsyncMutex<Option<(u64, MultiplexedConnection)>>,
}

impl RedisFetcher {
    /// The consumer's heartbeat, which its messages are returned to the
    /// queue [`ALIVE`] after the last beat of (`lua/reap.lua`).
    pub(crate) fn heartbeat(&self) -> Heartbeat {
        Heartbeat {
            conn: self.queue.conn.clone(),
            key: self.queue.key(&format!("alive:{}", self.name)),
        }
    }

    /// One fetch of up to `slots` messages, carrying acknowledgements; the
    /// next one after a failure asks again under the same number.
    pub(crate) async fn fetch(&self, slots: usize, acks: &[String]) -> Result<Vec<Vec<u8>>> {
        let number = self.fetch_number.load(Ordering::Relaxed);
        let fetched: std::result::Result<Vec<Vec<u8>>, redis::RedisError> = FETCH
            .key(&self.queue.prefix)
            .arg(&self.name)
            .arg(slots)
            .arg(ALIVE.as_millis() as u64)
            .arg(number)
            .arg(acks)
            .invoke_async(&mut self.queue.conn.clone())
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
        let messages = fetched?;
        self.fetch_number.fetch_add(1, Ordering::Relaxed);
        Ok(messages)
    }

    pub(crate) async fn wait_for_push(&self) {
        let mut blocking = self.blocking.lock().await;
        let primary = &self.queue.conn;
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
            .arg(self.queue.key("wake"))
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

    pub(crate) async fn drop_unreadable(&self, raw: &[u8]) -> Result<()> {
        let key = self.queue.key(&format!("inflight:{}", self.name));
        redis::cmd("LREM")
            .arg(key)
            .arg(1)
            .arg(raw)
            .query_async::<i64>(&mut self.queue.conn.clone())
            .await?;
        Ok(())
    }

    pub(crate) async fn release(&self, acks: &[String]) -> Result<u64> {
        self.fetch(0, acks).await?;
        Ok(REAP
            .key(&self.queue.prefix)
            .arg(&self.name)
            .invoke_async(&mut self.queue.conn.clone())
            .await?)
    }
}

/// A consumer's `:alive:{consumer}` key, set again by each beat.
pub(crate) struct Heartbeat {
    conn: Primary,
    key: String,
}

impl Heartbeat {
    pub(crate) async fn beat(&self) -> Result<()> {
        redis::cmd("SET")
            .arg(&self.key)
            .arg(1)
            .arg("PX")
            .arg(ALIVE.as_millis() as u64)
            .query_async::<()>(&mut self.conn.clone())
            .await?;
        Ok(())
    }
}
