//! The outbox on Postgres. Its statements are planned each time they run
//! (`persistent(false)`): the outbox is a queue, empty one minute and a
//! backlog the next, and a plan cached while it held a few rows scans all
//! of it once it holds a backlog.

use sqlx::{PgConnection, PgExecutor};

use crate::{
    rows::outbox::{OutboxRow, SweepCursor, SweptRow},
    sql::Millis,
};

pub(crate) use crate::portable::postgres::outbox::*;

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
         SELECT t.job_id, j.tenant_id, COALESCE(j.rank_at, t.rank_at) AS rank_at,
                j.status = 'QUEUED' AS queued
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

/// Queued, due and unparked jobs in the order of `jobs_queued_by_kind`
/// after `after`, due since `before`, with no outbox row but one
/// published since then.
pub(crate) async fn queued_unclaimed(
    db: impl PgExecutor<'_>,
    after: &SweepCursor,
    before: Millis,
    limit: i64,
) -> sqlx::Result<Vec<SweptRow>> {
    sqlx::query_as(sql!(
        "SELECT j.job_id, j.tenant_id, j.rank_at, j.kind, j.run_after FROM jobs j
         WHERE j.status = 'QUEUED' AND j.kind IS NOT NULL
           AND (j.kind, j.run_after, j.job_id) > ($1, $2, $3)
           AND j.run_after <= $4 AND j.capped IS NULL
           AND NOT EXISTS (
               SELECT 1 FROM outbox o WHERE o.job_id = j.job_id
                 AND (o.republish_ms = 0
                      OR o.publish_at - interval '1 millisecond' * o.republish_ms > $4))
         ORDER BY j.kind, j.run_after, j.job_id LIMIT $5"
    ))
    .bind(&after.kind)
    .bind(Millis(after.run_after))
    .bind(&after.job_id)
    .bind(before)
    .bind(limit)
    .persistent(false)
    .fetch_all(db)
    .await
}

/// A row due at `at` with `republish_ms` for each queued, unparked job due
/// by `due_by` that has none: those of `ids`, or every one; returns their
/// ids. The jobs are locked while read, so a claim that commits meanwhile
/// is seen and its job left without a row (a final job never has one).
async fn add_missing_rows(
    conn: &mut PgConnection,
    ids: Option<&[String]>,
    at: Millis,
    republish_ms: i64,
    due_by: Millis,
) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar(sql!(
        "INSERT INTO outbox (job_id, publish_at, republish_ms, rank_at)
         SELECT j.job_id, $1, $2, COALESCE(j.rank_at, j.run_after) FROM jobs j
         WHERE j.status = 'QUEUED' AND j.run_after <= $3 AND j.capped IS NULL
           AND ($4::text[] IS NULL OR j.job_id = ANY ($4))
         FOR SHARE OF j
         ON CONFLICT (job_id) DO NOTHING
         RETURNING job_id"
    ))
    .bind(at)
    .bind(republish_ms)
    .bind(due_by)
    .bind(ids)
    .persistent(false)
    .fetch_all(conn)
    .await
}

/// The rows of `ids` still published before `before`, given a new publish
/// time, and a published row for those of `ids` still queued, due since
/// `before` and unparked that have none; returns their ids.
pub(crate) async fn republish(
    conn: &mut PgConnection,
    ids: &[String],
    now: Millis,
    before: Millis,
    republish_after_ms: i64,
) -> sqlx::Result<Vec<String>> {
    let mut taken: Vec<String> = sqlx::query_scalar(sql!(
        "UPDATE outbox SET publish_at = $1::timestamptz + interval '1 millisecond' * republish_ms
         WHERE republish_ms > 0 AND publish_at - interval '1 millisecond' * republish_ms <= $2
           AND job_id = ANY ($3)
         RETURNING job_id"
    ))
    .bind(now)
    .bind(before)
    .bind(ids)
    .persistent(false)
    .fetch_all(&mut *conn)
    .await?;
    let at = Millis(now.0 + republish_after_ms);
    taken.extend(add_missing_rows(conn, Some(ids), at, republish_after_ms, before).await?);
    Ok(taken)
}

/// Every published row due now and unpublished, and a row due now for
/// every due, unparked queued job without one; returns how many.
pub(crate) async fn make_published_due(conn: &mut PgConnection, now: Millis) -> sqlx::Result<u64> {
    let made = sqlx::query(sql!(
        "UPDATE outbox SET publish_at = $1, republish_ms = 0 WHERE republish_ms > 0"
    ))
    .bind(now)
    .execute(&mut *conn)
    .await?;
    let added = add_missing_rows(conn, None, now, 0, now).await?;
    Ok(made.rows_affected() + added.len() as u64)
}

/// The jobs' rows due at `at`; a row due then, unpublished, for those
/// still queued and unparked that have none.
pub(crate) async fn set_due(
    conn: &mut PgConnection,
    ids: &[String],
    at: Millis,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE outbox SET publish_at = $1 WHERE job_id = ANY ($2)"
    ))
    .bind(at)
    .bind(ids)
    .execute(&mut *conn)
    .await?;
    add_missing_rows(conn, Some(ids), at, 0, at).await?;
    Ok(())
}

/// An outbox row due at its job's `run_after`, unpublished, for each of
/// `ids` queued and unparked (see `Store::publish_when_due`); returns how
/// many it made or moved.
pub(crate) async fn publish_when_due(conn: &mut PgConnection, ids: &[String]) -> sqlx::Result<u64> {
    let done = sqlx::query(sql!(
        "INSERT INTO outbox (job_id, publish_at, republish_ms, rank_at)
         SELECT j.job_id, j.run_after, 0, COALESCE(j.rank_at, j.run_after) FROM jobs j
         WHERE j.job_id = ANY ($1) AND j.status = 'QUEUED' AND j.capped IS NULL
         FOR SHARE OF j
         ON CONFLICT (job_id) DO UPDATE
             SET publish_at = LEAST(outbox.publish_at, EXCLUDED.publish_at), republish_ms = 0"
    ))
    .bind(ids)
    .persistent(false)
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Deletes the rows of `job_ids` whose job is not queued as this
/// statement begins; returns their ids.
pub(crate) async fn drop_unqueued(
    conn: &mut PgConnection,
    job_ids: &[&str],
) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar(sql!(
        "DELETE FROM outbox o
         WHERE o.job_id = ANY ($1)
           AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.job_id = o.job_id AND j.status = 'QUEUED')
         RETURNING o.job_id"
    ))
    .bind(job_ids)
    .persistent(false)
    .fetch_all(conn)
    .await
}

/// Hands a job queued again to the queue at its due time (the function
/// `queue_jobs`: its outbox row, or a NOTIFY where the job rows are the
/// queue).
pub(crate) async fn queue_again(conn: &mut PgConnection, job_id: &str) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "SELECT queue_jobs(ARRAY[job_id], ARRAY[run_after], ARRAY[rank_at])
         FROM jobs WHERE job_id = $1"
    ))
    .bind(job_id)
    .execute(conn)
    .await?;
    Ok(())
}
