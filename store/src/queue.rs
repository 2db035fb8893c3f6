//! The database queue: the queue of the production shape without Redis,
//! in Postgres (`queue_messages`), fair between tenants. The `queue` crate
//! drives it; the statements are here.
//!
//! A message waits (`consumer` empty) until a fetch takes it for a
//! consumer; it is deleted when the consumer acknowledges it (its handler
//! returned), and waits again when the consumer hands it back or stops
//! sending heartbeats. A job has at most one waiting message: a push for
//! a job that has one adds none, and a push while its message is in
//! flight (the job was made due again before its handler returned) adds
//! one that waits beside it, so the job runs again after.

use std::time::Duration;

use crate::{Error, QueuedJob, Result, Store, on_postgres, postgres, sql::Millis};

/// The NOTIFY channel a push (or a message handed back) is announced on,
/// with the queue's name as payload.
pub const QUEUE_CHANNEL: &str = "receipt_queue";

/// A message a consumer took: its id, by which it is acknowledged, and
/// its job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueMessage {
    pub message_id: i64,
    pub job: QueuedJob,
}

/// What a consumer sends with a fetch.
#[derive(Debug)]
pub struct QueueFetch<'a> {
    pub queue: &'a str,
    pub consumer: &'a str,
    /// At most this many messages (the consumer's free slots); 0 only
    /// acknowledges and refreshes the heartbeat.
    pub most: usize,
    /// The tenant the consumer served last: tenants after it come first.
    pub after_tenant: &'a str,
    /// The messages whose handlers returned.
    pub acks: &'a [i64],
    /// How long the consumer counts as alive after this fetch.
    pub alive: Duration,
}

fn ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

impl Store {
    fn queue_pool(&self) -> Result<&sqlx::PgPool> {
        match &self.db {
            crate::Db::Postgres(pool) => Ok(pool),
            crate::Db::Sqlite(_) => Err(Error::Config(
                "the database queue runs on Postgres; SQLite uses the in-process queue".into(),
            )),
        }
    }

    /// Adds a waiting message per job to `queue` (none for a job that has
    /// a waiting one) and wakes its consumers.
    pub async fn queue_push(&self, queue: &str, jobs: &[QueuedJob]) -> Result<()> {
        if jobs.is_empty() {
            return Ok(());
        }
        let pool = self.queue_pool()?;
        let job_ids: Vec<String> = jobs.iter().map(|job| job.job_id.clone()).collect();
        let tenants: Vec<String> = jobs.iter().map(|job| job.tenant_id.clone()).collect();
        let ranks: Vec<Millis> = jobs.iter().map(|job| Millis(job.rank_at)).collect();
        on_postgres!(self, pool, pool =>
            postgres::queue::push(pool, queue, &job_ids, &tenants, &ranks, QUEUE_CHANNEL).await?
        );
        Ok(())
    }

    /// Acknowledges, refreshes the heartbeat and takes messages
    /// ([`QueueFetch`]); returns them in the order they were given: one per
    /// tenant in turn, then a second per tenant, and so on.
    pub async fn queue_fetch(&self, fetch: QueueFetch<'_>) -> Result<Vec<QueueMessage>> {
        let pool = self.queue_pool()?;
        let most = i64::try_from(fetch.most).unwrap_or(i64::MAX);
        let mut fetched = on_postgres!(self, pool, pool =>
            postgres::queue::fetch(
                pool,
                fetch.queue,
                fetch.consumer,
                most,
                fetch.after_tenant,
                fetch.acks,
                ms(fetch.alive),
            )
            .await?
        );
        fetched.sort_by_key(|message| (message.n, message.turn));
        Ok(fetched
            .into_iter()
            .map(|message| QueueMessage {
                message_id: message.message_id,
                job: QueuedJob {
                    job_id: message.job_id,
                    tenant_id: message.tenant_id,
                    rank_at: message.rank_at.into(),
                },
            })
            .collect())
    }

    /// Keeps a consumer alive for `alive` more.
    pub async fn queue_heartbeat(
        &self,
        queue: &str,
        consumer: &str,
        alive: Duration,
    ) -> Result<()> {
        on_postgres!(self, self.queue_pool()?, pool =>
            postgres::queue::heartbeat(pool, queue, consumer, ms(alive)).await?
        );
        Ok(())
    }

    /// Hands back what `consumer` holds except `keep` (the messages it
    /// knows it holds, after a fetch whose answer was lost). Returns how
    /// many wait again.
    pub async fn queue_reconcile(&self, queue: &str, consumer: &str, keep: &[i64]) -> Result<u64> {
        self.queue_hand_back(queue, Some(consumer), keep, false)
            .await
    }

    /// A consumer that stops (after its last acknowledgements): hands back
    /// everything it holds, and is forgotten. Returns how many wait again.
    pub async fn queue_release(&self, queue: &str, consumer: &str) -> Result<u64> {
        self.queue_hand_back(queue, Some(consumer), &[], true).await
    }

    /// Hands back the messages of consumers whose heartbeat lapsed.
    /// Returns how many wait again.
    pub async fn queue_return_abandoned(&self, queue: &str) -> Result<u64> {
        self.queue_hand_back(queue, None, &[], false).await
    }

    async fn queue_hand_back(
        &self,
        queue: &str,
        consumer: Option<&str>,
        keep: &[i64],
        forget: bool,
    ) -> Result<u64> {
        let pool = self.queue_pool()?;
        let waiting = on_postgres!(self, pool, pool =>
            postgres::queue::hand_back(pool, queue, consumer, keep, forget, QUEUE_CHANNEL).await?
        );
        Ok(u64::try_from(waiting).unwrap_or(0))
    }
}
