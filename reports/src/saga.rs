//! Sagas: a kind made of steps, each with an action and a compensation
//! (`docs/sagas.md`). The engine runs the steps in order inside the job's
//! attempts, records each one durably, and when a step fails for good or a
//! cancel comes, runs the compensations of the steps done, in reverse,
//! retrying each with backoff until it succeeds.
//!
//! The guarantees, and where each is kept:
//! - A step is recorded once: a local step's record commits in the
//!   transaction of its effect ([`StepContext::local`]); an external step's
//!   after the other side answered, and until then it is run again (by a
//!   retry, or the next attempt after a crash) with the same
//!   [`StepContext::idempotency_key`], so the other side can deduplicate.
//! - A new attempt resumes at the first step not recorded, or goes on
//!   compensating where the last one stopped (`saga_runs.phase`).
//! - Fencing: every start and record of a step or a compensation is
//!   conditional on the attempt being the job's current one
//!   (`Store::attempt_is_current`); a stale attempt stops before it runs
//!   anything more.
//! - Nothing is dropped: while a saga has steps to run or undo, the
//!   sweeper requeues it whatever its attempts, and a cancel of it while
//!   queued waits for its next attempt, which compensates
//!   (`SAGA_UNFINISHED` in the store).

use std::{
    collections::BTreeMap,
    panic::AssertUnwindSafe,
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use futures::{FutureExt, future::BoxFuture};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;
use tracing::{Instrument, error, info_span, warn};
use utoipa::ToSchema;

use crate::{JobContext, JobFailure, ParamsError, ReportKind, RunResult};
use shared::{
    model::{CompensationObject, JobErrorObject, StepObject},
    retry::Retry,
    time::{backoff_delay, to_rfc3339},
};
use store::{Fence, SagaPhase, SagaRun, SagaStep, Store, TurnBack, WriteTx};

/// One step of a saga.
pub trait Step: Send + Sync + 'static {
    /// The step's stable name: in the job object, and in its idempotency keys.
    fn name(&self) -> &'static str;

    /// Does the step and returns its output (stored, and readable by later
    /// steps through [`StepContext::output`]). A step whose effect is in
    /// Receipt's database makes it in [`StepContext::begin_local`]'s
    /// transaction, which [`StepContext::commit_local`] records the step in; any other step's output
    /// is recorded once the action returns. An action may be run again
    /// after a crash, so one that calls another system sends
    /// [`StepContext::idempotency_key`]. `Retryable` is tried again after
    /// a backoff (up to the kind's attempts, then the step has failed);
    /// `Permanent` fails the step at once, as having done nothing.
    fn action<'a>(&'a self, cx: &'a StepContext<'a>) -> BoxFuture<'a, Result<Value, JobFailure>>;

    /// Undoes the action (`cx.output(self.name())` holds its output when it
    /// finished). Runs after a later step failed or a cancel came, and
    /// also for this step when its action's outcome is unknown (its
    /// attempts ran out on retryable errors, or a cancel stopped it), so
    /// it must be idempotent and accept that the action never happened.
    /// Any error is retried with backoff, for as long as it takes.
    fn compensate<'a>(&'a self, cx: &'a StepContext<'a>) -> BoxFuture<'a, Result<(), JobFailure>>;

    /// How long one try of the action or the compensation may take; longer
    /// is a retryable failure.
    fn timeout(&self) -> Duration {
        Duration::from_secs(60)
    }
}

/// A kind made of steps. Wrap it in [`SagaKind`] to register it.
pub trait Saga: Send + Sync + 'static {
    /// The parameters as a client sends them ([`ReportKind::Body`]).
    type Body: DeserializeOwned + Serialize + ToSchema;

    /// The stable name clients use in `POST /v1/reports/{kind}`.
    fn name(&self) -> &'static str;

    /// What the saga does ([`ReportKind::about`]).
    fn about(&self) -> &'static str;

    /// Tries of each step, and attempts of the job (crashes), before a
    /// retryable failure turns the saga back.
    fn max_attempts(&self) -> i64 {
        5
    }

    /// Checks the decoded parameters' values before anything is stored
    /// ([`ReportKind::check`]).
    fn check(&self, body: &Self::Body) -> Result<(), ParamsError>;

    /// A refusal of a submit that depends on stored state (409 with this
    /// reason); `None` to accept.
    fn refuse_submit<'a>(
        &'a self,
        _store: &'a Store,
        _tenant_id: &'a str,
        _params: &'a Value,
    ) -> BoxFuture<'a, store::Result<Option<String>>> {
        Box::pin(async { Ok(None) })
    }

    /// When [`Saga::refuse_submit`] refuses ([`ReportKind::refused_when`]).
    fn refused_when(&self) -> Option<&'static str> {
        None
    }

    /// The steps, in the order they run.
    fn steps(&self) -> &'static [&'static dyn Step];

    /// The job's result once every step is done, from their outputs.
    fn result(&self, outputs: &BTreeMap<String, Value>) -> Value;
}

