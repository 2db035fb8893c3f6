//! Runs one delivered message: claim the attempt, run the kind with a
//! heartbeat and a timeout, and write the outcome fenced by the attempt.

use std::{
    collections::HashMap,
    panic::AssertUnwindSafe,
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use futures::FutureExt;
use reports::{JobContext, JobFailure, ProgressSink, Registry, ReportOutput, RunSettings};
use serde_json::Value;
use shared::{
    model::{AttemptOutcome, JobErrorObject, ResultBody},
    notify::Signals,
    retry::Retry,
    settings::Settings,
    time::{backoff_delay, duration_ms, now_ms},
};
use store::{Claim, LeaseCheck, Store, SuccessWrite, batch::Batcher};
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tracing::{Instrument, debug, info, info_span, warn};

use crate::traces::AttemptSpan;

/// What every handler invocation shares.
pub struct Runner {
    pub store: Store,
    pub registry: Registry,
    pub signals: Signals,
    pub worker_id: String,
    lease: Duration,
    retry_base: Duration,
    retry_max: Duration,
    run_settings: RunSettings,
    /// Attempts this process is running: released on a forced shutdown.
    running: Mutex<HashMap<String, i64>>,
    /// Cancelled when the process begins to shut down: a claim stops
    /// waiting for the database.
    pub stopping: CancellationToken,
    /// Group commits of the two writes every job makes (`docs/design.md`,
    /// Group commit: batching is how throughput grows).
    writes: SlotWrites,
    /// Whether concurrency caps are set: then every end of an attempt may
    /// have woken a parked job, whose outbox row the relay is told of
    /// (with Redis; where the job rows are the queue, the end's NOTIFY or
    /// the next look finds it).
    capped: bool,
    /// The concurrency caps claims keep to.
    pub caps: shared::settings::Caps,
    /// The queue's name in traces (`messaging.destination.name`).
    destination: String,
    /// Outcomes being written after their slots moved on
    /// ([`Runner::conclude_in_background`]).
    concluding: TaskTracker,
    /// Room for outcomes written in the background: one per slot.
    concluding_room: Arc<tokio::sync::Semaphore>,
}

/// What became of a message, up to the writing of its outcome.
pub enum Handled {
    /// Nothing ran; whether the message is done with.
    Done(bool),
    /// An attempt ran, and its outcome is still to be written.
    Ran(Box<Ran>),
}

/// An attempt that ran, with its outcome (`None` when it was superseded and
/// must write nothing).
pub struct Ran {
    claim: Claim,
    outcome: Option<AttemptOutcome>,
    attempt: Option<AttemptSpan>,
}

/// Attempts handed back (outages, shutdowns) beyond which an outage under
/// an attempt counts against the job's limit like any retryable failure:
/// a bound, should an "outage" follow one job wherever it runs.
const MAX_HANDBACKS: i64 = 20;

/// How a claim or an outcome the database did not take is tried again.
const STORE_OUTAGE: Retry = Retry::doubling(Duration::from_millis(100), Duration::from_secs(2));

/// Writes per group commit: enough to amortize a commit over a busy
/// pool's concurrency, few enough to keep one transaction short.
const MAX_BATCH: usize = 64;

/// The group commits of a pool's claims and successes.
enum SlotWrites {
    /// Each kind in batches of its own (see
    /// `Store::claims_commit_with_successes`).
    Apart {
        claims: Batcher<String, Option<Claim>>,
        /// Each success answers on its own: one write the database
        /// refuses does not fail the others of its batch.
        successes: Batcher<SuccessWrite, store::Result<bool>>,
    },
    /// Both kinds in one batch, written by one statement or one
    /// transaction: one slot's success and another's claim waiting at one
    /// moment commit once.
    Together(Batcher<SlotWrite, SlotAnswer>),
}

enum SlotWrite {
    Claim(String),
    Success(SuccessWrite),
}

enum SlotAnswer {
    Claim(store::Result<Option<Claim>>),
    Success(store::Result<bool>),
}

impl SlotWrites {
    /// Must be called inside the tokio runtime (it spawns the batchers).
    fn spawn(store: &Store, settings: &Settings, worker_id: &str) -> Self {
        let (lease, caps) = (settings.job_lease, settings.caps());
        let together = store.claims_commit_with_successes(&caps);
        let write = {
            let (store, worker_id, caps) = (store.clone(), worker_id.to_owned(), Arc::new(caps));
            move |job_ids: Vec<String>, successes: Vec<SuccessWrite>| {
                let (store, worker_id, caps) = (store.clone(), worker_id.clone(), caps.clone());
                async move {
                    let lease_until = now_ms() + duration_ms(lease);
                    store
                        .claim_and_finish_succeeded(
                            &job_ids,
                            &worker_id,
                            lease_until,
                            &caps,
                            &successes,
                        )
                        .await
                }
            }
        };
        if together {
            return SlotWrites::Together(Batcher::spawn(
                MAX_BATCH,
                move |writes: Vec<SlotWrite>| {
                    let mut claim_places = Vec::with_capacity(writes.len());
                    let (mut job_ids, mut successes) = (Vec::new(), Vec::new());
                    for slot_write in writes {
                        match slot_write {
                            SlotWrite::Claim(job_id) => {
                                claim_places.push(true);
                                job_ids.push(job_id);
                            }
                            SlotWrite::Success(success) => {
                                claim_places.push(false);
                                successes.push(success);
                            }
                        }
                    }
                    let (claim_count, success_count) = (job_ids.len(), successes.len());
                    let written = write(job_ids, successes);
                    async move {
                        let (claimed, succeeded) = written.await;
                        let claimed = claimed.map(|claims| claims.into_iter().map(Ok).collect());
                        let mut claimed = each_answer(claimed, claim_count).into_iter();
                        let mut succeeded = each_answer(succeeded, success_count).into_iter();
                        Ok(claim_places
                            .into_iter()
                            .map(|is_claim| match is_claim {
                                true => {
                                    SlotAnswer::Claim(claimed.next().unwrap_or_else(unanswered))
                                }
                                false => {
                                    SlotAnswer::Success(succeeded.next().unwrap_or_else(unanswered))
                                }
                            })
                            .collect())
                    }
                },
            ));
        }
        let claims = Batcher::spawn(MAX_BATCH, move |job_ids: Vec<String>| {
            let written = write(job_ids, Vec::new());
            async move { written.await.0 }
        });
        let successes = {
            let store = store.clone();
            Batcher::spawn(MAX_BATCH, move |attempts: Vec<SuccessWrite>| {
                let store = store.clone();
                async move { store.finish_succeeded_each(&attempts).await }
            })
        };
        SlotWrites::Apart { claims, successes }
    }

    async fn claim(&self, job_id: String) -> store::Result<Option<Claim>> {
        match self {
            SlotWrites::Apart { claims, .. } => claims.call(job_id).await,
            SlotWrites::Together(writes) => match writes.call(SlotWrite::Claim(job_id)).await? {
                SlotAnswer::Claim(claimed) => claimed,
                SlotAnswer::Success(_) => Err(store::Error::Corrupt(
                    "a claim answered as a success".into(),
                )),
            },
        }
    }

    async fn succeed(&self, success: SuccessWrite) -> store::Result<bool> {
        match self {
            SlotWrites::Apart { successes, .. } => successes.call(success).await?,
            SlotWrites::Together(writes) => match writes.call(SlotWrite::Success(success)).await? {
                SlotAnswer::Success(applied) => applied,
                SlotAnswer::Claim(_) => Err(store::Error::Corrupt(
                    "a success answered as a claim".into(),
                )),
            },
        }
    }
}

/// A batch's answers one by one: a failed batch fails each of its
/// `count` writes with its error.
fn each_answer<T>(
    answers: store::Result<Vec<store::Result<T>>>,
    count: usize,
) -> Vec<store::Result<T>> {
    match answers {
        Ok(answers) => answers,
        Err(error) => {
            let error = Arc::new(error);
            (0..count)
                .map(|_| Err(store::Error::Batch(error.clone())))
                .collect()
        }
    }
}

fn unanswered<T>() -> store::Result<T> {
    Err(store::Error::Corrupt("a write went unanswered".into()))
}

/// What became of a delivery's claim.
enum Taken {
    /// The attempt is claimed: run it.
    Claim(Claim),
    /// Nothing to run, and the message is done with: a duplicate or stale
    /// delivery, a job not claimable, or one handed to the relay.
    Nothing,
    /// Nothing to run, and the message is kept by its consumer.
    Kept,
}

/// When the point is armed, an error that is not an outage, for a claim
/// refused before anything was written.
fn refused(point: &str) -> Option<store::Error> {
    shared::failpoints::armed(point)
        .then(|| store::Error::Config(format!("failpoint {point}: claim refused")))
}

impl Runner {
    /// Must be called inside the tokio runtime (it spawns the batchers).
    pub fn new(store: Store, signals: Signals, settings: &Settings, worker_id: String) -> Self {
        let capped = !settings.caps().is_none();
        let writes = SlotWrites::spawn(&store, settings, &worker_id);
        Self {
            writes,
            store,
            registry: Registry::new(settings.enable_diagnostic_kinds),
            signals,
            worker_id,
            lease: settings.job_lease,
            retry_base: settings.retry_base_delay,
            retry_max: settings.retry_max_delay,
            run_settings: RunSettings::from(settings),
            running: Mutex::new(HashMap::new()),
            stopping: CancellationToken::new(),
            capped,
            caps: settings.caps(),
            destination: format!("{}:jobs", settings.queue_name),
            concluding: TaskTracker::new(),
            concluding_room: Arc::new(tokio::sync::Semaphore::new(settings.worker_concurrency())),
        }
    }

    /// Handles one queue message. Never fails and never panics across the
    /// apalis boundary: whatever happens is recorded in the store. Answers
    /// whether the message is done with; one that is not (its claim could
    /// not be written, nor the job handed to the relay) stays with its
    /// consumer, which hands it back to the queue when it stops.
    pub async fn handle(&self, message: Value) -> bool {
        match self.run_message(message).await {
            Handled::Done(done) => done,
            Handled::Ran(ran) => {
                self.conclude(ran).await;
                true
            }
        }
    }

    /// Claims and runs the message's job, up to the writing of its
    /// outcome, which is left to [`Runner::conclude`] (or to
    /// [`Runner::conclude_in_background`]).
    pub async fn run_message(&self, message: Value) -> Handled {
        let Some(job_id) = message.get("job_id").and_then(Value::as_str) else {
            warn!(%message, "dropping a queue message without a job_id");
            return Handled::Done(true);
        };
        let arrived = SystemTime::now();
        // The window between a fetch and its claim.
        shared::failpoints::crash_if_armed("worker::before_claim");
        let claim = match self.claim(job_id).await {
            Taken::Claim(claim) => claim,
            Taken::Nothing => return Handled::Done(true),
            Taken::Kept => return Handled::Done(false),
        };
        self.run_listed(claim, arrived).await
    }

    /// Runs an attempt claimed for this process by a claim of due jobs (the
    /// job rows as the queue), up to the writing of its outcome, which is
    /// left to [`Runner::conclude`] (or [`Runner::conclude_in_background`]).
    /// `None` when the attempt already runs here.
    pub async fn run_claim(&self, claim: Claim, arrived: SystemTime) -> Option<Box<Ran>> {
        {
            let mut running = self.lock_running();
            if running.get(&claim.job_id) == Some(&claim.attempt) {
                return None;
            }
            running.insert(claim.job_id.clone(), claim.attempt);
        }
        match self.run_listed(claim, arrived).await {
            Handled::Ran(ran) => Some(ran),
            Handled::Done(_) => None,
        }
    }

    /// How long a claim leases its attempt.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// Whether this process runs the attempt.
    pub fn runs_here(&self, job_id: &str, attempt: i64) -> bool {
        self.lock_running().get(job_id) == Some(&attempt)
    }

    /// Runs a claimed attempt, listed as running here.
    async fn run_listed(&self, claim: Claim, arrived: SystemTime) -> Handled {
        let attempt = AttemptSpan::start(&self.destination, &claim, arrived);
        let started = std::time::Instant::now();
        let run = info_span!("run", otel.name = %format!("run {}", claim.kind), receipt.job.kind = %claim.kind);
        if let Some(attempt) = &attempt {
            attempt.adopt(&run);
        }
        let outcome = self.run_claimed(&claim).instrument(run).await;
        if let Some(outcome) = &outcome {
            // Counted before the final status commits, so that a client who
            // sees the status also finds the attempt on `/metrics`.
            record_attempt(&claim.kind, outcome, started.elapsed());
        }
        Handled::Ran(Box::new(Ran {
            claim,
            outcome,
            attempt,
        }))
    }

    /// Writes the outcome of an attempt that ran (nothing for a superseded
    /// one) and unlists the attempt.
    pub async fn conclude(&self, ran: Box<Ran>) {
        let Ran {
            claim,
            outcome,
            attempt,
        } = *ran;
        // A test holds an outcome here, to see its slot move on without it.
        let _ = shared::failpoints::hold_until_file_exists("worker::outcome_held_until", || {
            Ok::<(), std::convert::Infallible>(())
        })
        .await;
        if let Some(outcome) = &outcome {
            let write = info_span!("write result", receipt.job.id = %claim.job_id);
            if let Some(attempt) = &attempt {
                attempt.adopt(&write);
            }
            // The job's webhook deliveries continue this span's trace.
            let traceparent = telemetry::trace::traceparent(&write);
            self.finish(&claim, outcome, traceparent)
                .instrument(write)
                .await;
        }
        if let Some(attempt) = attempt {
            attempt.end(outcome.as_ref());
        }
        // Listed until its outcome is written: a duplicate delivery meanwhile
        // must not adopt the attempt. Only this attempt's entry: a later
        // attempt of the same job (after this one's lease lapsed) may run in
        // this process too, and must stay listed so a forced shutdown hands
        // it back.
        let mut running = self.lock_running();
        if running.get(&claim.job_id) == Some(&claim.attempt) {
            running.remove(&claim.job_id);
        }
    }

    /// [`Runner::conclude`] in a task of its own, then `written`: the slot
    /// that ran the attempt (freed by `started`, once the task is) takes
    /// its next message meanwhile, and that message's claim can share the
    /// outcome's group commit, so a busy slot waits on the database once a
    /// job instead of twice. At most as many outcomes as the pool has slots
    /// are written in the background; beyond that, this waits for room.
    pub async fn conclude_in_background(
        self: &Arc<Self>,
        ran: Box<Ran>,
        started: impl FnOnce(),
        written: impl FnOnce() + Send + 'static,
    ) {
        // The semaphore is never closed: the room is always granted.
        let room = self.concluding_room.clone().acquire_owned().await.ok();
        let runner = self.clone();
        self.concluding.spawn(async move {
            runner.conclude(ran).await;
            drop(room);
            written();
        });
        started();
    }

    /// Waits up to `grace` for the outcomes being written in the
    /// background; answers whether all were. One still unwritten after it
    /// keeps its attempt listed, so a shutdown hands the attempt back.
    pub async fn outcomes_written(&self, grace: Duration) -> bool {
        if !self.concluding.is_empty() {
            info!(
                outcomes = self.concluding.len(),
                "waiting for the outcomes being written"
            );
        }
        self.concluding.close();
        let written = tokio::time::timeout(grace, self.concluding.wait())
            .await
            .is_ok();
        self.concluding.reopen();
        written
    }

    /// Claims the job's next attempt and lists it as running here; `None`
    /// when this delivery must run nothing.
    ///
    /// A claim that fails on a database error is tried again until the
    /// database answers (or the process stops): acknowledging the message
    /// without a claim would leave the job waiting for a republish. When an
    /// earlier try's commit went through but its answer was lost, the job
    /// is RUNNING under this process's worker id with no attempt running
    /// here: that attempt is ours, and is adopted rather than left to lapse.
    async fn claim(&self, job_id: &str) -> Taken {
        let claimed = STORE_OUTAGE
            .run_until(
                self.stopping.cancelled(),
                |try_number| async move {
                    let claimed = match refused("worker::claim_refused") {
                        Some(refused) => Err(refused),
                        None => store::lose_answer(
                            "worker::claim_answer_lost",
                            self.writes.claim(job_id.to_owned()).await,
                        ),
                    };
                    match claimed {
                        // An earlier try may have committed, its answer lost.
                        Ok(None) if try_number > 1 => {
                            self.store.attempt_held_by(job_id, &self.worker_id).await
                        }
                        claimed => claimed,
                    }
                },
                |error, _| {
                    let again = error.is_unavailable() && !self.stopping.is_cancelled();
                    if again {
                        warn!(job_id, %error, "could not claim; trying again");
                    }
                    again
                },
            )
            .await;
        match claimed {
            Ok(Some(claim)) => {
                let mut running = self.lock_running();
                if running.get(&claim.job_id) == Some(&claim.attempt) {
                    // Adopted, but another delivery of the job runs it here.
                    return Taken::Nothing;
                }
                running.insert(claim.job_id.clone(), claim.attempt);
                Taken::Claim(claim)
            }
            // Not claimable: a duplicate or stale delivery, a job that was
            // cancelled or finished, or one not due yet. The claim's WHERE
            // status = 'QUEUED' is the guard that keeps a redelivered
            // message from running twice. A job not due yet is published
            // again when it is due, so its message can be let go.
            Ok(None) => match self.store.publish_when_due(&[job_id.to_owned()]).await {
                Ok(0) => {
                    debug!(job_id, "message for a job that is not claimable; dropped");
                    Taken::Nothing
                }
                Ok(_) => {
                    debug!(
                        job_id,
                        "message for a job not due yet; dropped, and the job published again when due"
                    );
                    Taken::Nothing
                }
                Err(error) => {
                    warn!(job_id, %error, "could not look whether the job is due later; its message is kept");
                    Taken::Kept
                }
            },
            // Shutting down through an outage: the message goes back to the
            // queue with the rest of what the consumer holds.
            Err(_) if self.stopping.is_cancelled() => Taken::Kept,
            Err(error) => {
                // Not an outage. A job made with its message (the database
                // queue) or pushed at submit (Redis) has no outbox row: it
                // gets one, due in a second, so the relay publishes it
                // again; a row it has is made due the same way.
                warn!(job_id, %error, "could not claim; the relay will publish it again");
                let soon = now_ms() + 1_000;
                match self
                    .store
                    .retry_outbox_soon(&[job_id.to_owned()], soon)
                    .await
                {
                    Ok(()) => Taken::Nothing,
                    Err(error) => {
                        warn!(job_id, %error, "could not hand the job to the relay; its message is kept");
                        Taken::Kept
                    }
                }
            }
        }
    }

    fn lock_running(&self) -> std::sync::MutexGuard<'_, HashMap<String, i64>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The attempts running now, as `(job_id, attempt)`.
    pub fn running_attempts(&self) -> Vec<(String, i64)> {
        self.lock_running()
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }

    /// Runs the kind; `None` when the attempt was superseded and must write nothing.
    async fn run_claimed(&self, claim: &Claim) -> Option<AttemptOutcome> {
        let Some(kind) = self.registry.get(&claim.kind) else {
            return Some(AttemptOutcome::Failed {
                error: error_object(
                    "unknown_kind",
                    format!(
                        "no report kind {:?} is registered in this worker",
                        claim.kind
                    ),
                ),
            });
        };
        let Ok(params) = serde_json::from_str::<Value>(&claim.params) else {
            return Some(AttemptOutcome::Failed {
                error: error_object("invalid_params", "the stored parameters are not JSON"),
            });
        };
        let flags = ProgressSink::default();
        let ctx = JobContext::new(
            self.store.clone(),
            claim.tenant_id.clone(),
            claim.job_id.clone(),
            claim.attempt,
            flags.clone(),
        )
        .with_settings(self.run_settings.clone());
        let timeout = kind.timeout();
        let work = tokio::time::timeout(
            timeout,
            AssertUnwindSafe(kind.run(&ctx, params)).catch_unwind(),
        );
        let result = tokio::select! {
            result = work => match result {
                Ok(Ok(result)) => result,
                Ok(Err(_panic)) => Err(JobFailure::permanent(
                    "panic",
                    "the report handler panicked; this is a bug in Receipt",
                )),
                Err(_elapsed) => Err(JobFailure::retryable(
                    "timeout",
                    format!("attempt {} ran longer than {}", claim.attempt, humantime_secs(timeout)),
                )),
            },
            () = self.heartbeat(claim, &flags) => Err(JobFailure::Superseded),
        };
        match result {
            Ok(ReportOutput::Document(value)) => Some(AttemptOutcome::Succeeded {
                result: value.to_string(),
            }),
            Ok(ReportOutput::Chunks(chunks)) => Some(AttemptOutcome::SucceededInChunks { chunks }),
            Err(JobFailure::Superseded) => {
                info!(
                    job_id = claim.job_id,
                    attempt = claim.attempt,
                    "attempt superseded; dropped"
                );
                None
            }
            Err(JobFailure::Cancelled) => Some(AttemptOutcome::Cancelled),
            Err(JobFailure::Permanent {
                error_type,
                message,
            }) => Some(AttemptOutcome::Failed {
                error: error_object(&error_type, message),
            }),
            Err(JobFailure::Retryable {
                error_type,
                message,
            }) => {
                // An outage of our own database is not the job's failure.
                let outage = error_type == reports::STORE_ERROR;
                let error = error_object(&error_type, message);
                Some(if outage && claim.handbacks() < MAX_HANDBACKS {
                    let delay =
                        backoff_delay(claim.handbacks() + 1, self.retry_base, self.retry_max);
                    AttemptOutcome::HandBack {
                        at: now_ms() + duration_ms(delay),
                        error,
                    }
                } else if claim.counted_attempt < claim.max_attempts {
                    let delay =
                        backoff_delay(claim.counted_attempt, self.retry_base, self.retry_max);
                    AttemptOutcome::RetryAt {
                        at: now_ms() + duration_ms(delay),
                        error,
                    }
                } else {
                    AttemptOutcome::Failed { error }
                })
            }
        }
    }

    /// Keeps the lease alive and watches for a cancel; returns only when the
    /// attempt lost its lease to another.
    async fn heartbeat(&self, claim: &Claim, flags: &ProgressSink) {
        let every = (self.lease / 3).min(Duration::from_millis(500));
        loop {
            tokio::time::sleep(every).await;
            let lease_until = now_ms() + duration_ms(self.lease);
            match self
                .store
                .heartbeat(&claim.job_id, claim.attempt, lease_until)
                .await
            {
                Ok(LeaseCheck::Lost) => {
                    flags.observe(LeaseCheck::Lost);
                    return;
                }
                Ok(check) => flags.observe(check),
                Err(error) => warn!(job_id = claim.job_id, %error, "heartbeat failed"),
            }
        }
    }

    /// Writes the outcome, retrying for as long as the database is
    /// unavailable: the write is fenced, so a retry after a commit whose
    /// answer was lost changes nothing. An error that is not an outage is
    /// tried a few times; if it never gets through, the lease lapses and
    /// the job runs again.
    ///
    /// `traceparent` names the span of this write: the job's webhook
    /// events keep it, and their deliveries join its trace.
    async fn finish(&self, claim: &Claim, outcome: &AttemptOutcome, traceparent: Option<String>) {
        let traceparent = &traceparent;
        let write = |_| async move {
            let success = |result| SuccessWrite {
                job_id: claim.job_id.clone(),
                attempt: claim.attempt,
                result,
                traceparent: traceparent.clone(),
            };
            let written = match outcome {
                AttemptOutcome::Succeeded { result } => {
                    self.writes
                        .succeed(success(ResultBody::Document(result.clone())))
                        .await
                }
                AttemptOutcome::SucceededInChunks { chunks } => {
                    self.writes
                        .succeed(success(ResultBody::Chunks(*chunks)))
                        .await
                }
                _ => {
                    self.store
                        .finish_attempt(
                            &claim.job_id,
                            claim.attempt,
                            outcome,
                            traceparent.as_deref(),
                        )
                        .await
                }
            };
            store::lose_answer("worker::outcome_answer_lost", written)
        };
        let mut other_errors = 0;
        let written = STORE_OUTAGE
            .run(write, |error, _| {
                if !error.is_unavailable() {
                    other_errors += 1;
                    if other_errors > 3 {
                        return false;
                    }
                }
                warn!(job_id = claim.job_id, %error, "could not record the outcome; retrying");
                true
            })
            .await;
        match written {
            Ok(true) => {
                debug!(
                    job_id = claim.job_id,
                    attempt = claim.attempt,
                    "outcome recorded"
                );
                if self.capped
                    || matches!(
                        outcome,
                        AttemptOutcome::RetryAt { .. } | AttemptOutcome::HandBack { .. }
                    )
                {
                    self.signals.outbox_changed();
                }
                // A retry may have become a cancel; a spare signal only
                // makes a long poll read the job once more.
                self.signals.job_finished(&claim.job_id);
            }
            Ok(false) => {
                info!(
                    job_id = claim.job_id,
                    attempt = claim.attempt,
                    "stale attempt; its outcome was dropped"
                );
            }
            Err(error) => {
                warn!(job_id = claim.job_id, %error, "could not record the outcome; the job will run again when its lease lapses");
            }
        }
    }
}

/// Counts an attempt by kind and outcome, and times it. The `api`
/// process exports these on its `/metrics` when the pool runs inside it; a
/// `worker` process on `METRICS_ADDR`.
fn record_attempt(kind: &str, outcome: &AttemptOutcome, took: Duration) {
    let outcome = match outcome {
        AttemptOutcome::Succeeded { .. } | AttemptOutcome::SucceededInChunks { .. } => "succeeded",
        AttemptOutcome::Failed { .. } => "failed",
        AttemptOutcome::RetryAt { .. } => "retry",
        AttemptOutcome::HandBack { .. } => "handed_back",
        AttemptOutcome::Cancelled => "cancelled",
    };
    metrics::counter!("receipt_job_attempts_total", "kind" => kind.to_owned(), "outcome" => outcome)
        .increment(1);
    metrics::histogram!("receipt_job_attempt_seconds", "kind" => kind.to_owned())
        .record(took.as_secs_f64());
}

fn error_object(error_type: &str, message: impl Into<String>) -> JobErrorObject {
    JobErrorObject {
        error_type: error_type.to_owned(),
        message: message.into(),
        details: None,
    }
}

fn humantime_secs(duration: Duration) -> String {
    format!("{}s", duration.as_secs_f64())
}
