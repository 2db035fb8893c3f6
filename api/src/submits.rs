//! The group commit of submits, and the publishing of the jobs it makes.

use shared::{
    batch::Batcher,
    notify::Signals,
    store::{Store, Submission, Submitted},
};
use tracing::warn;
use worker::Queue;

/// Submits per group commit (see `idempotency::execute_submit`).
const SUBMIT_BATCH: usize = 64;

/// Starts the batcher every submit goes through (`AppState::submits`).
pub fn spawn_batcher(
    store: Store,
    queue: Queue,
    signals: Signals,
    republish_after: std::time::Duration,
) -> Batcher<Submission, Submitted> {
    let group = SubmitGroup {
        store,
        queue,
        signals,
        republish_after_ms: shared::time::duration_ms(republish_after),
    };
    Batcher::spawn(SUBMIT_BATCH, move |submissions: Vec<Submission>| {
        let group = group.clone();
        async move { group.write(submissions).await }
    })
}

/// What a group commit of submits needs.
#[derive(Clone)]
struct SubmitGroup {
    store: Store,
    queue: Queue,
    signals: Signals,
    republish_after_ms: i64,
}

impl SubmitGroup {
    /// Commits a batch of submits, then publishes its new jobs at once,
    /// saving the relay a transaction per batch: into the embedded queue
    /// (room reserved before the commit; with none, the relay takes them
    /// later), or to Redis in a task of its own, so a slow Redis holds up
    /// no answer (if that push fails, the rows are made due for the relay).
    /// Their outbox rows are written as published, so they are published
    /// again only if not claimed in time, like any other.
    async fn write(&self, submissions: Vec<Submission>) -> shared::Result<Vec<Submitted>> {
        let room = self.queue.reserve(submissions.len());
        let direct = room.is_some() || self.queue.is_redis();
        let outcomes = self
            .store
            .submit_batch(&submissions, direct.then_some(self.republish_after_ms))
            .await?;
        let new_jobs: Vec<String> = submissions
            .iter()
            .zip(&outcomes)
            .filter(|(_, outcome)| **outcome == Submitted::Inserted)
            .map(|(submission, _)| submission.job.job_id.clone())
            .collect();
        if new_jobs.is_empty() {
            return Ok(outcomes);
        }
        match room {
            Some(room) => room.send(&new_jobs),
            None if direct => {
                let group = self.clone();
                tokio::spawn(async move {
                    if let Err(error) = group.queue.publish(&new_jobs).await {
                        warn!(%error, count = new_jobs.len(), "publishing new jobs failed; the relay will");
                        let soon = shared::time::now_ms() + 1_000;
                        if let Err(error) = group.store.retry_outbox_soon(&new_jobs, soon).await {
                            warn!(%error, "could not hand the jobs to the relay; republished later");
                        }
                    }
                });
            }
            None => self.signals.outbox_changed(),
        }
        Ok(outcomes)
    }
}
