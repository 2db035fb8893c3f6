//! Attempts on Postgres.

use shared::settings::Caps;
use sqlx::{PgConnection, PgExecutor};

use crate::{
    rows::attempts::{ClaimRow, DueClaim, LapsedRow, ParkedGroup, Success},
    sql::{JsonText, Millis},
};

pub(crate) use crate::portable::postgres::attempts::*;

/// Claims the jobs of `job_ids` that are queued and due: with no cap set,
/// one prepared statement; with caps, one call of `claim_jobs` (see its
/// migration), which parks the jobs over a cap.
pub(crate) async fn claim(
    db: impl PgExecutor<'_>,
    job_ids: &[String],
    now: Millis,
    lease_until: Millis,
    worker_id: &str,
    caps: &Caps,
) -> sqlx::Result<Vec<ClaimRow>> {
    if caps.is_none() {
        let claims = SlotClaims {
            job_ids,
            lease_until,
            worker_id,
        };
        return Ok(claim_and_succeed(db, &claims, &[], now, true)
            .await?
            .claimed);
    }
    sqlx::query_as(sql!(
        "SELECT job_id, tenant_id, kind, params, attempts, handbacks, max_attempts, created_at,
                traceparent
         FROM claim_jobs($1, $2, $3, $4, $5, $6, $7)"
    ))
    .bind(job_ids)
    .bind(now)
    .bind(lease_until)
    .bind(worker_id)
    .bind(i64::from(caps.per_tenant))
    .bind(capped_kinds(caps))
    .bind(kind_caps(caps))
    .fetch_all(db)
    .await
}

/// The kinds with a cap of their own, as `claim_jobs` binds them.
pub(crate) fn capped_kinds(caps: &Caps) -> Vec<&str> {
    caps.per_kind
        .iter()
        .map(|(kind, _)| kind.as_str())
        .collect()
}

/// Each capped kind's cap, in the order of [`capped_kinds`].
pub(crate) fn kind_caps(caps: &Caps) -> Vec<i64> {
    caps.per_kind
        .iter()
        .map(|(_, cap)| i64::from(*cap))
        .collect()
}

/// Cancels the running attempt if a cancel was asked; whether it did.
pub(crate) async fn cancel_if_asked(
    conn: &mut PgConnection,
    job_id: &str,
    attempt: i64,
    now: Millis,
) -> sqlx::Result<bool> {
    let done = sqlx::query(sql!(
        "UPDATE jobs SET status = 'CANCELLED', finished_at = $3, lease_expires_at = NULL,
             worker_id = NULL, cancel_requested = false
         WHERE job_id = $1 AND attempts = $2 AND status = 'RUNNING' AND cancel_requested"
    ))
    .bind(job_id)
    .bind(attempt)
    .bind(now)
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// The claims of a slot write: the jobs to claim, and the lease and
/// worker the claims take.
pub(crate) struct SlotClaims<'a> {
    pub(crate) job_ids: &'a [String],
    pub(crate) lease_until: Millis,
    pub(crate) worker_id: &'a str,
}

/// What one [`claim_and_succeed`] did.
pub(crate) struct SlotWrites {
    pub(crate) claimed: Vec<ClaimRow>,
    /// The attempts that ended, as `(job_id, attempt)`.
    pub(crate) ended: Vec<(String, i64)>,
}

/// A row of [`claim_and_succeed`]: a claim, or an attempt that ended.
#[derive(sqlx::FromRow)]
struct SlotRow {
    claimed: bool,
    job_id: String,
    attempts: i64,
    tenant_id: Option<String>,
    kind: Option<String>,
    params: Option<JsonText>,
    handbacks: Option<i64>,
    max_attempts: Option<i64>,
    created_at: Option<Millis>,
    traceparent: Option<String>,
}