/// A [`Saga`] as a report kind.
pub struct SagaKind<S>(pub S);

impl<S: Saga> ReportKind for SagaKind<S> {
    type Body = S::Body;
    type Params = Value;

    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn about(&self) -> &'static str {
        self.0.about()
    }

    fn max_attempts(&self) -> i64 {
        self.0.max_attempts()
    }

    /// No deadline for the whole attempt: each step's try has its own
    /// ([`Step::timeout`]), and compensations run until they succeed.
    fn timeout(&self) -> Duration {
        Duration::MAX
    }

    /// A saga's steps read the parameters as JSON (each takes what it
    /// needs), so they are checked here and kept as JSON.
    fn check(&self, body: &S::Body) -> Result<Value, ParamsError> {
        self.0.check(body)?;
        serde_json::to_value(body).map_err(|e| ParamsError::Malformed(e.to_string()))
    }

    fn run<'a>(&'a self, ctx: &'a JobContext, params: Value) -> BoxFuture<'a, RunResult> {
        Box::pin(async move {
            let engine = Engine {
                saga: &self.0,
                ctx,
                params,
            };
            engine.run().await.map(Into::into)
        })
    }

    fn step_names(&self) -> Vec<&'static str> {
        self.0.steps().iter().map(|s| s.name()).collect()
    }

    fn refuse_submit<'a>(
        &'a self,
        store: &'a Store,
        tenant_id: &'a str,
        params: &'a Value,
    ) -> BoxFuture<'a, store::Result<Option<String>>> {
        self.0.refuse_submit(store, tenant_id, params)
    }

    fn refused_when(&self) -> Option<&'static str> {
        self.0.refused_when()
    }
}

/// Whether a [`StepContext`] runs an action or a compensation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Doing {
    Action,
    Compensation,
}

/// What a step's action or compensation gets.
pub struct StepContext<'a> {
    pub job: &'a JobContext,
    /// The job's parameters.
    pub params: &'a Value,
    outputs: &'a BTreeMap<String, Value>,
    step: &'static str,
    index: i64,
    doing: Doing,
    /// Set once [`StepContext::commit_local`] committed the record.
    recorded: AtomicBool,
}

impl StepContext<'_> {
    /// The output of a step done (this one's, in its compensation).
    pub fn output(&self, step: &str) -> Option<&Value> {
        self.outputs.get(step)
    }

    /// The key another system deduplicates this step's action on: derived
    /// from the job and the step, the same on every try and every attempt.
    pub fn idempotency_key(&self) -> String {
        format!("{}:{}", self.job.job_id, self.step)
    }

    /// The key of this step's compensation: its own, equally stable.
    pub fn compensation_key(&self) -> String {
        format!("{}:{}:compensate", self.job.job_id, self.step)
    }

    /// Opens the transaction of a local step's effect (or of its
    /// compensation's), only while this attempt is the job's current one.
    /// Make the effect in it, then end with [`StepContext::commit_local`]:
    /// the effect and the step's record commit together or not at all, so
    /// a local effect happens once.
    pub async fn begin_local(&self) -> Result<WriteTx, JobFailure> {
        let store = &self.job.store;
        let mut tx = store.begin_write().await?;
        if !store.attempt_is_current(&mut tx, fence(self.job)).await? {
            return Err(JobFailure::Superseded);
        }
        Ok(tx)
    }

    /// Records the step (with `output`), or its compensation, in `tx` and
    /// commits; returns `output`.
    pub async fn commit_local(&self, mut tx: WriteTx, output: Value) -> Result<Value, JobFailure> {
        let store = &self.job.store;
        match self.doing {
            Doing::Action => {
                store
                    .record_saga_step_in(&mut tx, &self.job.job_id, self.index, &output.to_string())
                    .await?;
            }
            Doing::Compensation => {
                store
                    .record_saga_compensation_in(&mut tx, &self.job.job_id, self.index)
                    .await?;
            }
        }
        tx.commit().await?;
        self.recorded.store(true, Ordering::Relaxed);
        Ok(output)
    }
}

