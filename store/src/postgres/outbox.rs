//! The outbox on Postgres. Its statements are planned each time they run
//! (`persistent(false)`): the outbox is a queue, empty one minute and a
//! backlog the next, and a plan cached while it held a few rows scans all
//! of it once it holds a backlog.

use sqlx::{PgConnection, PgExecutor};

use crate::{outbox::OutboxRow, sql::Millis};

/// Takes up to `limit` due rows and moves their next publish ahead (the
/// lease), doubling the wait on each republish up to 32 times the first.
/// Rows published before whose lease lapsed come first, then rows not yet
/// published in rank order (`outbox_ready`), so a backlog that waits here
/// honours priorities.
/// Two statements: as one (`UPDATE .. WHERE job_id IN (SELECT ..)`)
/// Postgres plans a hash join over a scan of the whole outbox, dead rows
/// and all.
pub(crate) async fn lease_due(
    conn: &mut PgConnection,
    now: Millis,
    limit: i64,
    republish_after_ms: i64,
) -> sqlx::Result<Vec<OutboxRow>> {
    let due: Vec<OutboxRow> = sqlx::query_as(sql!(
        "WITH lapsed AS (
             SELECT job_id, rank_at FROM outbox WHERE republish_ms > 0 AND publish_at <= $1
             ORDER BY publish_at LIMIT $2 FOR UPDATE SKIP LOCKED
         ), ready AS (
             SELECT job_id, rank_at FROM outbox WHERE republish_ms = 0 AND publish_at <= $1
             ORDER BY rank_at LIMIT $2 FOR UPDATE SKIP LOCKED
         ), taken AS (
             SELECT job_id, rank_at, 0 AS turn FROM lapsed
             UNION ALL SELECT job_id, rank_at, 1 AS turn FROM ready
         )
         SELECT t.job_id, j.tenant_id, COALESCE(j.rank_at, t.rank_at) AS rank_at
         FROM taken t LEFT JOIN jobs j ON j.job_id = t.job_id
         ORDER BY t.turn, t.rank_at LIMIT $2"
    ))
    .bind(now)
    .bind(limit)
    .persistent(false)
    .fetch_all(&mut *conn)
    .await?;
    if due.is_empty() {
        return Ok(due);
    }
    let ids: Vec<&str> = due.iter().map(|row| row.job_id.as_str()).collect();
    sqlx::query(sql!(
        "UPDATE outbox SET
             publish_at = $1::timestamptz + interval '1 millisecond'
                 * CASE WHEN republish_ms = 0 THEN $2 ELSE republish_ms END,
             republish_ms = CASE WHEN republish_ms = 0 THEN $2
                                 WHEN republish_ms * 2 > $2 * 32 THEN $2 * 32
                                 ELSE republish_ms * 2 END
         WHERE job_id = ANY ($3)"
    ))
    .bind(now)
    .bind(republish_after_ms)
    .bind(&ids)
    .persistent(false)
    .execute(conn)
    .await?;
    Ok(due)
}

/// Published (`republish_ms > 0`) before `before`, in job id order.
pub(crate) async fn published_unclaimed(
    db: impl PgExecutor<'_>,
    after: &str,
    before: Millis,
    limit: i64,
) -> sqlx::Result<Vec<OutboxRow>> {
    sqlx::query_as(sql!(
        "SELECT o.job_id, j.tenant_id, COALESCE(j.rank_at, o.rank_at) AS rank_at
         FROM outbox o LEFT JOIN jobs j ON j.job_id = o.job_id
         WHERE o.job_id > $1 AND o.republish_ms > 0
           AND o.publish_at - interval '1 millisecond' * o.republish_ms <= $2
         ORDER BY o.job_id LIMIT $3"
    ))
    .bind(after)
    .bind(before)
    .bind(limit)
    .persistent(false)
    .fetch_all(db)
    .await
}

/// The rows of `ids` still published before `before`, given a new publish
/// time; returns their ids.
pub(crate) async fn republish(
    conn: &mut PgConnection,
    ids: &[String],
    now: Millis,
    before: Millis,
) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar(sql!(
        "UPDATE outbox SET publish_at = $1::timestamptz + interval '1 millisecond' * republish_ms
         WHERE republish_ms > 0 AND publish_at - interval '1 millisecond' * republish_ms <= $2
           AND job_id = ANY ($3)
         RETURNING job_id"
    ))
    .bind(now)
    .bind(before)
    .bind(ids)
    .persistent(false)
    .fetch_all(conn)
    .await
}

pub(crate) async fn make_published_due(db: impl PgExecutor<'_>, now: Millis) -> sqlx::Result<u64> {
    let done = sqlx::query(sql!(
        "UPDATE outbox SET publish_at = $1, republish_ms = 0 WHERE republish_ms > 0"
    ))
    .bind(now)
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

pub(crate) async fn set_due(
    db: impl PgExecutor<'_>,
    ids: &[String],
    at: Millis,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE outbox SET publish_at = $1 WHERE job_id = ANY ($2)"
    ))
    .bind(at)
    .bind(ids)
    .execute(db)
    .await?;
    Ok(())
}

/// The job's row due at `at`, unpublished, at the job's rank.
pub(crate) async fn upsert(conn: &mut PgConnection, job_id: &str, at: Millis) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "INSERT INTO outbox (job_id, publish_at, rank_at)
         SELECT job_id, $2, COALESCE(rank_at, $2) FROM jobs WHERE job_id = $1
         ON CONFLICT (job_id) DO UPDATE SET publish_at = excluded.publish_at,
             rank_at = excluded.rank_at, republish_ms = 0"
    ))
    .bind(job_id)
    .bind(at)
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn delete(conn: &mut PgConnection, job_id: &str) -> sqlx::Result<()> {
    sqlx::query(sql!("DELETE FROM outbox WHERE job_id = $1"))
        .bind(job_id)
        .execute(conn)
        .await?;
    Ok(())
}
