//! SQL on apalis's own queue table: what its Postgres storage, which
//! earlier versions queued in, left behind. apalis owns that table;
//! Receipt only prunes it.

use crate::{JobRowQueue, Result};

/// Deletes up to `limit` rows of `queue` that apalis's Postgres storage,
/// which earlier versions queued in on Postgres without Redis, left,
/// whatever their status: nothing reads them any more, and the jobs of
/// those not yet run are claimable from their rows. Returns how many.
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
