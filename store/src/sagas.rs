//! The durable record of sagas (`docs/sagas.md`): a run's phase and each
//! step's outcome and compensation. Every write is fenced by the job's
//! attempt, as every other write of an attempt is: a stale attempt can
//! neither record a step nor start a compensation.
//!
//! A saga is *unfinished* while its run's phase is `forward` or
//! `compensating`: it has steps to run or to undo. Such a job is never
//! ended by the sweeper or by a cancel while queued, only by its own
//! attempts, which compensate first. Each statement that asks writes the
//! condition out on `jobs`:
//! `EXISTS (SELECT 1 FROM saga_runs r WHERE r.job_id = jobs.job_id AND
//! r.phase IN ('forward', 'compensating'))`.

use shared::time::now_ms;

use crate::{
    Error, Result, Store, WriteTx, on_pool, on_tx, postgres,
    sql::{JsonText, Millis},
    sqlite,
};

pub(crate) use crate::rows::sagas::{PhaseWrite, RunRow, StepError, StepRow};

/// Where a saga is going.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SagaPhase {
    /// Running its steps in order.
    Forward,
    /// A step failed or a cancel came: undoing the steps done, in reverse.
    Compensating,
    /// Every step done; the job's success is written next.
    Completed,
    /// Every compensation done; the job's FAILED or CANCELLED is written next.
    Compensated,
}

impl SagaPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            SagaPhase::Forward => "forward",
            SagaPhase::Compensating => "compensating",
            SagaPhase::Completed => "completed",
            SagaPhase::Compensated => "compensated",
        }
    }

    fn parse(text: &str) -> Result<Self> {
        Ok(match text {
            "forward" => SagaPhase::Forward,
            "compensating" => SagaPhase::Compensating,
            "completed" => SagaPhase::Completed,
            "compensated" => SagaPhase::Compensated,
            other => return Err(Error::Corrupt(format!("saga phase {other:?}"))),
        })
    }
}

/// Why a saga turned back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnBack {
    /// A step failed (or its attempts ran out): the job ends FAILED with this error.
    Failed { error_type: String, message: String },
    /// A cancel was asked: the job ends CANCELLED.
    Cancelled,
}

/// A saga's run as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SagaRun {
    pub phase: SagaPhase,
    pub turned_back: Option<TurnBack>,
}

/// One step's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SagaStep {
    pub index: i64,
    pub name: String,
    /// `running`, `done` or `failed`.
    pub outcome: String,
    pub attempts: i64,
    pub started_at: i64,
    pub finished_at: Option<i64>,
    pub error_type: Option<String>,
    pub error_message: Option<String>,
    /// JSON, once done.
    pub output: Option<String>,
    /// `none`, `pending`, `running` or `done`.
    pub compensation: String,
    pub compensation_attempts: i64,
    pub compensation_started_at: Option<i64>,
    pub compensation_finished_at: Option<i64>,
    pub compensation_error_type: Option<String>,
    pub compensation_error_message: Option<String>,
}

impl TryFrom<RunRow> for SagaRun {
    type Error = Error;

    fn try_from(row: RunRow) -> Result<SagaRun> {
        let turned_back = match row.cause.as_deref() {
            None => None,
            Some("cancelled") => Some(TurnBack::Cancelled),
            Some(_) => Some(TurnBack::Failed {
                error_type: row.error_type.unwrap_or_default(),
                message: row.error_message.unwrap_or_default(),
            }),
        };
        Ok(SagaRun {
            phase: SagaPhase::parse(&row.phase)?,
            turned_back,
        })
    }
}

impl From<StepRow> for SagaStep {
    fn from(row: StepRow) -> SagaStep {
        SagaStep {
            index: row.step_index,
            name: row.name,
            outcome: row.outcome,
            attempts: row.attempts,
            started_at: row.started_at.into(),
            finished_at: row.finished_at.map(i64::from),
            error_type: row.error_type,
            error_message: row.error_message,
            output: row.output.map(String::from),
            compensation: row.compensation,
            compensation_attempts: row.compensation_attempts,
            compensation_started_at: row.compensation_started_at.map(i64::from),
            compensation_finished_at: row.compensation_finished_at.map(i64::from),
            compensation_error_type: row.compensation_error_type,
            compensation_error_message: row.compensation_error_message,
        }
    }
}

/// A fenced write of attempt `attempt` of job `job_id`.
#[derive(Debug, Clone, Copy)]
pub struct Fence<'a> {
    pub job_id: &'a str,
    pub attempt: i64,
}

