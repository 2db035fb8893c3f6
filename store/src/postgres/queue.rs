//! The database queue on Postgres (`queue_messages`, `queue_consumers`):
//! see `store::queue`. A plan cached while the queue held a few messages
//! would scan all of them once it holds a backlog: the fetch, on every
//! job's way, runs as a function whose plans price sequential scans out;
//! the hand-back, rare, is planned each time it runs (`persistent(false)`),
//! as the outbox's statements are.

use sqlx::PgExecutor;

use crate::{rows::queue::FetchedMessage, sql::Millis};

/// Inserts a waiting message per job (none for a job that has a waiting
/// one) and, when any was new, wakes the consumers listening on `channel`
/// when the insert commits.
pub(crate) async fn push(
    db: impl PgExecutor<'_>,
    queue: &str,
    job_ids: &[String],
    tenant_ids: &[String],
    ranks: &[Millis],
    channel: &str,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "WITH pushed AS (
             INSERT INTO queue_messages (job_id, queue, tenant_id, rank_at)
             SELECT job_id, $1, tenant_id, rank_at
             FROM unnest($2::text[], $3::text[], $4::timestamptz[]) AS m(job_id, tenant_id, rank_at)
             ON CONFLICT (job_id) WHERE consumer IS NULL DO NOTHING
             RETURNING message_id
         )
         SELECT pg_notify($5, $1) FROM (SELECT 1 FROM pushed LIMIT 1) AS any_pushed"
    ))
    .bind(queue)
    .bind(job_ids)
    .bind(tenant_ids)
    .bind(ranks)
    .bind(channel)
    .execute(db)
    .await?;
    Ok(())
}

/// In one statement (the function `queue_fetch`): refreshes the consumer's
/// heartbeat, deletes the messages it acknowledges, and takes up to `most`
/// waiting messages: the tenants with waiting messages in turn, starting
/// after `after_tenant` and wrapping around, each tenant's first by rank,
/// as evenly as `most` allows. Rows another fetch is taking are skipped,
/// not waited for.
///
/// The tenants are found by a walk of `queue_messages_waiting` (one probe
/// per tenant, not a scan of the waiting messages), and the messages taken
/// by their keys. The function's plans are made with sequential scans
/// priced out, so a plan cached while the queue was short serves a backlog
/// as well.
pub(crate) async fn fetch(
    db: impl PgExecutor<'_>,
    queue: &str,
    consumer: &str,
    most: i64,
    after_tenant: &str,
    acks: &[i64],
    alive_ms: i64,
) -> sqlx::Result<Vec<FetchedMessage>> {
    sqlx::query_as(sql!(
        "SELECT message_id, job_id, tenant_id, rank_at, turn, n
         FROM queue_fetch($1, $2, $3, $4, $5, $6)"
    ))
    .bind(queue)
    .bind(consumer)
    .bind(most)
    .bind(after_tenant)
    .bind(acks)
    .bind(alive_ms)
    .fetch_all(db)
    .await
}

/// Moves the consumer's heartbeat `alive_ms` ahead.
pub(crate) async fn heartbeat(
    db: impl PgExecutor<'_>,
    queue: &str,
    consumer: &str,
    alive_ms: i64,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "INSERT INTO queue_consumers (queue, consumer, alive_until)
         VALUES ($1, $2, now() + $3::float8 * interval '1 millisecond')
         ON CONFLICT (queue, consumer) DO UPDATE SET alive_until = EXCLUDED.alive_until"
    ))
    .bind(queue)
    .bind(consumer)
    .bind(alive_ms)
    .execute(db)
    .await?;
    Ok(())
}

/// Hands messages in flight back to the queue: those `consumer` holds
/// (when given) or those of consumers whose heartbeat lapsed (when not),
/// except `keep`. A job that has a waiting message again keeps only that
/// one. Forgets consumers whose heartbeat lapsed, and `consumer` too when
/// `forget`; wakes the consumers on `channel` when any message waits
/// again. Returns how many do.
pub(crate) async fn hand_back(
    db: impl PgExecutor<'_>,
    queue: &str,
    consumer: Option<&str>,
    keep: &[i64],
    forget: bool,
    channel: &str,
) -> sqlx::Result<i64> {
    sqlx::query_scalar(sql!(
        "WITH forgotten AS (
             DELETE FROM queue_consumers
             WHERE queue = $1 AND (alive_until < now() OR ($4 AND consumer = $2))
         ), held AS (
             SELECT m.message_id, m.job_id FROM queue_messages m
             WHERE m.queue = $1 AND m.consumer IS NOT NULL AND NOT (m.message_id = ANY($3))
               AND CASE WHEN $2::text IS NULL
                        THEN NOT EXISTS (SELECT 1 FROM queue_consumers c
                                         WHERE c.queue = $1 AND c.consumer = m.consumer
                                           AND c.alive_until >= now())
                        ELSE m.consumer = $2 END
         ), back AS (
             SELECT DISTINCT ON (h.job_id) h.message_id FROM held h
             WHERE NOT EXISTS (SELECT 1 FROM queue_messages w
                               WHERE w.job_id = h.job_id AND w.consumer IS NULL)
             ORDER BY h.job_id, h.message_id
         ), returned AS (
             UPDATE queue_messages SET consumer = NULL, fetched_at = NULL
             WHERE message_id IN (SELECT message_id FROM back)
             RETURNING message_id
         ), dropped AS (
             DELETE FROM queue_messages
             WHERE message_id IN (SELECT message_id FROM held)
               AND message_id NOT IN (SELECT message_id FROM back)
         ), woken AS (
             SELECT pg_notify($5, $1) FROM (SELECT 1 FROM returned LIMIT 1) AS any_returned
         )
         SELECT (SELECT count(*) FROM returned) + 0 * (SELECT count(*) FROM woken)"
    ))
    .persistent(false)
    .bind(queue)
    .bind(consumer)
    .bind(keep)
    .bind(forget)
    .bind(channel)
    .fetch_one(db)
    .await
}
