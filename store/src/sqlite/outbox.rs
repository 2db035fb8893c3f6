//! The outbox on SQLite.

use sqlx::{SqliteConnection, SqliteExecutor};

use super::json_list;
use crate::{
    rows::outbox::{OutboxRow, SweepCursor, SweptRow},
    sql::Millis,
};

pub(crate) use crate::portable::sqlite::outbox::*;

/// Whether any row is due: a read, before the relay takes the one write
/// lock.
pub(crate) async fn any_due(db: impl SqliteExecutor<'_>, now: Millis) -> sqlx::Result<bool> {
    let due: Option<i64> =
        sqlx::query_scalar(sql!(
            "SELECT 1 WHERE EXISTS (SELECT 1 FROM outbox WHERE republish_ms > 0 AND publish_at <= $1)
                         OR EXISTS (SELECT 1 FROM outbox WHERE republish_ms = 0 AND publish_at <= $1)"
        ))
            .bind(now)
            .fetch_optional(db)
            .await?;
    Ok(due.is_some())
}

/// Takes up to `limit` due rows and moves their next publish ahead (the
/// lease), doubling the wait on each republish up to 32 times the first;
/// in Postgres's order (see its `lease_due`).
pub(crate) async fn lease_due(
    conn: &mut SqliteConnection,
    now: Millis,
    limit: i64,
    republish_after_ms: i64,
) -> sqlx::Result<Vec<OutboxRow>> {
    let due: Vec<OutboxRow> = sqlx::query_as(sql!(
        "SELECT t.job_id, j.tenant_id, COALESCE(j.rank_at, t.rank_at) AS rank_at,
                j.status = 'QUEUED' AS queued
         FROM (SELECT * FROM (
                   SELECT job_id, rank_at, 0 AS turn FROM outbox
                   WHERE republish_ms > 0 AND publish_at <= $1 ORDER BY publish_at LIMIT $2)
               UNION ALL
               SELECT * FROM (
                   SELECT job_id, rank_at, 1 AS turn FROM outbox
                   WHERE republish_ms = 0 AND publish_at <= $1 ORDER BY rank_at LIMIT $2)) t
         LEFT JOIN jobs j ON j.job_id = t.job_id
         ORDER BY t.turn, t.rank_at LIMIT $2"
    ))
    .bind(now)
    .bind(limit)
    .fetch_all(&mut *conn)
    .await?;
    if due.is_empty() {
        return Ok(due);
    }
    let ids = json_list(due.iter().map(|row| row.job_id.as_str()));
    sqlx::query(sql!(
        "UPDATE outbox SET
             publish_at = $1 + CASE WHEN republish_ms = 0 THEN $2 ELSE republish_ms END,
             republish_ms = CASE WHEN republish_ms = 0 THEN $2
                                 WHEN republish_ms * 2 > $2 * 32 THEN $2 * 32
                                 ELSE republish_ms * 2 END
         WHERE job_id IN (SELECT value FROM json_each($3))"
    ))
    .bind(now)
    .bind(republish_after_ms)
    .bind(ids)
    .execute(conn)
    .await?;
    Ok(due)
}

/// Queued, due and unparked jobs in the order of `jobs_queued_by_kind`
/// after `after`, due since `before`, with no outbox row but one
/// published since then.
pub(crate) async fn queued_unclaimed(
    db: impl SqliteExecutor<'_>,
    after: &SweepCursor,
    before: Millis,
    limit: i64,
) -> sqlx::Result<Vec<SweptRow>> {
    sqlx::query_as(sql!(
        "SELECT j.job_id, j.tenant_id, j.rank_at, j.kind, j.run_after FROM jobs j
         WHERE j.status = 'QUEUED' AND (j.kind, j.run_after, j.job_id) > ($1, $2, $3)
           AND j.run_after <= $4 AND j.capped IS NULL
           AND NOT EXISTS (
               SELECT 1 FROM outbox o WHERE o.job_id = j.job_id
                 AND (o.republish_ms = 0 OR o.publish_at - o.republish_ms > $4))
         ORDER BY j.kind, j.run_after, j.job_id LIMIT $5"
    ))
    .bind(&after.kind)
    .bind(Millis(after.run_after))
    .bind(&after.job_id)
    .bind(before)
    .bind(limit)
    .fetch_all(db)
    .await
}

/// See Postgres's `add_missing_rows`; SQLite's one writer needs no lock.
/// `ids` is a JSON list, or `None` for every job.
async fn add_missing_rows(
    conn: &mut SqliteConnection,
    ids: Option<&str>,
    at: Millis,
    republish_ms: i64,
    due_by: Millis,
) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar(sql!(
        "INSERT INTO outbox (job_id, publish_at, republish_ms, rank_at)
         SELECT j.job_id, $1, $2, COALESCE(j.rank_at, j.run_after) FROM jobs j
         WHERE j.status = 'QUEUED' AND j.run_after <= $3 AND j.capped IS NULL
           AND ($4 IS NULL OR j.job_id IN (SELECT value FROM json_each($4)))
         ON CONFLICT (job_id) DO NOTHING
         RETURNING job_id"
    ))
    .bind(at)
    .bind(republish_ms)
    .bind(due_by)
    .bind(ids)
    .fetch_all(conn)
    .await
}

