//! Attempts on SQLite.

use std::collections::HashMap;

use shared::{model::Cap, settings::Caps};
use sqlx::{SqliteConnection, SqliteExecutor};

use super::json_list;
use crate::{
    rows::attempts::{ClaimRow, DueClaim, LapsedRow, ParkedGroup, Success},
    sql::Millis,
};

pub(crate) use crate::portable::sqlite::attempts::*;

/// Requiring QUEUED is the guard: of two deliveries of one job, in this
/// batch or in two processes, one finds it RUNNING (as in Postgres's
/// `claim_jobs`). With caps, each job in rank order is claimed only while
/// its tenant (and its kind) runs fewer jobs than the cap, and is parked
/// (`capped`) otherwise: SQLite's one writer makes the count read the
/// count left. The claimed and parked jobs' outbox rows go in the same
/// transaction. The built-in workers claim only jobs that are not
/// `external`; a lease of external workers, only those that are.
pub(crate) async fn claim(
    conn: &mut SqliteConnection,
    job_ids: &[String],
    now: Millis,
    lease_until: Millis,
    worker_id: &str,
    caps: &Caps,
    external: bool,
) -> sqlx::Result<Vec<ClaimRow>> {
    let (claiming, parked) = if caps.is_none() {
        (job_ids.to_vec(), Vec::new())
    } else {
        sort_under_caps(conn, job_ids, now, caps, external).await?
    };
    let claimed: Vec<ClaimRow> = sqlx::query_as(sql!(
        "UPDATE jobs SET status = 'RUNNING', attempts = attempts + 1, capped = NULL,
             started_at = COALESCE(started_at, $1), lease_expires_at = $2, worker_id = $3
         WHERE job_id IN (SELECT value FROM json_each($4)) AND status = 'QUEUED'
           AND run_after <= $1 AND external = $5
         RETURNING job_id, tenant_id, kind, params, attempts, handbacks, max_attempts, created_at,
                   traceparent"
    ))
    .bind(now)
    .bind(lease_until)
    .bind(worker_id)
    .bind(json_list(claiming.iter().map(String::as_str)))
    .bind(external)
    .fetch_all(&mut *conn)
    .await?;
    let done: Vec<&str> = claimed
        .iter()
        .map(|row| row.job_id.as_str())
        .chain(parked.iter().map(|(job_id, _)| job_id.as_str()))
        .collect();
    if !done.is_empty() {
        sqlx::query(sql!(
            "DELETE FROM outbox WHERE job_id IN (SELECT value FROM json_each($1))"
        ))
        .bind(json_list(done.iter().copied()))
        .execute(conn)
        .await?;
    }
    Ok(claimed)
}

/// A due, queued job of a claim's batch and what it is counted against.
#[derive(sqlx::FromRow)]
struct Candidate {
    job_id: String,
    tenant_id: String,
    kind: String,
}

/// Splits the batch's due jobs, in rank order, into those its caps admit
/// and those they park (marked `capped` here), counting the tenants' and
/// kinds' running jobs once and each admission as it is made.
async fn sort_under_caps(
    conn: &mut SqliteConnection,
    job_ids: &[String],
    now: Millis,
    caps: &Caps,
    external: bool,
) -> sqlx::Result<(Vec<String>, Vec<(String, Cap)>)> {
    let candidates: Vec<Candidate> = sqlx::query_as(sql!(
        "SELECT job_id, tenant_id, kind FROM jobs
         WHERE job_id IN (SELECT value FROM json_each($1)) AND status = 'QUEUED'
           AND run_after <= $2 AND external = $3
         ORDER BY rank_at, job_id"
    ))
    .bind(json_list(job_ids.iter().map(String::as_str)))
    .bind(now)
    .bind(external)
    .fetch_all(&mut *conn)
    .await?;
    let mut running: HashMap<(String, Option<String>), i64> = HashMap::new();
    let (mut admitted, mut parked) = (Vec::new(), Vec::new());
    for candidate in candidates {
        let kind_cap = caps.of_kind(&candidate.kind);
        let tenant_key = (candidate.tenant_id.clone(), None);
        let kind_key = (candidate.tenant_id.clone(), Some(candidate.kind.clone()));
        for key in [&tenant_key, &kind_key] {
            if !running.contains_key(key) {
                let count = running_count(&mut *conn, &key.0, key.1.as_deref()).await?;
                running.insert(key.clone(), count);
            }
        }
        let cap = if caps.per_tenant > 0 && running[&tenant_key] >= i64::from(caps.per_tenant) {
            Some(Cap::Tenant)
        } else if kind_cap.is_some_and(|cap| running[&kind_key] >= i64::from(cap)) {
            Some(Cap::Kind)
        } else {
            None
        };
        match cap {
            Some(cap) => parked.push((candidate.job_id, cap)),
            None => {
                for key in [tenant_key, kind_key] {
                    *running.entry(key).or_default() += 1;
                }
                admitted.push(candidate.job_id);
            }
        }
    }
    for (job_id, cap) in &parked {
        sqlx::query(sql!(
            "UPDATE jobs SET capped = $2 WHERE job_id = $1 AND status = 'QUEUED'"
        ))
        .bind(job_id)
        .bind(cap.as_str())
        .execute(&mut *conn)
        .await?;
    }
    Ok((admitted, parked))
}

