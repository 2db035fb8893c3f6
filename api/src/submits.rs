//! Submits: the `Idempotency-Key` steps of `crate::idempotency` taken
//! for a group of submits at once (group commit), and the publishing of
//! the jobs they make.

use actix_web::{HttpRequest, HttpResponse};
use queue::Queue;
use store::{Publishing, QueuedJob, Store, Submission, SubmissionKey, Submitted, batch::Batcher};

use crate::{
    error::{ApiError, ApiResult},
    idempotency::{Answer, IdempotencyKey, NextStep, RequestBody, fingerprint},
    state::AppState,
};

/// Submits per group commit.
const SUBMIT_BATCH: usize = 64;

/// Submits a job, with the guarantees of `idempotency::execute`, through
/// the group commit of submits (`AppState::submits`): one transaction for
/// all the submits waiting at that moment. `answer` is the 202 the job
/// gets, stored against the key with it. The key's fingerprint reads the
/// job's parameters, the request's body as decoded and written as
/// canonical JSON (`crate::idempotency::canonical_json`).
pub async fn submit(
    state: &AppState,
    key: &IdempotencyKey,
    request: &HttpRequest,
    mut submission: Submission,
    answer: Answer,
) -> ApiResult<HttpResponse> {
    submission.key = key.0.as_ref().map(|key| SubmissionKey {
        tenant_id: submission.job.tenant_id.clone(),
        key: key.clone(),
        fingerprint: fingerprint(request, RequestBody::Canonical(&submission.job.params)),
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
            let group = SubmitGroup {
                store: state.store.clone(),
                queue: state.queue.clone(),
            };
            let submitted = state
                .store
                .submit_batch(std::slice::from_ref(&submission), group.publishing())
                .await?
                .pop()
                .ok_or_else(|| ApiError::Internal("a batch of one answered nothing".into()))?;
            if submitted == Submitted::Inserted
                && !submission.is_delayed()
                && !submission.job.external
            {
                group.hand_over(vec![state.store.queued_job(&submission)]);
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
pub fn spawn_batcher(store: Store, queue: Queue) -> Batcher<Submission, Submitted> {
    let group = SubmitGroup { store, queue };
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
}

impl SubmitGroup {
    /// How the submits' jobs reach the queue. Where the job rows are the
    /// queue, a job is claimable once committed: nothing to publish. A
    /// queue the relay sweeps for lost messages (Redis) needs no outbox
    /// row for a job pushed at once: the sweep finds a push that never
    /// happened as it finds a lost message.
    fn publishing(&self) -> Publishing {
        match self.queue.written_with_jobs() {
            Some(queue) => Publishing::WithTheJob {
                queue: queue.to_owned(),
            },
            None => Publishing::CallerSwept,
        }
    }

    /// After the commit that made `new_jobs` due: wakes this process's
    /// workers where the job rows are the queue, else pushes the jobs in
    /// a task of its own, so a slow Redis holds up no answer.
    fn hand_over(&self, new_jobs: Vec<QueuedJob>) {
        if new_jobs.is_empty() {
            return;
        }
        if self.queue.written_with_jobs().is_some() {
            self.queue.wake_here();
            return;
        }
        let group = self.clone();
        tokio::spawn(async move { group.queue.publish_committed(&group.store, &new_jobs).await });
    }

    /// Commits a batch of submits, then hands its new jobs to the queue at
    /// once, saving the relay a transaction per batch.
    async fn write(&self, submissions: Vec<Submission>) -> store::Result<Vec<Submitted>> {
        let outcomes = self
            .store
            .submit_batch(&submissions, self.publishing())
            .await;
        // The windows between this commit and the push that follows it.
        let outcomes = store::lose_answer("api::submit_commit_answer_lost", outcomes)?;
        shared::failpoints::crash_if_armed("api::submit_after_commit");
        let new_jobs: Vec<QueuedJob> = submissions
            .iter()
            .zip(&outcomes)
            // External jobs are leased from their rows, never handed to
            // the queue.
            .filter(|(submission, outcome)| {
                **outcome == Submitted::Inserted
                    && !submission.is_delayed()
                    && !submission.job.external
            })
            .map(|(submission, _)| self.store.queued_job(submission))
            .collect();
        self.hand_over(new_jobs);
        Ok(outcomes)
    }
}
