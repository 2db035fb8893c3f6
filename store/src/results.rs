//! Job results: one row per job in `job_results`, and for big results the
//! chunks an attempt wrote while it ran (`job_result_chunks`).
//!
//! A chunk insert is fenced by its attempt like every write an attempt
//! makes, and on Postgres it holds a share lock on the job's row until it
//! commits, so it cannot interleave with a change of attempt or status: once
//! an attempt is superseded or ended, no chunk of it appears any more. The
//! chunks of an attempt that did not succeed are therefore deleted for good
//! by the next attempt when it starts writing ([`Store::discard_chunks_before`])
//! or, when none follows, in the transaction of the job's final status.

use sqlx::Row;

use super::{Store, WriteTx, built, pairs_equal};
use crate::Result;
use shared::model::JobStatus;

/// Chunks deleted per transaction when an attempt clears its predecessors'
/// (about 256 KiB each): short transactions, so SQLite's one writer lock is
/// not held for the whole cleanup.
const DISCARD_BATCH: usize = 16;

/// A `SUCCEEDED` job's result as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredResult {
    /// The whole result, one JSON document.
    Document(String),
    /// Chunks `0..count` written by `attempt` are the result, in order.
    Chunks { attempt: i64, count: i64 },
}

impl Store {
    /// The stored result of the tenant's job, if it has one.
    pub async fn stored_result(
        &self,
        tenant_id: &str,
        job_id: &str,
    ) -> Result<Option<StoredResult>> {
        let row = sqlx::query(
            "SELECT r.body, r.chunk_attempt, r.chunk_count
             FROM job_results r JOIN jobs j ON j.job_id = r.job_id
             WHERE r.job_id = $1 AND j.tenant_id = $2",
        )
        .bind(job_id)
        .bind(tenant_id)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let attempt: Option<i64> = row.try_get("chunk_attempt")?;
        let count: Option<i64> = row.try_get("chunk_count")?;
        Ok(Some(match (attempt, count) {
            (Some(attempt), Some(count)) => StoredResult::Chunks { attempt, count },
            _ => StoredResult::Document(row.try_get("body")?),
        }))
    }

    /// Chunk `seq` of an attempt's result.
    pub async fn result_chunk(
        &self,
        job_id: &str,
        attempt: i64,
        seq: i64,
    ) -> Result<Option<String>> {
        let row = sqlx::query(
            "SELECT body FROM job_result_chunks WHERE job_id = $1 AND attempt = $2 AND seq = $3",
        )
        .bind(job_id)
        .bind(attempt)
        .bind(seq)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|row| row.try_get("body")).transpose()?)
    }

    /// Writes chunk `seq` of the attempt's result, only while the attempt
    /// is the current one and still running. Returns whether it was
    /// written: `false` means the attempt was superseded or ended, and must
    /// stop.
    pub async fn write_result_chunk(
        &self,
        job_id: &str,
        attempt: i64,
        seq: i64,
        body: &str,
    ) -> Result<bool> {
        let _turn = self.write_turn().await;
        // The share lock (Postgres) makes a claim, a sweep or a final
        // status of this job wait for this insert to commit, so no chunk of
        // a superseded attempt is written after its successor cleared them.
        let written = sqlx::query(built(&format!(
            "INSERT INTO job_result_chunks (job_id, attempt, seq, body)
             SELECT job_id, attempts, $3, $4 FROM jobs
             WHERE job_id = $1 AND attempts = $2 AND status = $5{}",
            self.dialect.for_share()
        )))
        .bind(job_id)
        .bind(attempt)
        .bind(seq)
        .bind(body)
        .bind(JobStatus::Running.as_str())
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(written == 1)
    }

    /// Deletes the chunks that attempts before `attempt` left (they were
    /// superseded or retried: none of them can be the result any more), a
    /// few per transaction. Returns how many it deleted.
    pub async fn discard_chunks_before(&self, job_id: &str, attempt: i64) -> Result<u64> {
        let mut deleted = 0;
        loop {
            let keys = sqlx::query(
                "SELECT attempt, seq FROM job_result_chunks
                 WHERE job_id = $1 AND attempt < $2 ORDER BY attempt, seq LIMIT $3",
            )
            .bind(job_id)
            .bind(attempt)
            .bind(DISCARD_BATCH as i64)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|row| {
                Ok((
                    row.try_get::<i64, _>("attempt")?,
                    row.try_get::<i64, _>("seq")?,
                ))
            })
            .collect::<Result<Vec<(i64, i64)>>>()?;
            if keys.is_empty() {
                return Ok(deleted);
            }
            let _turn = self.write_turn().await;
            let sql = format!(
                "DELETE FROM job_result_chunks WHERE job_id = $1 AND ({})",
                pairs_equal(2, keys.len(), "attempt", "seq")
            );
            let mut query = sqlx::query(built(&sql)).bind(job_id);
            for (attempt, seq) in &keys {
                query = query.bind(*attempt).bind(*seq);
            }
            deleted += query.execute(&self.pool).await?.rows_affected();
        }
    }
}

/// Deletes every chunk of the job, in the caller's transaction: for a job
/// that reaches a final status without a result.
pub(super) async fn discard_all_chunks(tx: &mut WriteTx, job_id: &str) -> Result<()> {
    sqlx::query("DELETE FROM job_result_chunks WHERE job_id = $1")
        .bind(job_id)
        .execute(&mut **tx)
        .await?;
    Ok(())
}