impl Store {
    /// The saga's run (`None` before its first attempt) and its steps in order.
    pub async fn saga_state(&self, job_id: &str) -> Result<(Option<SagaRun>, Vec<SagaStep>)> {
        let run = on_pool!(self,
            pool => postgres::sagas::run(pool, job_id).await?,
            pool => sqlite::sagas::run(pool, job_id).await?,
        );
        let steps = on_pool!(self,
            pool => postgres::sagas::steps(pool, job_id).await?,
            pool => sqlite::sagas::steps(pool, job_id).await?,
        );
        Ok((
            run.map(SagaRun::try_from).transpose()?,
            steps.into_iter().map(SagaStep::from).collect(),
        ))
    }

    /// Whether the job is a saga with steps to run or undo (see the
    /// module's documentation), as the caller's transaction sees it.
    pub(crate) async fn saga_unfinished(&self, tx: &mut WriteTx, job_id: &str) -> Result<bool> {
        Ok(on_tx!(tx,
            conn => postgres::sagas::unfinished(conn, job_id).await?,
            conn => sqlite::sagas::unfinished(conn, job_id).await?,
        ))
    }

    /// Whether `fence` is still the job's current, running attempt; on
    /// Postgres the job's row stays locked until the transaction ends, so
    /// no other attempt can take over before this one's writes commit.
    pub async fn attempt_is_current(&self, tx: &mut WriteTx, fence: Fence<'_>) -> Result<bool> {
        Ok(on_tx!(tx,
            conn => postgres::sagas::attempt_is_current(conn, fence.job_id, fence.attempt).await?,
            conn => sqlite::sagas::attempt_is_current(conn, fence.job_id, fence.attempt).await?,
        ))
    }

    /// A write transaction, if `fence` is current; `None` when it is not
    /// (then nothing may be written).
    async fn fenced_tx(&self, fence: Fence<'_>) -> Result<Option<WriteTx>> {
        let mut tx = self.begin_write().await?;
        Ok(if self.attempt_is_current(&mut tx, fence).await? {
            Some(tx)
        } else {
            None
        })
    }