/// The tenant's RUNNING jobs, or those of one kind.
pub(crate) async fn running_count(
    db: impl SqliteExecutor<'_>,
    tenant_id: &str,
    kind: Option<&str>,
) -> sqlx::Result<i64> {
    sqlx::query_scalar(sql!(
        "SELECT COUNT(*) FROM jobs
         WHERE tenant_id = $1 AND status = 'RUNNING' AND ($2 IS NULL OR kind = $2)"
    ))
    .bind(tenant_id)
    .bind(kind)
    .fetch_one(db)
    .await
}

/// Cancels the running attempt if a cancel was asked; whether it did.
pub(crate) async fn cancel_if_asked(
    conn: &mut SqliteConnection,
    job_id: &str,
    attempt: i64,
    now: Millis,
) -> sqlx::Result<bool> {
    let done = sqlx::query(sql!(
        "UPDATE jobs SET status = 'CANCELLED', finished_at = $3, lease_expires_at = NULL,
             worker_id = NULL, cancel_requested = false
         WHERE job_id = $1 AND attempts = $2 AND status = 'RUNNING' AND cancel_requested = 1"
    ))
    .bind(job_id)
    .bind(attempt)
    .bind(now)
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Sets the batch's running attempts `SUCCEEDED` and stores the results
/// of those that applied (the fence). Returns the attempts that applied.
pub(crate) async fn succeed(
    conn: &mut SqliteConnection,
    successes: &[Success<'_>],
    now: Millis,
) -> sqlx::Result<Vec<(String, i64)>> {
    let pairs: Vec<(&str, i64)> = successes.iter().map(|s| (s.job_id, s.attempt)).collect();
    let applied: Vec<(String, i64)> = sqlx::query_as(sql!(
        "UPDATE jobs SET status = 'SUCCEEDED', finished_at = $1, progress = 1.0,
             error_type = NULL, error_message = NULL, error_details = NULL,
                 lease_expires_at = NULL,
             worker_id = NULL, cancel_requested = false
         WHERE status = 'RUNNING' AND (job_id, attempts) IN (
             SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each($2))
         RETURNING job_id, attempts"
    ))
    .bind(now)
    .bind(serde_json::to_string(&pairs).expect("pairs serialize"))
    .fetch_all(&mut *conn)
    .await?;
    // One result per job that applied: the fence above lets one attempt
    // per job through, and the conflict clause is a second guard for a row
    // left by an interrupted earlier write. A chunked result is named by
    // its attempt: chunks of any other attempt are never served.
    let results: Vec<serde_json::Value> = successes
        .iter()
        .filter(|s| {
            applied
                .iter()
                .any(|(job, attempt)| job == s.job_id && *attempt == s.attempt)
        })
        .map(|s| {
            serde_json::json!([
                s.job_id,
                s.document.unwrap_or(""),
                s.chunks.map(|_| s.attempt),
                s.chunks
            ])
        })
        .collect();
    if !results.is_empty() {
        sqlx::query(sql!(
            "INSERT INTO job_results (job_id, body, chunk_attempt, chunk_count)
             SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'),
                    json_extract(value, '$[2]'), json_extract(value, '$[3]')
             FROM json_each($1) WHERE true
             ON CONFLICT (job_id) DO UPDATE SET body = excluded.body,
                 chunk_attempt = excluded.chunk_attempt, chunk_count = excluded.chunk_count"
        ))
        .bind(serde_json::Value::Array(results).to_string())
        .execute(conn)
        .await?;
    }
    Ok(applied)
}

/// Running jobs whose lease lapsed; `'RUNNING'` a literal, so the partial
/// index `jobs_running_leases` serves it.
pub(crate) async fn lapsed(
    conn: &mut SqliteConnection,
    now: Millis,
    limit: i64,
) -> sqlx::Result<Vec<LapsedRow>> {
    sqlx::query_as(sql!(
        "SELECT job_id, attempts - handbacks AS counted, max_attempts, handbacks,
                COALESCE(NOT lease_taken_up, false) AS untaken,
                EXISTS (SELECT 1 FROM saga_runs r
                        WHERE r.job_id = jobs.job_id
                          AND r.phase IN ('forward', 'compensating')) AS saga_unfinished
         FROM jobs
         WHERE status = 'RUNNING' AND lease_expires_at < $1
         ORDER BY lease_expires_at LIMIT $2"
    ))
    .bind(now)
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// How many jobs are parked at each cap (as on Postgres).
pub(crate) async fn parked_groups(db: impl SqliteExecutor<'_>) -> sqlx::Result<Vec<ParkedGroup>> {
    sqlx::query_as(sql!(
        "SELECT tenant_id, NULL AS kind, 'tenant' AS capped, COUNT(*) AS parked FROM jobs
         WHERE capped = 'tenant' AND status = 'QUEUED' GROUP BY tenant_id
         UNION ALL
         SELECT tenant_id, kind, 'kind' AS capped, COUNT(*) AS parked FROM jobs
         WHERE capped = 'kind' AND status = 'QUEUED' GROUP BY tenant_id, kind"
    ))
    .fetch_all(db)
    .await
}

/// Wakes the first `limit` jobs of the tenant parked at its cap (as on
/// Postgres): the outbox rows first, then the marks, chosen by the same
/// query.
pub(crate) async fn wake_at_tenant_cap(
    conn: &mut SqliteConnection,
    tenant_id: &str,
    limit: i64,
) -> sqlx::Result<u64> {
    let woken: Vec<String> = sqlx::query_scalar(sql!(
        "UPDATE jobs SET capped = NULL
         WHERE job_id IN (
             SELECT job_id FROM jobs
             WHERE tenant_id = $1 AND capped = 'tenant' AND status = 'QUEUED'
             ORDER BY rank_at, job_id LIMIT $2)
         RETURNING job_id"
    ))
    .bind(tenant_id)
    .bind(limit)
    .fetch_all(&mut *conn)
    .await?;
    make_due_at_once(conn, &woken).await
}

/// [`wake_at_tenant_cap`] for the jobs of one kind parked at its cap.
pub(crate) async fn wake_at_kind_cap(
    conn: &mut SqliteConnection,
    tenant_id: &str,
    kind: &str,
    limit: i64,
) -> sqlx::Result<u64> {
    let woken: Vec<String> = sqlx::query_scalar(sql!(
        "UPDATE jobs SET capped = NULL
         WHERE job_id IN (
             SELECT job_id FROM jobs
             WHERE tenant_id = $1 AND kind = $2 AND capped = 'kind' AND status = 'QUEUED'
             ORDER BY rank_at, job_id LIMIT $3)
         RETURNING job_id"
    ))
    .bind(tenant_id)
    .bind(kind)
    .bind(limit)
    .fetch_all(&mut *conn)
    .await?;
    make_due_at_once(conn, &woken).await
}

/// Outbox rows for woken jobs, due before anything else, at their ranks,
/// unless the job rows are the queue. Returns how many were woken.
async fn make_due_at_once(conn: &mut SqliteConnection, job_ids: &[String]) -> sqlx::Result<u64> {
    if job_ids.is_empty() {
        return Ok(0);
    }
    sqlx::query(sql!(
        "INSERT INTO outbox (job_id, publish_at, rank_at, republish_ms)
         SELECT job_id, 0, COALESCE(rank_at, 0), 0 FROM jobs
         WHERE job_id IN (SELECT value FROM json_each($1)) AND NOT external
           AND NOT EXISTS (SELECT 1 FROM queue_in_job_rows)
         ON CONFLICT (job_id) DO UPDATE SET publish_at = 0, republish_ms = 0"
    ))
    .bind(json_list(job_ids.iter().map(String::as_str)))
    .execute(conn)
    .await?;
    Ok(job_ids.len() as u64)
}

/// The jobs a claim of due jobs takes (see `Store::claim_due`), in the
/// order it takes them: the tenants with a due job in turn, from the first
/// after `after_tenant` (wrapping around), each tenant's first by rank, as
/// evenly as `most` allows; one per tenant in turn, then a second per
/// tenant, and so on. Each step is one probe of `jobs_claimable`, so a
/// backlog costs nothing per claim. SQLite's one writer makes the choice
/// the claim's: no other claim runs between the two.
pub(crate) async fn due_job_ids(
    conn: &mut SqliteConnection,
    claim: &DueClaim<'_>,
) -> sqlx::Result<Vec<String>> {
    let most = usize::try_from(claim.most).unwrap_or(usize::MAX);
    let mut tenants: Vec<String> = Vec::new();
    let mut after = claim.after_tenant.to_owned();
    let mut wrapped = false;
    while tenants.len() < most {
        let next: Option<String> = sqlx::query_scalar(sql!(
            "SELECT tenant_id FROM jobs
             WHERE status = 'QUEUED' AND capped IS NULL AND NOT external AND tenant_id > ?1
             ORDER BY tenant_id LIMIT 1"
        ))
        .bind(&after)
        .fetch_optional(&mut *conn)
        .await?;
        let next = match next {
            Some(next) if wrapped && *next > *claim.after_tenant => break,
            Some(next) => next,
            None if wrapped || claim.after_tenant.is_empty() => break,
            None => {
                wrapped = true;
                after = String::new();
                continue;
            }
        };
        let due: bool = sqlx::query_scalar(sql!(
            "SELECT EXISTS (SELECT 1 FROM jobs
                            WHERE status = 'QUEUED' AND capped IS NULL AND NOT external
                              AND tenant_id = ?1 AND rank_at <= ?2 AND run_after <= ?3)"
        ))
        .bind(&next)
        .bind(claim.rank_before)
        .bind(claim.now)
        .fetch_one(&mut *conn)
        .await?;
        if due {
            tenants.push(next.clone());
        }
        after = next;
    }
    if tenants.is_empty() {
        return Ok(Vec::new());
    }
    let share = most.div_ceil(tenants.len());
    let mut per_tenant: Vec<std::vec::IntoIter<String>> = Vec::with_capacity(tenants.len());
    for tenant in &tenants {
        let ids: Vec<String> = sqlx::query_scalar(sql!(
            "SELECT job_id FROM jobs
             WHERE status = 'QUEUED' AND capped IS NULL AND NOT external AND tenant_id = ?1
               AND rank_at <= ?2 AND run_after <= ?3
             ORDER BY rank_at, job_id LIMIT ?4"
        ))
        .bind(tenant)
        .bind(claim.rank_before)
        .bind(claim.now)
        .bind(i64::try_from(share).unwrap_or(i64::MAX))
        .fetch_all(&mut *conn)
        .await?;
        per_tenant.push(ids.into_iter());
    }
    let mut chosen = Vec::with_capacity(most);
    while chosen.len() < most {
        let before = chosen.len();
        for ids in &mut per_tenant {
            if chosen.len() == most {
                break;
            }
            chosen.extend(ids.next());
        }
        if chosen.len() == before {
            break;
        }
    }
    Ok(chosen)
}
