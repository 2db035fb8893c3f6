//! The worker protocol on Postgres.

use shared::settings::Caps;
use sqlx::{Executor, PgConnection, Postgres};

use crate::{
    rows::{
        attempts::ClaimRow,
        work::{AttemptStateRow, LeaseTerms, LeaseTermsRow},
    },
    sql::Millis,
};

pub(crate) use crate::portable::postgres::work::*;

/// Claims up to `most` of the tenant's due external jobs of `kinds`, by
/// rank, through `claim_jobs` (which parks those over a cap); jobs another
/// lease is taking are skipped, not waited for.
pub(crate) async fn claim(
    conn: &mut PgConnection,
    terms: &LeaseTerms<'_>,
    caps: &Caps,
) -> sqlx::Result<Vec<ClaimRow>> {
    sqlx::query_as(sql!(
        "SELECT job_id, tenant_id, kind, params, attempts, handbacks, max_attempts, created_at,
                traceparent
         FROM claim_jobs(ARRAY(
             SELECT c.job_id FROM unnest($2::text[]) AS k (kind) CROSS JOIN LATERAL (
                 SELECT j.job_id, j.rank_at FROM jobs j
                 WHERE j.status = 'QUEUED' AND j.capped IS NULL AND j.external
                   AND j.tenant_id = $1 AND j.kind = k.kind
                   AND j.rank_at <= $4 AND j.run_after <= $3
                 ORDER BY j.rank_at, j.job_id LIMIT $5
                 FOR UPDATE SKIP LOCKED
             ) AS c
             ORDER BY c.rank_at, c.job_id LIMIT $5
         ), $3, $6, $7, $8, $9, $10, true)"
    ))
    .bind(terms.tenant_id)
    .bind(terms.kinds)
    .bind(terms.now)
    .bind(terms.rank_before)
    .bind(terms.most)
    .bind(terms.lease_until)
    .bind(terms.worker_id)
    .bind(i64::from(caps.per_tenant))
    .bind(super::attempts::capped_kinds(caps))
    .bind(super::attempts::kind_caps(caps))
    .fetch_all(conn)
    .await
}

/// Gives each claimed attempt its deadline, and a lease that ends no later.
pub(crate) async fn set_deadlines(
    conn: &mut PgConnection,
    job_ids: &[String],
    deadlines: &[Millis],
) -> sqlx::Result<Vec<LeaseTermsRow>> {
    sqlx::query_as(sql!(
        "UPDATE jobs SET attempt_deadline = d.deadline, lease_taken_up = false,
             lease_expires_at = LEAST(jobs.lease_expires_at, d.deadline)
         FROM unnest($1::text[], $2::timestamptz[]) AS d (job_id, deadline)
         WHERE jobs.job_id = d.job_id
         RETURNING jobs.job_id, jobs.priority, jobs.lease_expires_at, jobs.attempt_deadline"
    ))
    .bind(job_ids)
    .bind(deadlines)
    .fetch_all(conn)
    .await
}

/// The states of the tenant's external jobs among `job_ids`.
pub(crate) async fn states(
    db: impl Executor<'_, Database = Postgres>,
    tenant_id: &str,
    job_ids: &[String],
) -> sqlx::Result<Vec<AttemptStateRow>> {
    sqlx::query_as(sql!(
        "SELECT job_id, kind, status, attempts, handbacks, max_attempts, cancel_requested,
                run_after, attempt_deadline, error_type, error_message, worker_id
         FROM jobs WHERE job_id = ANY($1::text[]) AND tenant_id = $2 AND external"
    ))
    .bind(job_ids)
    .bind(tenant_id)
    .fetch_all(db)
    .await
}