    /// Sets the saga's phase (and why it turned back), fenced.
    pub async fn set_saga_phase(
        &self,
        fence: Fence<'_>,
        phase: SagaPhase,
        turned_back: Option<&TurnBack>,
    ) -> Result<bool> {
        let Some(mut tx) = self.fenced_tx(fence).await? else {
            return Ok(false);
        };
        write_saga_phase(&mut tx, fence.job_id, phase, turned_back).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Starts an attempt of step `index`: its row (made on the first), one
    /// more attempt, outcome `running`. Fenced: `false` means this attempt
    /// is stale and must not run the step.
    pub async fn begin_saga_step(&self, fence: Fence<'_>, index: i64, name: &str) -> Result<bool> {
        let Some(mut tx) = self.fenced_tx(fence).await? else {
            return Ok(false);
        };
        let now = Millis(now_ms());
        on_tx!(tx,
            conn => postgres::sagas::begin_step(conn, fence.job_id, index, name, now).await?,
            conn => sqlite::sagas::begin_step(conn, fence.job_id, index, name, now).await?,
        );
        tx.commit().await?;
        Ok(true)
    }

    /// Records step `index` as done with its output, in the caller's
    /// transaction (which must have checked the fence): a local step's
    /// effect and its record commit together.
    pub async fn record_saga_step_in(
        &self,
        tx: &mut WriteTx,
        job_id: &str,
        index: i64,
        output: &str,
    ) -> Result<()> {
        let now = Millis(now_ms());
        let output = JsonText(output.to_owned());
        on_tx!(tx,
            conn => postgres::sagas::record_step(conn, job_id, index, now, &output).await?,
            conn => sqlite::sagas::record_step(conn, job_id, index, now, &output).await?,
        );
        Ok(())
    }

    /// Records step `index` as done, fenced (an external step, after the
    /// other side answered).
    pub async fn record_saga_step(
        &self,
        fence: Fence<'_>,
        index: i64,
        output: &str,
    ) -> Result<bool> {
        let Some(mut tx) = self.fenced_tx(fence).await? else {
            return Ok(false);
        };
        self.record_saga_step_in(&mut tx, fence.job_id, index, output)
            .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Notes a step's error: `finished` ends the step as failed (with a
    /// compensation pending when `compensate`: its effect may have
    /// happened), otherwise it stays running and is tried again.
    pub async fn note_saga_step_error(
        &self,
        fence: Fence<'_>,
        index: i64,
        error_type: &str,
        message: &str,
        finished: Option<bool>,
    ) -> Result<bool> {
        let (outcome, finished_at, compensation) = match finished {
            None => ("running", None, "none"),
            Some(compensate) => (
                "failed",
                Some(Millis(now_ms())),
                if compensate { "pending" } else { "none" },
            ),
        };
        let error = StepError {
            outcome,
            finished_at,
            error_type,
            error_message: message,
            compensation,
        };
        let Some(mut tx) = self.fenced_tx(fence).await? else {
            return Ok(false);
        };
        on_tx!(tx,
            conn => postgres::sagas::note_step_error(conn, fence.job_id, index, &error).await?,
            conn => sqlite::sagas::note_step_error(conn, fence.job_id, index, &error).await?,
        );
        tx.commit().await?;
        Ok(true)
    }

    /// Marks the compensation of every step done (or left unfinished by an
    /// earlier attempt) pending and turns the saga back, in one fenced
    /// transaction.
    pub async fn turn_saga_back(&self, fence: Fence<'_>, why: &TurnBack) -> Result<bool> {
        let Some(mut tx) = self.fenced_tx(fence).await? else {
            return Ok(false);
        };
        let now = Millis(now_ms());
        // Every step done is to be undone; so is a step an earlier attempt
        // started and never finished (it died, or was handed back), which
        // may have taken effect.
        on_tx!(tx,
            conn => {
                postgres::sagas::compensate_done_steps(conn, fence.job_id).await?;
                postgres::sagas::compensate_interrupted_steps(conn, fence.job_id, now).await?;
            },
            conn => {
                sqlite::sagas::compensate_done_steps(conn, fence.job_id).await?;
                sqlite::sagas::compensate_interrupted_steps(conn, fence.job_id, now).await?;
            },
        );
        write_saga_phase(&mut tx, fence.job_id, SagaPhase::Compensating, Some(why)).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Starts an attempt of step `index`'s compensation, fenced: `false`
    /// means this attempt is stale and must not run it.
    pub async fn begin_saga_compensation(&self, fence: Fence<'_>, index: i64) -> Result<bool> {
        let Some(mut tx) = self.fenced_tx(fence).await? else {
            return Ok(false);
        };
        let now = Millis(now_ms());
        on_tx!(tx,
            conn => postgres::sagas::begin_compensation(conn, fence.job_id, index, now).await?,
            conn => sqlite::sagas::begin_compensation(conn, fence.job_id, index, now).await?,
        );
        tx.commit().await?;
        Ok(true)
    }

    /// Records step `index`'s compensation as done, in the caller's
    /// transaction (which must have checked the fence).
    pub async fn record_saga_compensation_in(
        &self,
        tx: &mut WriteTx,
        job_id: &str,
        index: i64,
    ) -> Result<()> {
        let now = Millis(now_ms());
        on_tx!(tx,
            conn => postgres::sagas::record_compensation(conn, job_id, index, now).await?,
            conn => sqlite::sagas::record_compensation(conn, job_id, index, now).await?,
        );
        Ok(())
    }

    pub async fn record_saga_compensation(&self, fence: Fence<'_>, index: i64) -> Result<bool> {
        let Some(mut tx) = self.fenced_tx(fence).await? else {
            return Ok(false);
        };
        self.record_saga_compensation_in(&mut tx, fence.job_id, index)
            .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Notes a failed attempt of a compensation; it is tried again.
    pub async fn note_saga_compensation_error(
        &self,
        fence: Fence<'_>,
        index: i64,
        error_type: &str,
        message: &str,
    ) -> Result<bool> {
        let Some(mut tx) = self.fenced_tx(fence).await? else {
            return Ok(false);
        };
        on_tx!(tx,
            conn => postgres::sagas::note_compensation_error(
                conn, fence.job_id, index, error_type, message,
            )
            .await?,
            conn => sqlite::sagas::note_compensation_error(
                conn, fence.job_id, index, error_type, message,
            )
            .await?,
        );
        tx.commit().await?;
        Ok(true)
    }
}

/// Writes the saga's phase, and why it turned back (kept once set).
async fn write_saga_phase(
    tx: &mut WriteTx,
    job_id: &str,
    phase: SagaPhase,
    turned_back: Option<&TurnBack>,
) -> Result<()> {
    let (cause, error_type, error_message) = match turned_back {
        None => (None, None, None),
        Some(TurnBack::Cancelled) => (Some("cancelled"), None, None),
        Some(TurnBack::Failed {
            error_type,
            message,
        }) => (
            Some("failed"),
            Some(error_type.as_str()),
            Some(message.as_str()),
        ),
    };
    let write = PhaseWrite {
        job_id,
        phase: phase.as_str(),
        cause,
        error_type,
        error_message,
        now: Millis(now_ms()),
    };
    on_tx!(tx,
        conn => postgres::sagas::write_phase(conn, &write).await?,
        conn => sqlite::sagas::write_phase(conn, &write).await?,
    );
    Ok(())
}
