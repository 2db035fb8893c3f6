//! Statements only the tests' store methods run.

use sqlx::PgExecutor;

use crate::sql::Millis;

pub(crate) async fn set_lease(
    db: impl PgExecutor<'_>,
    job_id: &str,
    at: Millis,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE jobs SET lease_expires_at = $2 WHERE job_id = $1"
    ))
    .bind(job_id)
    .bind(at)
    .execute(db)
    .await?;
    Ok(())
}

pub(crate) async fn prepared_plans(
    db: impl PgExecutor<'_>,
) -> sqlx::Result<Vec<(String, i64, i64)>> {
    sqlx::query_as(sql!(
        "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
    ))
    .fetch_all(db)
    .await
}

pub(crate) async fn count_results(db: impl PgExecutor<'_>, job_id: &str) -> sqlx::Result<i64> {
    sqlx::query_scalar(sql!("SELECT COUNT(*) FROM job_results WHERE job_id = $1"))
        .bind(job_id)
        .fetch_one(db)
        .await
}

pub(crate) async fn chunk_counts(
    db: impl PgExecutor<'_>,
    job_id: &str,
) -> sqlx::Result<Vec<(i64, i64)>> {
    sqlx::query_as(sql!(
        "SELECT attempt, COUNT(*) FROM job_result_chunks WHERE job_id = $1
         GROUP BY attempt ORDER BY attempt"
    ))
    .bind(job_id)
    .fetch_all(db)
    .await
}

/// A setting of a session the pool opens, as `SHOW` gives it.
pub(crate) async fn session_setting(db: impl PgExecutor<'_>, name: &str) -> sqlx::Result<String> {
    sqlx::query_scalar(sql!("SELECT current_setting($1)"))
        .bind(name)
        .fetch_one(db)
        .await
}
