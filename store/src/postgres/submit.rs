//! Submits on Postgres.

use sqlx::{PgConnection, PgExecutor};

use crate::{
    Submission,
    sql::{JsonText, Millis},
};

/// A batch's keys, jobs and outbox rows as one statement. Each candidate
/// (a submit without a key, or the first submit of its key) makes its job
/// only if its key is written, as in the transactional path; keys are
/// written in key order, so two batches that share keys lock them in the
/// same order. The keys' conflict rule is the one of
/// `idempotency::upsert_keys`. Returns the keys written.
pub(crate) async fn submit_in_one_statement(
    db: impl PgExecutor<'_>,
    candidates: &[&Submission],
    ranks: &[Millis],
    now: Millis,
    republish_ms: i64,
    queue: Option<&str>,
) -> crate::Result<Vec<(String, String)>> {
    let key = |f: fn(&crate::SubmissionKey) -> &str| {
        candidates
            .iter()
            .map(|s| s.key.as_ref().map(f))
            .collect::<Vec<_>>()
    };
    let headers = candidates
        .iter()
        .map(|s| {
            s.key
                .as_ref()
                .map(|k| k.response.headers_json().map(JsonText))
                .transpose()
        })
        .collect::<crate::Result<Vec<_>>>()?;
    let written = sqlx::query_as(sql!(
        "WITH submitted AS (
             SELECT * FROM UNNEST($3::text[], $4::text[], $5::text[], $6::jsonb[], $7::bigint[],
                                  $8::timestamptz[], $9::text[], $10::text[], $11::text[],
                                  $12::timestamptz[], $13::bigint[], $14::jsonb[], $15::bytea[],
                                  $16::timestamptz[], $17::text[], $18::timestamptz[], $19::text[],
                                  $22::boolean[])
                 AS s (job_id, tenant_id, kind, params, max_attempts, created_at, key_tenant,
                       idem_key, fingerprint, expires_at, response_status, response_headers,
                       response_body, run_after, priority, rank_at, traceparent, external)
         ), written AS (
             INSERT INTO idempotency_keys (tenant_id, idem_key, fingerprint, created_at,
                 expires_at, response_status, response_headers, response_body)
             SELECT key_tenant, idem_key, fingerprint, $1, expires_at, response_status,
                    response_headers, response_body
             FROM submitted WHERE idem_key IS NOT NULL ORDER BY key_tenant, idem_key
             ON CONFLICT (tenant_id, idem_key) DO UPDATE SET
                 fingerprint = excluded.fingerprint, created_at = excluded.created_at,
                 expires_at = excluded.expires_at, response_status = excluded.response_status,
                 response_headers = excluded.response_headers,
                 response_body = excluded.response_body
             WHERE idempotency_keys.expires_at <= excluded.created_at
             RETURNING tenant_id, idem_key
         ), inserted AS (
             INSERT INTO jobs (job_id, tenant_id, kind, params, max_attempts, created_at,
                               run_after, status, priority, rank_at, traceparent, external)
             SELECT s.job_id, s.tenant_id, s.kind, s.params, s.max_attempts, s.created_at,
                    s.run_after, 'QUEUED', s.priority, s.rank_at, s.traceparent, s.external
             FROM submitted s
             WHERE s.idem_key IS NULL OR EXISTS (
                 SELECT 1 FROM written w
                 WHERE w.tenant_id = s.key_tenant AND w.idem_key = s.idem_key)
             RETURNING job_id, created_at, run_after, rank_at, external,
                       -- Workers that claim from the job rows are woken
                       -- once per transaction by the jobs due at once
                       -- (Postgres folds equal notifications into one); a
                       -- delayed job's due time moves their timer.
                       -- External jobs wake the leases of workers over
                       -- HTTP, whatever the queue, on a channel of their
                       -- own: the built-in workers have nothing to claim.
                       CASE WHEN $20::text IS NOT NULL OR external
                            THEN pg_notify(CASE WHEN external THEN $23 ELSE $21 END,
                                CASE WHEN run_after <= created_at THEN '0'
                                ELSE floor(extract(epoch FROM run_after) * 1000)::bigint::text
                                END) END AS woken
         ), queued AS (
             INSERT INTO outbox (job_id, publish_at, republish_ms, rank_at)
             SELECT job_id,
                    CASE WHEN run_after > created_at THEN run_after
                         ELSE created_at + interval '1 millisecond' * $2 END,
                    CASE WHEN run_after > created_at THEN 0 ELSE $2 END,
                    rank_at
             FROM inserted
             WHERE (run_after > created_at OR $2 >= 0) AND NOT external
               AND NOT EXISTS (SELECT 1 FROM queue_in_job_rows)
         )
         SELECT tenant_id, idem_key FROM written"
    ))
    .bind(now)
    .bind(republish_ms)
    .bind(
        candidates
            .iter()
            .map(|s| s.job.job_id.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(
        candidates
            .iter()
            .map(|s| s.job.tenant_id.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(
        candidates
            .iter()
            .map(|s| s.job.kind.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(
        candidates
            .iter()
            .map(|s| JsonText(s.job.params.clone()))
            .collect::<Vec<_>>(),
    )
    .bind(
        candidates
            .iter()
            .map(|s| s.job.max_attempts)
            .collect::<Vec<_>>(),
    )
    .bind(
        candidates
            .iter()
            .map(|s| Millis(s.created_at))
            .collect::<Vec<_>>(),
    )
    .bind(key(|k| &k.tenant_id))
    .bind(key(|k| &k.key))
    .bind(key(|k| &k.fingerprint))
    .bind(
        candidates
            .iter()
            .map(|s| s.key.as_ref().map(|k| Millis(k.expires_at)))
            .collect::<Vec<_>>(),
    )
    .bind(
        candidates
            .iter()
            .map(|s| s.key.as_ref().map(|k| i64::from(k.response.status)))
            .collect::<Vec<_>>(),
    )
    .bind(headers)
    .bind(
        candidates
            .iter()
            .map(|s| s.key.as_ref().map(|k| k.response.body.as_slice()))
            .collect::<Vec<_>>(),
    )
    .bind(
        candidates
            .iter()
            .map(|s| Millis(s.run_after))
            .collect::<Vec<_>>(),
    )
    .bind(
        candidates
            .iter()
            .map(|s| s.job.priority.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(ranks)
    .bind(
        candidates
            .iter()
            .map(|s| s.traceparent.as_deref())
            .collect::<Vec<_>>(),
    )
    .bind(queue)
    .bind(crate::QUEUE_CHANNEL)
    .bind(
        candidates
            .iter()
            .map(|s| s.job.external)
            .collect::<Vec<_>>(),
    )
    .bind(crate::WORK_CHANNEL)
    .fetch_all(db)
    .await?;
    Ok(written)
}

/// Inserts the jobs and hands them to the queue at their due times
/// (`queue_jobs`). Submits go through [`submit_in_one_statement`]; this
/// serves what makes a job without a submit (a retry of a job).
pub(crate) async fn insert_jobs(
    conn: &mut PgConnection,
    submissions: &[&Submission],
    ranks: &[Millis],
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "WITH inserted AS (
             INSERT INTO jobs (job_id, tenant_id, kind, params, max_attempts, created_at,
                               run_after, status, priority, rank_at, traceparent, external)
             SELECT job_id, tenant_id, kind, params, max_attempts, created_at, run_after,
                    'QUEUED', priority, rank_at, traceparent, external
             FROM UNNEST($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::bigint[],
                         $6::timestamptz[], $7::timestamptz[], $8::text[], $9::timestamptz[],
                         $10::text[], $11::boolean[])
                 AS s (job_id, tenant_id, kind, params, max_attempts, created_at, run_after,
                       priority, rank_at, traceparent, external)
             RETURNING job_id, run_after, rank_at
         )
         SELECT queue_jobs(array_agg(job_id), array_agg(run_after), array_agg(rank_at))
         FROM inserted"
    ))
    .bind(
        submissions
            .iter()
            .map(|s| s.job.job_id.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(
        submissions
            .iter()
            .map(|s| s.job.tenant_id.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(
        submissions
            .iter()
            .map(|s| s.job.kind.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(
        submissions
            .iter()
            .map(|s| JsonText(s.job.params.clone()))
            .collect::<Vec<_>>(),
    )
    .bind(
        submissions
            .iter()
            .map(|s| s.job.max_attempts)
            .collect::<Vec<_>>(),
    )
    .bind(
        submissions
            .iter()
            .map(|s| Millis(s.created_at))
            .collect::<Vec<_>>(),
    )
    .bind(
        submissions
            .iter()
            .map(|s| Millis(s.run_after))
            .collect::<Vec<_>>(),
    )
    .bind(
        submissions
            .iter()
            .map(|s| s.job.priority.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(ranks)
    .bind(
        submissions
            .iter()
            .map(|s| s.traceparent.as_deref())
            .collect::<Vec<_>>(),
    )
    .bind(
        submissions
            .iter()
            .map(|s| s.job.external)
            .collect::<Vec<_>>(),
    )
    .execute(conn)
    .await?;
    Ok(())
}
