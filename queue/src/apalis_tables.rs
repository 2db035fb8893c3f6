//! SQL on apalis's own queue table: what its Postgres storage, which
//! earlier versions queued in, left behind. apalis owns that table;
//! Receipt only prunes it.

use crate::{JobRowQueue, Result};

/// Whether apalis's Postgres storage, which earlier versions queued in
/// on Postgres without Redis, left messages of `queue` that had not run:
/// nothing reads them now, so their jobs must be published again.
pub async fn left_unrun_postgres_messages(queue: &JobRowQueue) -> Result<bool> {
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
pub async fn delete_left_postgres_messages(queue: &JobRowQueue, limit: i64) -> Result<u64> {
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
async fn apalis_postgres_table(queue: &JobRowQueue) -> Result<Option<&sqlx::PgPool>> {
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