/// Claims without caps and ends successful attempts, in one statement,
/// sent without `BEGIN` and `COMMIT` when it is all its transaction does:
/// a worker's claims and successes waiting at one moment commit once.
/// Either list may be empty.
///
/// The claim takes the jobs of `claims` that are queued, due and not
/// external (those are leased over HTTP), and deletes their outbox rows. The guards are written as in `claim_jobs`
/// (`CASE`, so that only `jobs_pkey` serves the ids). The outbox delete
/// names its ids in the outbox's collation: compared in the jobs' `"C"`,
/// `outbox_pkey` could not serve them and a prepared plan would scan the
/// outbox on every claim. The delete sees the outbox as the statement
/// began: a row written for one of these jobs while the update waited for
/// its lock (a relay handing a queued job a row) stays behind, and the
/// relay drops it when it comes due rather than publish a job no longer
/// queued (`Store::take_due_outbox`).
///
/// Each success sets its job `SUCCEEDED`, stores its result and sends the
/// batch's NOTIFY (delivered at commit); the result insert joins the
/// update's rows, so only an attempt that applied stores its result (the
/// fence). `unwatched_only` leaves out every job a webhook may want an
/// event of: one marked `webhook_watched` (checked again on a row that
/// changed while the statement waited for it), or of a tenant with an
/// enabled tenant-wide webhook. A claim and a success never change one
/// row: the claim needs the job queued, the success needs it running.
pub(crate) async fn claim_and_succeed(
    db: impl PgExecutor<'_>,
    claims: &SlotClaims<'_>,
    successes: &[Success<'_>],
    now: Millis,
    unwatched_only: bool,
) -> sqlx::Result<SlotWrites> {
    let rows: Vec<SlotRow> = sqlx::query_as(sql!(
        "WITH claimed AS (
             UPDATE jobs AS j
             SET status = 'RUNNING', attempts = j.attempts + 1, capped = NULL,
                 started_at = COALESCE(j.started_at, $1), lease_expires_at = $9,
                 worker_id = $10
             WHERE j.job_id = ANY ($8)
               AND CASE WHEN j.status = 'QUEUED' AND j.run_after <= $1 AND NOT j.external
                        THEN true ELSE false END
             RETURNING j.job_id, j.tenant_id, j.kind, j.params, j.attempts, j.handbacks,
                       j.max_attempts, j.created_at, j.traceparent
         ), unpublished AS (
             DELETE FROM outbox o
             WHERE o.job_id = ANY (ARRAY(SELECT c.job_id COLLATE \"default\" FROM claimed c))
         ), attempt AS (
             SELECT * FROM UNNEST($3::text[], $4::bigint[], $5::jsonb[], $6::bigint[])
                 AS a (job_id, attempt, body, chunk_count)
         ), done AS (
             UPDATE jobs SET status = 'SUCCEEDED', finished_at = $1, progress = 1.0,
                 error_type = NULL, error_message = NULL, error_details = NULL,
                 lease_expires_at = NULL,
                 worker_id = NULL, cancel_requested = false
             FROM attempt a
             WHERE jobs.job_id = a.job_id
               AND CASE WHEN jobs.attempts = a.attempt AND jobs.status = 'RUNNING'
                        THEN true ELSE false END
               AND NOT ($7 AND (jobs.webhook_watched OR EXISTS (
                   SELECT 1 FROM webhooks w
                   WHERE w.tenant_id = jobs.tenant_id AND w.job_id IS NULL AND w.enabled)))
             RETURNING jobs.job_id, jobs.attempts
         ), stored AS (
             INSERT INTO job_results (job_id, body, chunk_attempt, chunk_count)
             SELECT DISTINCT ON (a.job_id) a.job_id, a.body,
                    CASE WHEN a.chunk_count IS NOT NULL THEN a.attempt END, a.chunk_count
             FROM attempt a JOIN done ON done.job_id = a.job_id AND done.attempts = a.attempt
             ON CONFLICT (job_id) DO UPDATE SET body = excluded.body,
                 chunk_attempt = excluded.chunk_attempt, chunk_count = excluded.chunk_count
         ), notified AS (
             SELECT pg_notify($2, string_agg(job_id, ',')) FROM done HAVING COUNT(*) > 0
         )
         SELECT true AS claimed, job_id, attempts, tenant_id, kind, params, handbacks,
                max_attempts, created_at, traceparent
         FROM claimed
         UNION ALL
         SELECT false, done.job_id, done.attempts, NULL, NULL, NULL, NULL, NULL, NULL, NULL
         FROM done LEFT JOIN notified ON true"
    ))
    .bind(now)
    .bind(crate::FINISHED_CHANNEL)
    .bind(successes.iter().map(|s| s.job_id).collect::<Vec<_>>())
    .bind(successes.iter().map(|s| s.attempt).collect::<Vec<_>>())
    .bind(
        successes
            .iter()
            .map(|s| s.document.map(|d| JsonText(d.to_owned())))
            .collect::<Vec<_>>(),
    )
    .bind(successes.iter().map(|s| s.chunks).collect::<Vec<_>>())
    .bind(unwatched_only)
    .bind(claims.job_ids)
    .bind(claims.lease_until)
    .bind(claims.worker_id)
    .fetch_all(db)
    .await?;
    let mut writes = SlotWrites {
        claimed: Vec::new(),
        ended: Vec::new(),
    };
    for row in rows {
        if !row.claimed {
            writes.ended.push((row.job_id, row.attempts));
            continue;
        }
        let missing = || sqlx::Error::ColumnNotFound("a claim's columns".into());
        writes.claimed.push(ClaimRow {
            job_id: row.job_id,
            tenant_id: row.tenant_id.ok_or_else(missing)?,
            kind: row.kind.ok_or_else(missing)?,
            params: row.params.ok_or_else(missing)?,
            attempts: row.attempts,
            handbacks: row.handbacks.ok_or_else(missing)?,
            max_attempts: row.max_attempts.ok_or_else(missing)?,
            created_at: row.created_at.ok_or_else(missing)?,
            traceparent: row.traceparent,
        });
    }
    Ok(writes)
}

/// Ends successful attempts (see [`claim_and_succeed`]); returns the
/// attempts that applied.
pub(crate) async fn succeed(
    db: impl PgExecutor<'_>,
    successes: &[Success<'_>],
    now: Millis,
    unwatched_only: bool,
) -> sqlx::Result<Vec<(String, i64)>> {
    let claims = SlotClaims {
        job_ids: &[],
        lease_until: now,
        worker_id: "",
    };
    Ok(
        claim_and_succeed(db, &claims, successes, now, unwatched_only)
            .await?
            .ended,
    )
}

/// Running jobs whose lease lapsed, locked, found by the partial index
/// `jobs_leases` (only a running job holds a lease).
pub(crate) async fn lapsed(
    conn: &mut PgConnection,
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
         ORDER BY lease_expires_at LIMIT $2 FOR UPDATE SKIP LOCKED"
    ))
    .bind(now)
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// The tenant's RUNNING jobs, or those of one kind.
pub(crate) async fn running_count(
    db: impl PgExecutor<'_>,
    tenant_id: &str,
    kind: Option<&str>,
) -> sqlx::Result<i64> {
    sqlx::query_scalar(sql!(
        "SELECT COUNT(*) FROM jobs
         WHERE tenant_id = $1 AND status = 'RUNNING' AND ($2::text IS NULL OR kind = $2)"
    ))
    .bind(tenant_id)
    .bind(kind)
    .fetch_one(db)
    .await
}

/// How many jobs are parked at each cap: per tenant at the tenant's cap,
/// per tenant and kind at a kind's.
pub(crate) async fn parked_groups(db: impl PgExecutor<'_>) -> sqlx::Result<Vec<ParkedGroup>> {
    sqlx::query_as(sql!(
        "SELECT tenant_id, NULL::text AS kind, 'tenant' AS capped, COUNT(*) AS parked FROM jobs
         WHERE capped = 'tenant' AND status = 'QUEUED' GROUP BY tenant_id
         UNION ALL
         SELECT tenant_id, kind, 'kind' AS capped, COUNT(*) AS parked FROM jobs
         WHERE capped = 'kind' AND status = 'QUEUED' GROUP BY tenant_id, kind"
    ))
    .fetch_all(db)
    .await
}

/// Wakes the first `limit` jobs of the tenant parked at its cap and hands
/// them to the queue (`queue_jobs`). Returns how many.
pub(crate) async fn wake_at_tenant_cap(
    conn: &mut PgConnection,
    tenant_id: &str,
    limit: i64,
) -> sqlx::Result<u64> {
    let woken: i64 = sqlx::query_scalar(sql!(
        "WITH woken AS (
             UPDATE jobs SET capped = NULL
             WHERE job_id IN (
                 SELECT job_id FROM jobs
                 WHERE tenant_id = $1 AND capped = 'tenant' AND status = 'QUEUED'
                 ORDER BY rank_at, job_id LIMIT $2 FOR UPDATE SKIP LOCKED)
             RETURNING job_id, run_after, rank_at
         ), queued AS (
             SELECT queue_jobs(array_agg(job_id), array_agg(run_after), array_agg(rank_at))
             FROM woken
         )
         SELECT count(*) FROM woken, queued"
    ))
    .bind(tenant_id)
    .bind(limit)
    .fetch_one(conn)
    .await?;
    Ok(u64::try_from(woken).unwrap_or(0))
}

/// [`wake_at_tenant_cap`] for the jobs of one kind parked at its cap.
pub(crate) async fn wake_at_kind_cap(
    conn: &mut PgConnection,
    tenant_id: &str,
    kind: &str,
    limit: i64,
) -> sqlx::Result<u64> {
    let woken: i64 = sqlx::query_scalar(sql!(
        "WITH woken AS (
             UPDATE jobs SET capped = NULL
             WHERE job_id IN (
                 SELECT job_id FROM jobs
                 WHERE tenant_id = $1 AND kind = $2 AND capped = 'kind' AND status = 'QUEUED'
                 ORDER BY rank_at, job_id LIMIT $3 FOR UPDATE SKIP LOCKED)
             RETURNING job_id, run_after, rank_at
         ), queued AS (
             SELECT queue_jobs(array_agg(job_id), array_agg(run_after), array_agg(rank_at))
             FROM woken
         )
         SELECT count(*) FROM woken, queued"
    ))
    .bind(tenant_id)
    .bind(kind)
    .bind(limit)
    .fetch_one(conn)
    .await?;
    Ok(u64::try_from(woken).unwrap_or(0))
}

