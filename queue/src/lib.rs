//! The queue both binaries share: Redis when `REDIS_URL` is set, else the
//! job rows themselves (workers claim due jobs from the database, Postgres
//! or SQLite, the embedded default included). A Redis message is
//! `{"job_id": "...", "rank_at": ..., "tenant_id": "..."}`; both queues
//! hand jobs out fairly between tenants, and each tenant's in rank order
//! (`docs/design.md`, Fair scheduling and Priorities). Also here: the one
//! path that hands committed jobs to the queue ([`Queue::publish_committed`]), and the
//! outbox relay.

mod consumer;
mod error;
mod job_rows;
mod primary;
mod redis;
mod relay;

use serde_json::{Value, json};
use shared::settings::Settings;
use store::{QueuedJob, Store};
use tracing::warn;

pub use consumer::{Consumer, Delivery};
pub use error::{Error, Result};
pub use job_rows::{JobRowQueue, WorkWaiter};
pub use primary::{Primary, SENTINEL_SCHEME};
pub use redis::{ALIVE, RedisQueue};
pub use relay::run_relay;

/// The payload type: decoded as any JSON value, so a malformed message
/// is dropped by our handler instead of killing the apalis worker at fetch.
pub type Message = Value;

/// The message that carries a job: its id, its tenant for fair
/// scheduling, and its rank, so that a message returned to the queue
/// keeps its place.
pub fn message(job: &QueuedJob) -> Message {
    json!({ "job_id": job.job_id, "tenant_id": job.tenant_id, "rank_at": job.rank_at })
}

#[derive(Clone)]
pub enum Queue {
    Redis(RedisQueue),
    /// The job rows are the queue (Postgres without Redis, and SQLite,
    /// embedded or with separate worker processes).
    JobRows(JobRowQueue),
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Queue::Redis(_) => "Queue::Redis",
            Queue::JobRows(_) => "Queue::JobRows",
        })
    }
}

impl Queue {
    /// The name of the queue the settings name: in Redis, the prefix of its
    /// keys; where the job rows are the queue, the payload of its wake.
    pub fn apalis_queue_name(settings: &Settings) -> String {
        format!("{}:jobs", settings.queue_name)
    }

    /// Connects to the queue the settings name, and records in the
    /// database which queue its jobs reach (`Store::record_queue`).
    pub async fn connect(settings: &Settings, store: &Store) -> Result<Self> {
        let queue_name = Self::apalis_queue_name(settings);
        store.record_queue(settings.redis_url.is_none()).await?;
        if let Some(url) = &settings.redis_url {
            let queue = RedisQueue::connect(url, queue_name).await?;
            return Ok(Queue::Redis(queue));
        }
        Ok(Queue::JobRows(JobRowQueue::new(store.clone(), queue_name)))
    }

    /// Whether an outbox relay has work: only where Redis is the queue,
    /// which the outbox bridges to the database.
    pub fn needs_relay(&self) -> bool {
        matches!(self, Queue::Redis(_))
    }

    /// Publishes one message per job (Redis), or wakes the workers that
    /// claim from the job rows.
    pub async fn publish(&self, jobs: &[QueuedJob]) -> Result<()> {
        match self {
            Queue::Redis(queue) => queue.push(jobs).await?,
            Queue::JobRows(queue) => queue.push(jobs).await?,
        }
        Ok(())
    }

    /// Wakes this process's workers that claim from the job rows, after a
    /// commit that made jobs due (other processes' are woken by the
    /// commit's NOTIFY, or look on their own).
    pub fn wake_here(&self) {
        if let Queue::JobRows(queue) = self {
            queue.wake_here();
        }
    }

    /// Whether a message published into this queue can be lost while the
    /// job's outbox row says it was published: only Redis, whose pushes
    /// follow the commit that makes a job (an api killed in between, or a
    /// commit whose answer was lost), and which can lose writes in a crash
    /// or a failover. Where the job rows are the queue, nothing is
    /// published that could be lost.
    pub fn can_lose_published(&self) -> bool {
        matches!(self, Queue::Redis(_))
    }

