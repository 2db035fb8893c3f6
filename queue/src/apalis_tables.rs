//! SQL on apalis's own queue tables: its SQLite storage's, which keeps a
//! row for every acknowledged message unless someone deletes it, and what
//! its Postgres storage, used by earlier versions, left behind. apalis
//! owns these tables; Receipt only prunes them.

use crate::{DatabaseQueue, Result};

/// apalis's SQLite storage (separate `worker` processes on SQLite): deletes
/// up to `limit` rows of `queue` whose message was acknowledged (`Done`) or
/// given up (`Killed`, or `Failed` with no attempt left); returns how many.
/// apalis never looks at such a row again: its fetch takes `Pending` rows
/// and retryable `Failed` ones, its orphan recovery `Running` and `Queued`
/// ones. (apalis's own `vacuum` deletes them all in one statement and then
/// rebuilds the whole file with `VACUUM`.) apalis's index on `(job_type,
/// status, run_at)` finds them.
pub async fn delete_finished_sqlite_messages(
    pool: &sqlx::SqlitePool,
    queue: &str,
    limit: i64,
) -> Result<u64> {
    let deleted = sqlx::query(
        "DELETE FROM Jobs WHERE rowid IN (
             SELECT rowid FROM Jobs
             WHERE status IN ('Done', 'Failed', 'Killed') AND done_at IS NOT NULL
               AND (status <> 'Failed' OR attempts >= max_attempts) AND job_type = $1
             LIMIT $2)",
    )
    .bind(queue)
    .bind(limit)
    .execute(pool)
    .await?
    .rows_affected();
    Ok(deleted)
}

/// Whether apalis's Postgres storage, which earlier versions queued in
/// on Postgres without Redis, left messages of `queue` that had not run:
/// nothing reads them now, so their jobs must be published again.
pub async fn left_unrun_postgres_messages(queue: &DatabaseQueue) -> Result<bool> {
    let Some(pool) = apalis_postgres_table(queue).await? else {
        return Ok(false);
    };
    let queue = queue.name();
    let left: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM apalis.jobs
                        WHERE job_type = $1 AND status NOT IN ('Done', 'Killed'))",
    )
    .bind(queue)
    .fetch_one(pool)
    .await?;
    Ok(left)
}

/// Deletes up to `limit` rows of `queue` that apalis's Postgres storage
/// left (see [`left_unrun_postgres_messages`]), whatever their status:
/// nothing reads them any more. Returns how many.
pub async fn delete_left_postgres_messages(queue: &DatabaseQueue, limit: i64) -> Result<u64> {
    let Some(pool) = apalis_postgres_table(queue).await? else {
        return Ok(0);
    };
    let queue = queue.name();
    let deleted = sqlx::query(
        "DELETE FROM apalis.jobs WHERE id IN (
             SELECT id FROM apalis.jobs WHERE job_type = $1
             LIMIT $2 FOR UPDATE SKIP LOCKED)",
    )
    .bind(queue)
    .bind(limit)
    .execute(pool)
    .await?
    .rows_affected();
    Ok(deleted)
}

/// The pool to reach apalis's table with, while it exists: once found
/// gone it is not looked for again.
async fn apalis_postgres_table(queue: &DatabaseQueue) -> Result<Option<&sqlx::PgPool>> {
    let Some(pool) = queue.apalis_pool() else {
        return Ok(None);
    };
    let exists: bool = sqlx::query_scalar("SELECT to_regclass('apalis.jobs') IS NOT NULL")
        .fetch_one(pool)
        .await?;
    if !exists {
        queue.apalis_gone();
        pool.close().await;
        return Ok(None);
    }
    Ok(Some(pool))
}
