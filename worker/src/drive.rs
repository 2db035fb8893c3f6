//! The worker driven by its caller instead of by a queue: every due job run
//! now, in the calling task, until none is due (as zero-to-production's
//! `dispatch_all_pending_emails`). Tests use it to assert on what running
//! the jobs did, without starting a pool or waiting for one.

use serde_json::json;

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
    let mut handled = 0;
    loop {
        let due = runner
            .store
            .take_due_outbox(64, NOT_AGAIN_BEFORE_MS, |_| async { true })
            .await?;
        if due.is_empty() {
            return Ok(handled);
        }
        for job in due {
            runner
                .handle(json!({"job_id": job.job_id, "tenant_id": job.tenant_id}))
                .await;
            handled += 1;
        }
    }
}
