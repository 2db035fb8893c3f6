//! The worker protocol on SQLite.

use shared::settings::Caps;
use sqlx::{Executor, Sqlite, SqliteConnection};

use super::json_list;
use crate::{
    rows::{
        attempts::ClaimRow,
        work::{AttemptStateRow, LeaseTerms, LeaseTermsRow},
    },
    sql::Millis,
};

pub(crate) use crate::portable::sqlite::work::*;

/// Claims up to `most` of the tenant's due external jobs of `kinds`, by
/// rank, as `sqlite::attempts::claim` claims (parking those over a cap).
/// SQLite's one writer makes the choice the claim's.
pub(crate) async fn claim(
    conn: &mut SqliteConnection,
    terms: &LeaseTerms<'_>,
    caps: &Caps,
) -> sqlx::Result<Vec<ClaimRow>> {
    let chosen: Vec<String> = sqlx::query_scalar(sql!(
        "SELECT job_id FROM jobs
         WHERE status = 'QUEUED' AND capped IS NULL AND external AND tenant_id = $1
           AND kind IN (SELECT value FROM json_each($2))
           AND rank_at <= $4 AND run_after <= $3
         ORDER BY rank_at, job_id LIMIT $5"
    ))
    .bind(terms.tenant_id)
    .bind(json_list(terms.kinds.iter().map(String::as_str)))
    .bind(terms.now)
    .bind(terms.rank_before)
    .bind(terms.most)
    .fetch_all(&mut *conn)
    .await?;
    let mut rows = super::attempts::claim(
        conn,
        &chosen,
        terms.now,
        terms.lease_until,
        terms.worker_id,
        caps,
        true,
    )
    .await?;
    rows.sort_by_key(|row| chosen.iter().position(|id| *id == row.job_id));
    Ok(rows)
}

/// Gives each claimed attempt its deadline, and a lease that ends no later.
pub(crate) async fn set_deadlines(
    conn: &mut SqliteConnection,
    job_ids: &[String],
    deadlines: &[Millis],
) -> sqlx::Result<Vec<LeaseTermsRow>> {
    let mut terms = Vec::with_capacity(job_ids.len());
    for (job_id, deadline) in job_ids.iter().zip(deadlines) {
        let row: Option<LeaseTermsRow> = sqlx::query_as(sql!(
            "UPDATE jobs SET attempt_deadline = $2, lease_taken_up = false,
                 lease_expires_at = min(lease_expires_at, $2)
             WHERE job_id = $1
             RETURNING job_id, priority, lease_expires_at, attempt_deadline"
        ))
        .bind(job_id)
        .bind(deadline)
        .fetch_optional(&mut *conn)
        .await?;
        terms.extend(row);
    }
    Ok(terms)
}

/// The states of the tenant's external jobs among `job_ids`.
pub(crate) async fn states(
    db: impl Executor<'_, Database = Sqlite>,
    tenant_id: &str,
    job_ids: &[String],
) -> sqlx::Result<Vec<AttemptStateRow>> {
    sqlx::query_as(sql!(
        "SELECT job_id, kind, status, attempts, handbacks, max_attempts, cancel_requested,
                run_after, attempt_deadline, error_type, error_message, worker_id
         FROM jobs WHERE job_id IN (SELECT value FROM json_each($1)) AND tenant_id = $2
           AND external"
    ))
    .bind(json_list(job_ids.iter().map(String::as_str)))
    .bind(tenant_id)
    .fetch_all(db)
    .await
}
