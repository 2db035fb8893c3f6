//! The worker protocol on SQLite.

use shared::settings::Caps;
use sqlx::{Executor, Sqlite, SqliteConnection};

use super::json_list;
use crate::rows::work::{LeaseTerms, LeasedRow, ReportedJobRow};

pub(crate) use crate::portable::sqlite::work::*;

/// Leases up to `most` of the tenant's due external jobs of `kinds`, by
/// rank, in the caller's transaction: claimed as `sqlite::attempts::claim`
/// claims (parking those over a cap), each given its deadline, and the
/// worker noted as seen. SQLite's one writer makes the choice the
/// claim's. In rank order.
pub(crate) async fn lease(
    conn: &mut SqliteConnection,
    terms: &LeaseTerms<'_>,
    caps: &Caps,
) -> sqlx::Result<Vec<LeasedRow>> {
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
    let claimed = super::attempts::claim(
        conn,
        &chosen,
        terms.now,
        terms.lease_until,
        terms.worker_id,
        caps,
        true,
    )
    .await?;
    if terms.note_seen || !claimed.is_empty() {
        seen(conn, terms, claimed.len()).await?;
    }
    if claimed.is_empty() {
        return Ok(Vec::new());
    }
    let timeouts = serde_json::Value::from(
        terms
            .kinds
            .iter()
            .zip(terms.timeouts_ms)
            .map(|(kind, timeout)| serde_json::json!([kind, timeout]))
            .collect::<Vec<_>>(),
    );
    let mut rows: Vec<LeasedRow> = sqlx::query_as(sql!(
        "UPDATE jobs SET attempt_deadline = $3 + t.timeout_ms, lease_taken_up = false,
             lease_expires_at = min(lease_expires_at, $3 + t.timeout_ms)
         FROM (SELECT json_extract(value, '$[0]') AS name,
                      json_extract(value, '$[1]') AS timeout_ms
               FROM json_each($2)) AS t
         WHERE job_id IN (SELECT value FROM json_each($1)) AND kind = t.name
         RETURNING job_id, tenant_id, kind, params, attempts, handbacks, max_attempts,
                   created_at, traceparent, priority, lease_expires_at, attempt_deadline"
    ))
    .bind(json_list(claimed.iter().map(|row| row.job_id.as_str())))
    .bind(timeouts.to_string())
    .bind(terms.now)
    .fetch_all(&mut *conn)
    .await?;
    rows.sort_by_key(|row| chosen.iter().position(|id| *id == row.claim.job_id));
    Ok(rows)
}

/// Notes a lease of the worker: seen now, naming the kinds, having taken
/// `leased` more attempts.
async fn seen(
    conn: &mut SqliteConnection,
    terms: &LeaseTerms<'_>,
    leased: usize,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "INSERT INTO workers (tenant_id, name, kinds, first_seen_at, last_seen_at, leased)
         VALUES ($1, $2, $3, $4, $4, $5)
         ON CONFLICT (tenant_id, name) DO UPDATE SET kinds = excluded.kinds,
             last_seen_at = excluded.last_seen_at, leased = workers.leased + excluded.leased"
    ))
    .bind(terms.tenant_id)
    .bind(terms.worker)
    .bind(json_list(terms.kinds.iter().map(String::as_str)))
    .bind(terms.now)
    .bind(i64::try_from(leased).unwrap_or(i64::MAX))
    .execute(conn)
    .await?;
    Ok(())
}

/// The states of the tenant's external jobs among `job_ids`, each with
/// whether its kind takes a JSON result.
pub(crate) async fn states(
    db: impl Executor<'_, Database = Sqlite>,
    tenant_id: &str,
    job_ids: &[String],
) -> sqlx::Result<Vec<ReportedJobRow>> {
    sqlx::query_as(sql!(
        "SELECT job_id, kind, status, attempts, handbacks, max_attempts, cancel_requested,
                run_after, attempt_deadline, error_type, error_message, worker_id,
                EXISTS (SELECT 1 FROM registered_kinds k, json_each(k.result_media_types) m
                        WHERE k.tenant_id = jobs.tenant_id AND k.name = jobs.kind
                          AND m.value = 'application/json') AS takes_json
         FROM jobs WHERE job_id IN (SELECT value FROM json_each($1)) AND tenant_id = $2
           AND external"
    ))
    .bind(json_list(job_ids.iter().map(String::as_str)))
    .bind(tenant_id)
    .fetch_all(db)
    .await
}
