//! The worker protocol on Postgres.

use shared::settings::Caps;
use sqlx::{Executor, Postgres};

use crate::rows::work::{LeaseTerms, LeasedRow, ReportedJobRow};

pub(crate) use crate::portable::postgres::work::*;

/// Leases up to `most` of the tenant's due external jobs of `kinds` in
/// one call of `lease_jobs`: claimed through `claim_jobs` (which parks
/// those over a cap), each given its deadline, and the worker noted as
/// seen; jobs another lease is taking are skipped, not waited for. In
/// rank order.
pub(crate) async fn lease(
    db: impl Executor<'_, Database = Postgres>,
    terms: &LeaseTerms<'_>,
    caps: &Caps,
) -> sqlx::Result<Vec<LeasedRow>> {
    sqlx::query_as(sql!(
        "SELECT job_id, tenant_id, kind, params, attempts, handbacks, max_attempts, created_at,
                traceparent, priority, lease_expires_at, attempt_deadline
         FROM lease_jobs($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
    ))
    .bind(terms.tenant_id)
    .bind(terms.kinds)
    .bind(terms.timeouts_ms)
    .bind(terms.most)
    .bind(terms.now)
    .bind(terms.rank_before)
    .bind(terms.lease_until)
    .bind(terms.worker_id)
    .bind(terms.worker)
    .bind(i64::from(caps.per_tenant))
    .bind(super::attempts::capped_kinds(caps))
    .bind(super::attempts::kind_caps(caps))
    .bind(terms.note_seen)
    .fetch_all(db)
    .await
}

/// The states of the tenant's external jobs among `job_ids`, each with
/// whether its kind takes a JSON result.
pub(crate) async fn states(
    db: impl Executor<'_, Database = Postgres>,
    tenant_id: &str,
    job_ids: &[String],
) -> sqlx::Result<Vec<ReportedJobRow>> {
    sqlx::query_as(sql!(
        "SELECT job_id, kind, status, attempts, handbacks, max_attempts, cancel_requested,
                run_after, attempt_deadline, error_type, error_message, worker_id,
                EXISTS (SELECT 1 FROM registered_kinds k
                        WHERE k.tenant_id = jobs.tenant_id AND k.name = jobs.kind
                          AND k.result_media_types ? 'application/json') AS takes_json
         FROM jobs WHERE job_id = ANY($1::text[]) AND tenant_id = $2 AND external"
    ))
    .bind(job_ids)
    .bind(tenant_id)
    .fetch_all(db)
    .await
}
