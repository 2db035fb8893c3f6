//! Store methods only the tests call (submitting a job past the API,
//! forcing a lease to lapse, reading stored results): built with the
//! `test-hooks` feature, not part of the product's API.

use std::time::Duration;

use shared::settings::Caps;
use shared::{model::Job, time::now_ms};

use crate::{
    NewJob, Result, Store, StoredResult, Submission, on_pool, postgres, sql::Millis, sqlite,
};

impl Store {
    /// Submits one job without an idempotency key: a batch of one, due
    /// for the relay at once.
    pub async fn submit_job(&self, job: &NewJob) -> Result<Job> {
        let submission = Submission::at_once(job.clone(), now_ms());
        self.submit_batch(std::slice::from_ref(&submission), crate::Publishing::Relay)
            .await?;
        Ok(submission.queued())
    }

    /// Claims the next attempt of one job: [`Store::claim_attempts`] for a
    /// list of one.
    pub async fn claim_attempt(
        &self,
        job_id: &str,
        worker_id: &str,
        lease_until: i64,
    ) -> Result<Option<crate::Claim>> {
        let mut claims = self
            .claim_attempts(
                &[job_id.to_owned()],
                worker_id,
                lease_until,
                &Caps::default(),
            )
            .await?;
        Ok(claims.pop().flatten())
    }

    /// What a final-status transaction announces for these jobs (their
    /// webhook events, and a NOTIFY on Postgres), in a transaction of its
    /// own: for tests of the announcements without the rest of an
    /// attempt's end.
    pub async fn announce_final_now(&self, job_ids: &[String]) -> Result<()> {
        let mut tx = self.begin_write().await?;
        self.announce_final_all(&mut tx, job_ids, |_| None).await?;
        tx.commit().await
    }

    /// Forces the lease of a running attempt to lapse now: for tests of the
    /// sweeper and of fencing.
    pub async fn expire_lease_now(&self, job_id: &str) -> Result<()> {
        let _turn = self.write_turn().await;
        let past = Millis(now_ms() - 1);
        on_pool!(self,
            pool => postgres::test_hooks::set_lease(pool, job_id, past).await?,
            pool => sqlite::test_hooks::set_lease(pool, job_id, past).await?,
        );
        Ok(())
    }

    /// How many results the job has stored (0 or 1).
    pub async fn count_results(&self, job_id: &str) -> Result<i64> {
        Ok(on_pool!(self,
            pool => postgres::test_hooks::count_results(pool, job_id).await?,
            pool => sqlite::test_hooks::count_results(pool, job_id).await?,
        ))
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
        Ok(on_pool!(self,
            pool => postgres::test_hooks::chunk_counts(pool, job_id).await?,
            pool => sqlite::test_hooks::chunk_counts(pool, job_id).await?,
        ))
    }

    /// Postgres: a setting of the sessions the store's pool opens, as
    /// `SHOW` gives it; `None` on SQLite.
    pub async fn session_setting(&self, name: &str) -> Result<Option<String>> {
        let crate::Db::Postgres(pool) = &self.db else {
            return Ok(None);
        };
        Ok(Some(
            postgres::test_hooks::session_setting(pool, name).await?,
        ))
    }

    /// Postgres: the plans each statement prepared on the per-job pool's
    /// connections has had, as `(statement, generic plans, custom plans)`
    /// summed over its connections. Call it while nothing else uses the pool.
    pub async fn per_job_plans(&self) -> Result<Vec<(String, i64, i64)>> {
        let crate::Db::Postgres(pool) = &self.db else {
            return Ok(Vec::new());
        };
        let pool = self.per_job_pool(pool);
        // A connection given back is pinged before it is idle again; while
        // one is, an acquire may open a new connection instead of waiting
        // for it. Wait until every connection is idle.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while pool.num_idle() < pool.size() as usize && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Holding each connection while taking the next visits them all.
        let mut held = Vec::new();
        let mut plans: Vec<(String, i64, i64)> = Vec::new();
        for _ in 0..pool.size() {
            let mut conn = pool.acquire().await?;
            for (statement, generic, custom) in
                postgres::test_hooks::prepared_plans(&mut *conn).await?
            {
                match plans.iter_mut().find(|(seen, _, _)| *seen == statement) {
                    Some((_, g, c)) => (*g, *c) = (*g + generic, *c + custom),
                    None => plans.push((statement, generic, custom)),
                }
            }
            held.push(conn);
        }
        Ok(plans)
    }
}

impl crate::DueJobWaiter {
    /// The waiter, claiming again on its own only after `idle_look`: a
    /// test of its wakes sets it past its own deadline, so that only a
    /// wake can end a wait in time.
    pub fn with_idle_look(mut self, idle_look: Duration) -> Self {
        self.idle_look = idle_look;
        self
    }
}