/// Claims up to `claim.most` due jobs (the function `claim_due_jobs`, see
/// its migration): the tenants in turn, each tenant's first by rank, under
/// the caps; in the order they were taken.
pub(crate) async fn claim_due(
    db: impl PgExecutor<'_>,
    claim: &DueClaim<'_>,
) -> sqlx::Result<Vec<ClaimRow>> {
    sqlx::query_as(sql!(
        "SELECT job_id, tenant_id, kind, params, attempts, handbacks, max_attempts, created_at,
                traceparent
         FROM claim_due_jobs($1, $2, $3, $4, $5, $6, $7, $8, $9)"
    ))
    .bind(claim.most)
    .bind(claim.after_tenant)
    .bind(claim.now)
    .bind(claim.rank_before)
    .bind(claim.lease_until)
    .bind(claim.worker_id)
    .bind(i64::from(claim.caps.per_tenant))
    .bind(capped_kinds(claim.caps))
    .bind(kind_caps(claim.caps))
    .fetch_all(db)
    .await
}

/// Sends `payload` on `channel`, delivered when the caller's transaction
/// commits.
pub(crate) async fn notify(
    db: impl PgExecutor<'_>,
    channel: &str,
    payload: &str,
) -> sqlx::Result<()> {
    sqlx::query(sql!("SELECT pg_notify($1, $2)"))
        .bind(channel)
        .bind(payload)
        .execute(db)
        .await?;
    Ok(())
}

/// The earliest due time after `now` of a claimable job that was not due
/// when made (a delayed job, a retry, a hand-back): one probe of
/// `jobs_due_later`. A job due at once is claimable already, and woken by
/// the NOTIFY of the statement that made it.
pub(crate) async fn next_due_later(
    db: impl PgExecutor<'_>,
    now: Millis,
) -> sqlx::Result<Option<Millis>> {
    sqlx::query_scalar(sql!(
        "SELECT min(run_after) FROM jobs
         WHERE status = 'QUEUED' AND capped IS NULL AND run_after > created_at
           AND run_after > $1"
    ))
    .bind(now)
    .fetch_one(db)
    .await
}