fn fence(ctx: &JobContext) -> Fence<'_> {
    Fence {
        job_id: &ctx.job_id,
        attempt: ctx.attempt,
    }
}

/// How the engine's records are written again while the database fails.
const STORE_OUTAGE: Retry = Retry::doubling(Duration::from_millis(100), Duration::from_secs(5));

/// The error type of a step a cancel stopped.
const CANCELLED: &str = "cancelled";

/// How a try of an action ended.
enum Tried {
    Done(Value),
    Failed(JobFailure),
}

/// One attempt of one saga job.
struct Engine<'a, S> {
    saga: &'a S,
    ctx: &'a JobContext,
    params: Value,
}

impl<S: Saga> Engine<'_, S> {
    async fn run(&self) -> Result<Value, JobFailure> {
        let job_id = self.ctx.job_id.clone();
        let job = self
            .persist(|| self.ctx.store.get_job_unscoped(&job_id))
            .await?
            .ok_or(JobFailure::Superseded)?;
        let (run, steps) = self.state().await?;
        match run.as_ref().map(|r| r.phase) {
            None | Some(SagaPhase::Forward) => {
                if run.is_none() {
                    self.fenced(|| {
                        self.ctx
                            .store
                            .set_saga_phase(fence(self.ctx), SagaPhase::Forward, None)
                    })
                    .await?;
                }
                if job.cancel_requested {
                    return self.turn_back(TurnBack::Cancelled).await;
                }
                // Earlier attempts died (the sweeper requeued them): their
                // last one may not fail the job, but turns the saga back.
                if job.attempts > job.max_attempts {
                    return self
                        .turn_back(TurnBack::Failed {
                            error_type: "lease_expired".into(),
                            message: format!(
                                "{} attempts stopped responding: their leases lapsed",
                                job.attempts - 1
                            ),
                        })
                        .await;
                }
                self.forward(steps).await
            }
            Some(SagaPhase::Compensating) => {
                let why = turned_back(run)?;
                self.compensate(why).await
            }
            Some(SagaPhase::Completed) => Ok(self.saga.result(&outputs_of(&steps))),
            Some(SagaPhase::Compensated) => Err(final_failure(turned_back(run)?)),
        }
    }

    async fn state(&self) -> Result<(Option<SagaRun>, Vec<SagaStep>), JobFailure> {
        let job_id = self.ctx.job_id.clone();
        self.persist(|| self.ctx.store.saga_state(&job_id)).await
    }

    /// Runs the steps from the first not done.
    async fn forward(&self, records: Vec<SagaStep>) -> Result<Value, JobFailure> {
        let mut outputs = outputs_of(&records);
        for (index, step) in self.saga.steps().iter().enumerate() {
            let index = i64::try_from(index).unwrap_or(i64::MAX);
            let record = records.iter().find(|r| r.index == index);
            let mut tries = record.map_or(0, |r| r.attempts);
            if record.is_some_and(|r| r.outcome == "done") {
                continue;
            }
            // Failed, but the attempt that failed it died before it turned
            // the saga back.
            if let Some(failed) = record.filter(|r| r.outcome == "failed") {
                let why = match failed.error_type.as_deref() {
                    Some(CANCELLED) => TurnBack::Cancelled,
                    error_type => TurnBack::Failed {
                        error_type: error_type.unwrap_or_default().to_owned(),
                        message: failed.error_message.clone().unwrap_or_default(),
                    },
                };
                return self.turn_back(why).await;
            }
            loop {
                match self.ctx.checkpoint() {
                    Err(JobFailure::Cancelled) => {
                        if tries > 0 {
                            self.fail_step(index, CANCELLED, "a cancel stopped the step", true)
                                .await?;
                        }
                        return self.turn_back(TurnBack::Cancelled).await;
                    }
                    Err(other) => return Err(other),
                    Ok(()) => {}
                }
                self.fenced(|| {
                    self.ctx
                        .store
                        .begin_saga_step(fence(self.ctx), index, step.name())
                })
                .await?;
                tries += 1;
                let cx = self.step_context(step.name(), index, Doing::Action, &outputs);
                // A span per try of a step, in the attempt's trace.
                let span = info_span!(
                    "saga step",
                    otel.name = %format!("step {}", step.name()),
                    receipt.saga.step = step.name(),
                    receipt.saga.try = tries,
                );
                let tried = tokio::select! {
                    tried = try_within(step.timeout(), step.action(&cx)).instrument(span) => tried,
                    failure = self.stop_asked() => Tried::Failed(failure),
                };
                match tried {
                    Tried::Done(value) => {
                        if !cx.recorded.load(Ordering::Relaxed) {
                            let output = value.to_string();
                            self.fenced(|| {
                                self.ctx
                                    .store
                                    .record_saga_step(fence(self.ctx), index, &output)
                            })
                            .await?;
                        }
                        outputs.insert(step.name().to_owned(), value);
                        break;
                    }
                    Tried::Failed(JobFailure::Superseded) => return Err(JobFailure::Superseded),
                    Tried::Failed(JobFailure::Cancelled) => {
                        // Stopped mid-action: whether it took effect is
                        // unknown, so it is compensated too.
                        self.fail_step(index, CANCELLED, "a cancel stopped the step", true)
                            .await?;
                        return self.turn_back(TurnBack::Cancelled).await;
                    }
                    Tried::Failed(JobFailure::Permanent {
                        error_type,
                        message,
                    }) => {
                        // Refused outright: nothing of it to undo.
                        self.fail_step(index, &error_type, &message, false).await?;
                        return self
                            .turn_back(TurnBack::Failed {
                                error_type,
                                message,
                            })
                            .await;
                    }
                    Tried::Failed(JobFailure::Retryable {
                        error_type,
                        message,
                    }) => {
                        if tries >= self.saga.max_attempts() {
                            // It may have taken effect on a try whose
                            // answer was lost: compensated too.
                            self.fail_step(index, &error_type, &message, true).await?;
                            return self
                                .turn_back(TurnBack::Failed {
                                    error_type,
                                    message,
                                })
                                .await;
                        }
                        self.fenced(|| {
                            self.ctx.store.note_saga_step_error(
                                fence(self.ctx),
                                index,
                                &error_type,
                                &message,
                                None,
                            )
                        })
                        .await?;
                        let delay = backoff_delay(
                            tries,
                            self.ctx.settings.retry_base_delay,
                            self.ctx.settings.retry_max_delay,
                        );
                        tokio::select! {
                            () = tokio::time::sleep(delay) => {}
                            failure = self.stop_asked() => {
                                if failure == JobFailure::Superseded {
                                    return Err(failure);
                                }
                                self.fail_step(index, CANCELLED, "cancelled while waiting to retry", true).await?;
                                return self.turn_back(TurnBack::Cancelled).await;
                            }
                        }
                    }
                }
            }
        }
        self.fenced(|| {
            self.ctx
                .store
                .set_saga_phase(fence(self.ctx), SagaPhase::Completed, None)
        })
        .await?;
        Ok(self.saga.result(&outputs))
    }

    async fn fail_step(
        &self,
        index: i64,
        error_type: &str,
        message: &str,
        compensate: bool,
    ) -> Result<(), JobFailure> {
        self.fenced(|| {
            self.ctx.store.note_saga_step_error(
                fence(self.ctx),
                index,
                error_type,
                message,
                Some(compensate),
            )
        })
        .await
    }

    /// Turns the saga back and compensates.
    async fn turn_back(&self, why: TurnBack) -> Result<Value, JobFailure> {
        self.fenced(|| self.ctx.store.turn_saga_back(fence(self.ctx), &why))
            .await?;
        self.compensate(why).await
    }

    /// Runs every pending compensation, last step first, each until it
    /// succeeds; then the saga's failure (or cancel) is the attempt's.
    async fn compensate(&self, why: TurnBack) -> Result<Value, JobFailure> {
        let (_, records) = self.state().await?;
        let outputs = outputs_of(&records);
        let kind = self.saga.name();
        for record in records.iter().rev() {
            if !matches!(record.compensation.as_str(), "pending" | "running") {
                continue;
            }
            let Some(step) = usize::try_from(record.index)
                .ok()
                .and_then(|i| self.saga.steps().get(i))
            else {
                return Err(JobFailure::permanent(
                    "saga_changed",
                    format!("step {} of {kind} is no longer declared", record.index),
                ));
            };
            let index = record.index;
            let mut tries = record.compensation_attempts;
            loop {
                // A cancel does not stop compensations; a lost lease does.
                if let Err(JobFailure::Superseded) = self.ctx.checkpoint() {
                    return Err(JobFailure::Superseded);
                }
                self.fenced(|| {
                    self.ctx
                        .store
                        .begin_saga_compensation(fence(self.ctx), index)
                })
                .await?;
                tries += 1;
                let cx = self.step_context(step.name(), index, Doing::Compensation, &outputs);
                let span = info_span!(
                    "saga compensation",
                    otel.name = %format!("compensate {}", step.name()),
                    receipt.saga.step = step.name(),
                    receipt.saga.try = tries,
                );
                let tried = try_within(step.timeout(), async {
                    step.compensate(&cx).await.map(|()| Value::Null)
                })
                .instrument(span)
                .await;
                let (error_type, message) = match tried {
                    Tried::Done(_) => {
                        if !cx.recorded.load(Ordering::Relaxed) {
                            self.fenced(|| {
                                self.ctx
                                    .store
                                    .record_saga_compensation(fence(self.ctx), index)
                            })
                            .await?;
                        }
                        metrics::counter!("receipt_saga_compensations_total", "kind" => kind, "step" => step.name(), "outcome" => "done").increment(1);
                        break;
                    }
                    Tried::Failed(JobFailure::Superseded) => return Err(JobFailure::Superseded),
                    Tried::Failed(JobFailure::Retryable {
                        error_type,
                        message,
                    })
                    | Tried::Failed(JobFailure::Permanent {
                        error_type,
                        message,
                    }) => (error_type, message),
                    Tried::Failed(JobFailure::Cancelled) => {
                        (CANCELLED.to_owned(), "the compensation stopped".to_owned())
                    }
                };
                metrics::counter!("receipt_saga_compensations_total", "kind" => kind, "step" => step.name(), "outcome" => "failed").increment(1);
                // Never dropped: it stays pending, in the job object and
                // here, and is tried again.
                if tries >= self.saga.max_attempts() {
                    error!(
                        job_id = self.ctx.job_id,
                        step = step.name(),
                        tries,
                        error_type,
                        message,
                        "a compensation keeps failing; still retrying"
                    );
                } else {
                    warn!(
                        job_id = self.ctx.job_id,
                        step = step.name(),
                        tries,
                        error_type,
                        message,
                        "a compensation failed; retrying"
                    );
                }
                self.fenced(|| {
                    self.ctx.store.note_saga_compensation_error(
                        fence(self.ctx),
                        index,
                        &error_type,
                        &message,
                    )
                })
                .await?;
                let delay = backoff_delay(
                    tries,
                    self.ctx.settings.retry_base_delay,
                    self.ctx.settings.retry_max_delay,
                );
                tokio::time::sleep(delay).await;
            }
        }
        self.fenced(|| {
            self.ctx
                .store
                .set_saga_phase(fence(self.ctx), SagaPhase::Compensated, None)
        })
        .await?;
        Err(final_failure(why))
    }

    fn step_context<'b>(
        &'b self,
        step: &'static str,
        index: i64,
        doing: Doing,
        outputs: &'b BTreeMap<String, Value>,
    ) -> StepContext<'b> {
        StepContext {
            job: self.ctx,
            params: &self.params,
            outputs,
            step,
            index,
            doing,
            recorded: AtomicBool::new(false),
        }
    }

    /// Returns once a cancel is asked or the attempt lost its lease (the
    /// heartbeat raises both flags).
    async fn stop_asked(&self) -> JobFailure {
        loop {
            if let Err(failure) = self.ctx.checkpoint() {
                return failure;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A store call, tried again while the database fails (the attempt
    /// must not end on an outage with steps half recorded); stops when
    /// the attempt lost its lease.
    async fn persist<T, F, Fut>(&self, mut call: F) -> Result<T, JobFailure>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = store::Result<T>>,
    {
        STORE_OUTAGE
            .run(
                |_| call(),
                |error, _| {
                    if let Err(JobFailure::Superseded) = self.ctx.checkpoint() {
                        return false;
                    }
                    warn!(job_id = self.ctx.job_id, %error, "a saga could not write its record; retrying");
                    true
                },
            )
            .await
            .map_err(|_| JobFailure::Superseded)
    }

    /// A fenced write: `false` (this attempt is stale) ends the attempt.
    async fn fenced<F, Fut>(&self, call: F) -> Result<(), JobFailure>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = store::Result<bool>>,
    {
        if self.persist(call).await? {
            Ok(())
        } else {
            Err(JobFailure::Superseded)
        }
    }
}

/// Runs one try within `timeout`; a panic is a permanent failure (a bug),
/// running out of time a retryable one.
async fn try_within(
    timeout: Duration,
    work: impl Future<Output = Result<Value, JobFailure>>,
) -> Tried {
    match tokio::time::timeout(timeout, AssertUnwindSafe(work).catch_unwind()).await {
        Ok(Ok(Ok(value))) => Tried::Done(value),
        Ok(Ok(Err(failure))) => Tried::Failed(failure),
        Ok(Err(_panic)) => Tried::Failed(JobFailure::permanent(
            "panic",
            "the step panicked; this is a bug in Receipt",
        )),
        Err(_elapsed) => Tried::Failed(JobFailure::retryable(
            "timeout",
            format!("no answer within {}s", timeout.as_secs_f64()),
        )),
    }
}

fn outputs_of(records: &[SagaStep]) -> BTreeMap<String, Value> {
    records
        .iter()
        .filter_map(|r| {
            let output = r.output.as_deref()?;
            Some((r.name.clone(), serde_json::from_str(output).ok()?))
        })
        .collect()
}

fn turned_back(run: Option<SagaRun>) -> Result<TurnBack, JobFailure> {
    run.and_then(|r| r.turned_back).ok_or_else(|| {
        JobFailure::permanent("saga_corrupt", "the saga turned back without saying why")
    })
}

fn final_failure(why: TurnBack) -> JobFailure {
    match why {
        TurnBack::Cancelled => JobFailure::Cancelled,
        TurnBack::Failed {
            error_type,
            message,
        } => JobFailure::Permanent {
            error_type,
            message,
        },
    }
}

/// The `phase` and `steps` of a saga's job object, from its record and
/// the kind's declared step names.
pub fn job_view(
    names: &[&'static str],
    run: Option<&SagaRun>,
    records: &[SagaStep],
) -> (String, Vec<StepObject>) {
    let phase = run
        .map_or(SagaPhase::Forward, |r| r.phase)
        .as_str()
        .to_owned();
    let error = |t: &Option<String>, m: &Option<String>| match (t, m) {
        (Some(t), Some(m)) => Some(JobErrorObject {
            error_type: t.clone(),
            message: m.clone(),
            details: None,
        }),
        _ => None,
    };
    let steps = names
        .iter()
        .enumerate()
        .map(|(index, name)| {
            let record = records
                .iter()
                .find(|r| usize::try_from(r.index).ok() == Some(index));
            match record {
                None => StepObject {
                    name: (*name).to_owned(),
                    outcome: "pending".into(),
                    attempts: 0,
                    started_at: None,
                    finished_at: None,
                    error: None,
                    output: None,
                    compensation: None,
                },
                Some(r) => StepObject {
                    name: r.name.clone(),
                    outcome: r.outcome.clone(),
                    attempts: r.attempts,
                    started_at: Some(to_rfc3339(r.started_at)),
                    finished_at: r.finished_at.map(to_rfc3339),
                    error: error(&r.error_type, &r.error_message),
                    output: r
                        .output
                        .as_deref()
                        .and_then(|o| serde_json::from_str(o).ok()),
                    compensation: (r.compensation != "none").then(|| CompensationObject {
                        outcome: r.compensation.clone(),
                        attempts: r.compensation_attempts,
                        started_at: r.compensation_started_at.map(to_rfc3339),
                        finished_at: r.compensation_finished_at.map(to_rfc3339),
                        error: error(&r.compensation_error_type, &r.compensation_error_message),
                    }),
                },
            }
        })
        .collect();
    (phase, steps)
}