/// See Postgres's `republish`.
pub(crate) async fn republish(
    conn: &mut SqliteConnection,
    ids: &[String],
    now: Millis,
    before: Millis,
    republish_after_ms: i64,
) -> sqlx::Result<Vec<String>> {
    let ids = json_list(ids.iter().map(String::as_str));
    let mut taken: Vec<String> = sqlx::query_scalar(sql!(
        "UPDATE outbox SET publish_at = $1 + republish_ms
         WHERE republish_ms > 0 AND publish_at - republish_ms <= $2
           AND job_id IN (SELECT value FROM json_each($3))
         RETURNING job_id"
    ))
    .bind(now)
    .bind(before)
    .bind(&ids)
    .fetch_all(&mut *conn)
    .await?;
    let at = Millis(now.0 + republish_after_ms);
    taken.extend(add_missing_rows(conn, Some(&ids), at, republish_after_ms, before).await?);
    Ok(taken)
}

/// See Postgres's `make_published_due`.
pub(crate) async fn make_published_due(
    conn: &mut SqliteConnection,
    now: Millis,
) -> sqlx::Result<u64> {
    let made = sqlx::query(sql!(
        "UPDATE outbox SET publish_at = $1, republish_ms = 0 WHERE republish_ms > 0"
    ))
    .bind(now)
    .execute(&mut *conn)
    .await?;
    let added = add_missing_rows(conn, None, now, 0, now).await?;
    Ok(made.rows_affected() + added.len() as u64)
}

/// See Postgres's `set_due`.
pub(crate) async fn set_due(
    conn: &mut SqliteConnection,
    ids: &[String],
    at: Millis,
) -> sqlx::Result<()> {
    let ids = json_list(ids.iter().map(String::as_str));
    sqlx::query(sql!(
        "UPDATE outbox SET publish_at = $1 WHERE job_id IN (SELECT value FROM json_each($2))"
    ))
    .bind(at)
    .bind(&ids)
    .execute(&mut *conn)
    .await?;
    add_missing_rows(conn, Some(&ids), at, 0, at).await?;
    Ok(())
}

/// An outbox row due at its job's `run_after`, unpublished, for each of
/// `ids` queued and unparked (see `Store::publish_when_due`); returns how
/// many it made or moved.
pub(crate) async fn publish_when_due(
    conn: &mut SqliteConnection,
    ids: &[String],
) -> sqlx::Result<u64> {
    let ids = json_list(ids.iter().map(String::as_str));
    let done = sqlx::query(sql!(
        "INSERT INTO outbox (job_id, publish_at, republish_ms, rank_at)
         SELECT j.job_id, j.run_after, 0, COALESCE(j.rank_at, j.run_after) FROM jobs j
         WHERE j.job_id IN (SELECT value FROM json_each($1)) AND j.status = 'QUEUED'
           AND j.capped IS NULL
         ON CONFLICT (job_id) DO UPDATE
             SET publish_at = MIN(outbox.publish_at, excluded.publish_at), republish_ms = 0"
    ))
    .bind(&ids)
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Hands a job queued again to the queue at its due time: its outbox row,
/// unless the job rows are the queue (a worker finds it by looking).
pub(crate) async fn queue_again(conn: &mut SqliteConnection, job_id: &str) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "INSERT INTO outbox (job_id, publish_at, rank_at)
         SELECT job_id, run_after, COALESCE(rank_at, run_after) FROM jobs
         WHERE job_id = $1 AND NOT EXISTS (SELECT 1 FROM queue_in_job_rows)
         ON CONFLICT (job_id) DO UPDATE SET publish_at = excluded.publish_at,
             rank_at = excluded.rank_at, republish_ms = 0"
    ))
    .bind(job_id)
    .execute(conn)
    .await?;
    Ok(())
}

/// Deletes the rows of `job_ids` whose job is not queued; returns their
/// ids.
pub(crate) async fn drop_unqueued(
    conn: &mut SqliteConnection,
    job_ids: &[&str],
) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar(sql!(
        "DELETE FROM outbox
         WHERE job_id IN (SELECT value FROM json_each($1))
           AND NOT EXISTS (SELECT 1 FROM jobs j
                           WHERE j.job_id = outbox.job_id AND j.status = 'QUEUED')
         RETURNING job_id"
    ))
    .bind(json_list(job_ids.iter().copied()))
    .fetch_all(conn)
    .await
}
