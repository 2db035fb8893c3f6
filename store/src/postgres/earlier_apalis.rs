//! apalis's own queue table on Postgres (`apalis.jobs`), which earlier
//! versions queued in without Redis: apalis owns it, Receipt only prunes
//! what was left there (see `crate::earlier_apalis`).

use sqlx::PgPool;

/// Whether the table is there.
pub(crate) async fn exists(pool: &PgPool) -> sqlx::Result<bool> {
    sqlx::query_scalar(sql!("SELECT to_regclass('apalis.jobs') IS NOT NULL"))
        .fetch_one(pool)
        .await
}

/// Deletes up to `limit` rows of `queue`, whatever their status; how many.
pub(crate) async fn delete_left(pool: &PgPool, queue: &str, limit: i64) -> sqlx::Result<u64> {
    let deleted = sqlx::query(sql!(
        "DELETE FROM apalis.jobs WHERE id IN (
             SELECT id FROM apalis.jobs WHERE job_type = $1
             LIMIT $2 FOR UPDATE SKIP LOCKED)"
    ))
    .bind(queue)
    .bind(limit)
    .execute(pool)
    .await?;
    Ok(deleted.rows_affected())
}
