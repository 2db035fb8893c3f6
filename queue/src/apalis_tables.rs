//! SQL on apalis's own queue tables (its SQLite and Postgres storages),
//! which keep a row for every acknowledged message unless someone deletes
//! it. apalis owns these tables; Receipt only indexes and prunes them.

use crate::Result;

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

/// apalis's Postgres storage (Postgres without Redis): an index on its
/// finished rows, which it has none of, so deleting them reads nothing
/// else. Made after apalis's own setup (it owns the `apalis` schema);
/// processes starting together take turns on an advisory lock, as a
/// concurrent `CREATE INDEX IF NOT EXISTS` of one name can fail.
pub async fn index_finished_postgres_messages(pool: &sqlx::PgPool) -> Result<()> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('receipt_apalis_jobs_finished'))")
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "CREATE INDEX IF NOT EXISTS receipt_apalis_jobs_finished ON apalis.jobs (job_type, done_at)
         WHERE status IN ('Done', 'Failed', 'Killed')",
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

/// apalis's Postgres storage: [`delete_finished_sqlite_messages`] there.
/// `SKIP LOCKED`, so processes doing this at once take different rows and
/// none waits on an acknowledgement in progress.
pub async fn delete_finished_postgres_messages(
    pool: &sqlx::PgPool,
    queue: &str,
    limit: i64,
) -> Result<u64> {
    let deleted = sqlx::query(
        "DELETE FROM apalis.jobs WHERE id IN (
             SELECT id FROM apalis.jobs
             WHERE status IN ('Done', 'Failed', 'Killed') AND job_type = $1
               AND (status <> 'Failed' OR attempts >= max_attempts)
             LIMIT $2 FOR UPDATE SKIP LOCKED)",
    )
    .bind(queue)
    .bind(limit)
    .execute(pool)
    .await?
    .rows_affected();
    Ok(deleted)
}