    /// The name of the queue whose job rows are the queue: its jobs are
    /// claimable, and its workers woken, by the statement that makes them
    /// (`store::Publishing::WithTheJob`).
    pub fn written_with_jobs(&self) -> Option<&str> {
        match self {
            Queue::JobRows(queue) => Some(queue.name()),
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
    /// [`RedisQueue::return_abandoned`]); nothing to do for the other
    /// queues, whose worker pools recover their own (or whose jobs' leases
    /// are their only liveness).
    pub async fn return_abandoned(&self) -> Result<u64> {
        match self {
            Queue::Redis(queue) => queue.return_abandoned().await,
            _ => Ok(0),
        }
    }

    /// A consumer of `slots` slots named `name`, for the queue that feeds
    /// apalis through one (Redis); `None` for the others.
    pub fn consumer(&self, name: String, slots: usize) -> Option<Consumer> {
        match self {
            Queue::Redis(queue) => Some(Consumer::new(queue.fetcher(name), slots)),
            _ => None,
        }
    }

    /// Whether the queue may have lost messages since [`Queue::mark_intact`]
    /// last ran: Redis restarted without persistence, was flushed, or
    /// failed over to a replica that had not caught up (its marker key is
    /// then gone with the messages); or Redis evicted keys since (a policy
    /// other than `noeviction`: any key of the queue may be among them,
    /// `:held` too, which the lost-message sweep trusts). Every job
    /// published but not yet claimed must then be published again now
    /// rather than after `REPUBLISH_AFTER`. Always `false` for the other
    /// queues: the job rows are as durable as the jobs themselves.
    pub async fn lost_messages(&self) -> Result<bool> {
        let Queue::Redis(queue) = self else {
            return Ok(false);
        };
        let (marked, info): (Option<String>, String) = ::redis::pipe()
            .cmd("GET")
            .arg(queue.key("intact"))
            .cmd("INFO")
            .arg("stats")
            .query_async(&mut queue.connection())
            .await?;
        let Some(marked) = marked else {
            return Ok(true);
        };
        // A marker written by a version that kept a time there reads as
        // a count no server reaches, and says nothing of evictions.
        let evicted_when_marked = marked.parse::<u64>().unwrap_or(u64::MAX);
        Ok(evicted_keys(&info).is_some_and(|now| now > evicted_when_marked))
    }

    /// Records that everything unclaimed has been made due for publishing
    /// since the queue was last found to have lost its messages, with the
    /// count of keys Redis had evicted by then.
    pub async fn mark_intact(&self) -> Result<()> {
        if let Queue::Redis(queue) = self {
            let info: String = ::redis::cmd("INFO")
                .arg("stats")
                .query_async(&mut queue.connection())
                .await?;
            ::redis::cmd("SET")
                .arg(queue.key("intact"))
                .arg(evicted_keys(&info).unwrap_or(0))
                .query_async::<()>(&mut queue.connection())
                .await?;
        }
        Ok(())
    }

    /// Deletes what the queue keeps of up to `limit` finished messages;
    /// returns how many it looked at, so a caller knows whether more wait.
    /// The Redis queue keeps nothing of a message once it is
    /// acknowledged, and the job rows nothing beside the job; where the
    /// job rows are the queue on Postgres, this deletes what apalis's
    /// storage of an earlier version left (after [`Queue::recover`]
    /// republished its jobs).
    pub async fn forget_finished(&self, limit: usize) -> Result<u64> {
        let limit_sql = i64::try_from(limit).unwrap_or(i64::MAX);
        Ok(match self {
            Queue::Redis(_) => 0,
            Queue::JobRows(queue) => {
                queue
                    .earlier_apalis
                    .delete_left(queue.name(), limit_sql)
                    .await?
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
            Queue::JobRows(queue) => queue.ping().await?,
        }
        Ok(())
    }
}

impl Queue {
    /// Publishes jobs just committed (Redis: the api's submits, the
    /// relay's leased rows). A push that fails hands the jobs back to the
    /// relay, due in a second; returns whether the queue has them.
    pub async fn publish_committed(&self, store: &Store, jobs: &[QueuedJob]) -> bool {
        if jobs.is_empty() {
            return true;
        }
        match self.publish(jobs).await {
            Ok(()) => true,
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

/// `evicted_keys` of Redis's `INFO stats`.
fn evicted_keys(info: &str) -> Option<u64> {
    info.lines()
        .find_map(|line| line.strip_prefix("evicted_keys:"))
        .and_then(|count| count.trim().parse().ok())
}
