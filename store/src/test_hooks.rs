//! Store methods only the tests call (submitting a job past the API,
//! forcing a lease to lapse, counting stored results): built with the
//! `test-hooks` feature, not part of the product's API.

use sqlx::Row;

use super::{NewJob, Store, StoredResult, Submission};
use crate::Result;
use shared::{model::Job, time::now_ms};

impl Store {
    /// Submits one job without an idempotency key: a batch of one, due
    /// for the relay at once.
    pub async fn submit_job(&self, job: &NewJob) -> Result<Job> {
        let submission = Submission {
            job: job.clone(),
            created_at: now_ms(),
            key: None,
        };
        self.submit_batch(std::slice::from_ref(&submission), None)
            .await?;
        Ok(job.queued(submission.created_at))
    }

    /// Forces the lease of a running attempt to lapse now: for tests of the
    /// sweeper and of fencing.
    pub async fn expire_lease_now(&self, job_id: &str) -> Result<()> {
        let _turn = self.write_turn().await;
        sqlx::query("UPDATE jobs SET lease_expires_at = $2 WHERE job_id = $1")
            .bind(job_id)
            .bind(now_ms() - 1)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// How many results the job has stored (0 or 1).
    pub async fn count_results(&self, job_id: &str) -> Result<i64> {
        let row = sqlx::query("SELECT COUNT(*) AS n FROM job_results WHERE job_id = $1")
            .bind(job_id)
            .fetch_one(&self.pool)
            .await?;
        Ok(row.try_get("n")?)
    }

    /// The result of the tenant's job when it is one document (`None` for
    /// a chunked result).
    pub async fn job_result(&self, tenant_id: &str, job_id: &str) -> Result<Option<String>> {
        Ok(match self.stored_result(tenant_id, job_id).await? {
            Some(StoredResult::Document(body)) => Some(body),
            _ => None,
        })
    }

    /// How many chunks each attempt of the job has stored, by attempt: for
    /// tests of the fencing and the cleanup.
    pub async fn result_chunk_counts(&self, job_id: &str) -> Result<Vec<(i64, i64)>> {
        sqlx::query(
            "SELECT attempt, COUNT(*) AS n FROM job_result_chunks WHERE job_id = $1
             GROUP BY attempt ORDER BY attempt",
        )
        .bind(job_id)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|row| Ok((row.try_get("attempt")?, row.try_get("n")?)))
        .collect()
    }
}
