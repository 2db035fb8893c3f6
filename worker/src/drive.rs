//! The worker driven by its caller instead of by a queue: every due job run
//! now, in the calling task, until none is due (as zero-to-production's
//! `dispatch_all_pending_emails`). Tests use it to assert on what running
//! the jobs did, without starting a pool or waiting for one.

use std::time::SystemTime;

use serde_json::json;
use shared::time::{duration_ms, now_ms};

use crate::{Result, runner::Runner};

/// How far a taken outbox row is pushed ahead. The claim deletes the row of
/// every job it runs, so only a job this call could not claim keeps it,
/// and it is not due again before this call ends.
const NOT_AGAIN_BEFORE_MS: i64 = 60_000;

/// Runs every job whose outbox row is due, as a queue delivery would, then
/// looks again (a retry due at once is run in the same call), until none
/// is due; returns how many deliveries it handled. A retry scheduled for
/// later is left for a later call.
pub async fn run_due_jobs(runner: &Runner) -> Result<usize> {
    Ok(deliver_due_jobs(runner).await?.len())
}

/// [`run_due_jobs`], answering the job of each delivery in the order they
/// were delivered: the relay's order (by rank), which a test of priorities
/// asserts on without reading any clock.
pub async fn deliver_due_jobs(runner: &Runner) -> Result<Vec<String>> {
    let mut delivered = Vec::new();
    loop {
        let due = runner
            .store
            .take_due_outbox(64, NOT_AGAIN_BEFORE_MS, |_| async { true })
            .await?;
        if due.is_empty() {
            return Ok(delivered);
        }
        for job in due {
            runner
                .handle(json!({"job_id": job.job_id, "tenant_id": job.tenant_id}))
                .await;
            delivered.push(job.job_id);
        }
    }
}

/// The claims of a worker where the job rows are the queue
/// (`Store::claim_due`), each made when the caller asks and its jobs run
/// at once, one after another. A pool claims as many jobs as it has free
/// slots, so which jobs one claim takes is what the fair turn between
/// tenants, the rank order and the caps decide; a test asserts on that
/// choice here, claim by claim, where a pool would only show it in the
/// times its jobs started.
#[derive(Debug, Default)]
pub struct DueClaims {
    /// The tenant the last claim served last: the next starts after it,
    /// as a pool's next claim does.
    after_tenant: String,
}

impl DueClaims {
    pub fn new() -> Self {
        Self::default()
    }

    /// Claims up to `most` due jobs under the runner's caps (parking what
    /// they hold back), runs each to its outcome in the order claimed, and
    /// answers their ids in that order; empty when nothing was claimable.
    pub async fn run_next(&mut self, runner: &Runner, most: usize) -> Result<Vec<String>> {
        let lease_until = now_ms() + duration_ms(runner.lease());
        let claims = runner
            .store
            .claim_due(
                &runner.worker_id,
                most,
                &self.after_tenant,
                lease_until,
                &runner.caps,
            )
            .await?;
        if let Some(cursor) = store::claim_cursor(&self.after_tenant, &claims) {
            self.after_tenant = cursor;
        }
        let mut ran = Vec::with_capacity(claims.len());
        for claim in claims {
            ran.push(claim.job_id.clone());
            if let Some(attempt) = runner.run_claim(claim, SystemTime::now()).await {
                runner.conclude(attempt).await;
            }
        }
        Ok(ran)
    }
}
