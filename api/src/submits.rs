//! Submits: the `Idempotency-Key` steps of `crate::idempotency` taken
//! for a group of submits at once (group commit), and the publishing of
//! the jobs they make.

use actix_web::{HttpRequest, HttpResponse};
use queue::{Handoff, Queue};
use shared::notify::Signals;
use store::{Publishing, QueuedJob, Store, Submission, SubmissionKey, Submitted, batch::Batcher};

use crate::{
    error::{ApiError, ApiResult},
    idempotency::{Answer, IdempotencyKey, NextStep, fingerprint},
    state::AppState,
};

/// Submits per group commit.
const SUBMIT_BATCH: usize = 64;

/// Submits a job, with the guarantees of `idempotency::execute`, through
/// the group commit of submits (`AppState::submits`): one transaction for
/// all the submits waiting at that moment. `answer` is the 202 the job
/// gets, stored against the key with it.
pub async fn submit(
    state: &AppState,
    key: &IdempotencyKey,
    request: &HttpRequest,
    body: &[u8],
    mut submission: Submission,
    answer: Answer,
) -> ApiResult<HttpResponse> {
    submission.key = key.0.as_ref().map(|key| SubmissionKey {
        tenant_id: submission.job.tenant_id.clone(),
        key: key.clone(),
        fingerprint: fingerprint(request, body),
        expires_at: submission
            .created_at
            .saturating_add(shared::time::duration_ms(state.idempotency_ttl)),
        response: answer.0.clone(),
    });
    let submitted = match state.submits.call(submission.clone()).await {
        Ok(submitted) => submitted,
        Err(error) if error.is_unavailable() => return Err(error.into()),
        // A batch fails as a whole (on one bad row, say): this submit is
        // written again as a batch of its own, so that only its own row
        // can fail it.
        Err(_) => {
            let submitted = state
                .store
                .submit_batch(std::slice::from_ref(&submission), Publishing::Relay)
                .await?
                .pop()
                .ok_or_else(|| ApiError::Internal("a batch of one answered nothing".into()))?;
            if submitted == Submitted::Inserted {
                // Written due, without publishing: the relay's.
                state.signals.outbox_changed();
            }
            submitted
        }
    };
    match submitted {
        Submitted::Inserted => {
            metrics::counter!("receipt_jobs_submitted_total", "kind" => submission.job.kind)
                .increment(1);
            Ok(answer.into_response(false))
        }
        Submitted::Found(found) => {
            let key = key.0.as_deref().unwrap_or_default();
            NextStep::of(found, key).answer_without_running(key)
        }
    }
}

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
    /// Commits a batch of submits, then publishes its new jobs at once
    /// (see [`queue::Handoff`]), saving the relay a transaction per batch;
    /// a push to Redis runs in a task of its own, so a slow Redis holds up
    /// no answer.
    async fn write(&self, submissions: Vec<Submission>) -> store::Result<Vec<Submitted>> {
        let handoff = self.queue.handoff();
        // A queue the relay sweeps for lost messages needs no outbox row
        // for a job pushed at once: the sweep finds a push that never
        // happened as it finds a lost message. Where the job rows are the
        // queue, a job is claimable once committed: nothing to publish.
        let publishing = if let Some(queue) = self.queue.written_with_jobs() {
            Publishing::WithTheJob {
                queue: queue.to_owned(),
            }
        } else if !handoff.publishes() {
            Publishing::Relay
        } else if self.queue.can_lose_published() {
            Publishing::CallerSwept
        } else {
            Publishing::Caller {
                republish_after_ms: self.republish_after_ms,
            }
        };
        let with_the_jobs = matches!(publishing, Publishing::WithTheJob { .. });
        let outcomes = self.store.submit_batch(&submissions, publishing).await;
        // The windows between this commit and the push that follows it.
        let outcomes = store::lose_answer("api::submit_commit_answer_lost", outcomes)?;
        shared::failpoints::crash_if_armed("api::submit_after_commit");
        let new_jobs: Vec<QueuedJob> = submissions
            .iter()
            .zip(&outcomes)
            .filter(|(submission, outcome)| {
                **outcome == Submitted::Inserted && !submission.is_delayed()
            })
            .map(|(submission, _)| self.store.queued_job(submission))
            .collect();
        if new_jobs.is_empty() {
            return Ok(outcomes);
        }
        if with_the_jobs {
            self.queue.wake_here();
            return Ok(outcomes);
        }
        match handoff {
            Handoff::Relay => self.signals.outbox_changed(),
            Handoff::Push => {
                let group = self.clone();
                tokio::spawn(async move {
                    handoff.publish(&group.queue, &group.store, &new_jobs).await
                });
            }
        }
        Ok(outcomes)
    }
}
