//! The durable record of sagas (`docs/sagas.md`): a run's phase and each
//! step's outcome and compensation. Every write is fenced by the job's
//! attempt, as every other write of an attempt is: a stale attempt can
//! neither record a step nor start a compensation.

use sqlx::{Row, any::AnyRow};

use super::{Store, WriteTx};
use crate::Result;
use shared::{model::JobStatus, time::now_ms};

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
            other => return Err(crate::Error::Corrupt(format!("saga phase {other:?}"))),
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

const STEP_COLUMNS: &str = "step_index, name, outcome, attempts, started_at, finished_at, \
     error_type, error_message, output, compensation, compensation_attempts, \
     compensation_started_at, compensation_finished_at, compensation_error_type, \
     compensation_error_message";

fn step_from_row(row: &AnyRow) -> Result<SagaStep> {
    Ok(SagaStep {
        index: row.try_get("step_index")?,
        name: row.try_get("name")?,
        outcome: row.try_get("outcome")?,
        attempts: row.try_get("attempts")?,
        started_at: row.try_get("started_at")?,
        finished_at: row.try_get("finished_at")?,
        error_type: row.try_get("error_type")?,
        error_message: row.try_get("error_message")?,
        output: row.try_get("output")?,
        compensation: row.try_get("compensation")?,
        compensation_attempts: row.try_get("compensation_attempts")?,
        compensation_started_at: row.try_get("compensation_started_at")?,
        compensation_finished_at: row.try_get("compensation_finished_at")?,
        compensation_error_type: row.try_get("compensation_error_type")?,
        compensation_error_message: row.try_get("compensation_error_message")?,
    })
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
        let run = sqlx::query(
            "SELECT phase, cause, error_type, error_message FROM saga_runs WHERE job_id = $1",
        )
        .bind(job_id)
        .fetch_optional(&self.pool)
        .await?;
        let run = match run {
            None => None,
            Some(row) => {
                let cause: Option<String> = row.try_get("cause")?;
                let turned_back = match cause.as_deref() {
                    None => None,
                    Some("cancelled") => Some(TurnBack::Cancelled),
                    Some(_) => Some(TurnBack::Failed {
                        error_type: row
                            .try_get::<Option<String>, _>("error_type")?
                            .unwrap_or_default(),
                        message: row
                            .try_get::<Option<String>, _>("error_message")?
                            .unwrap_or_default(),
                    }),
                };
                Some(SagaRun {
                    phase: SagaPhase::parse(&row.try_get::<String, _>("phase")?)?,
                    turned_back,
                })
            }
        };
        let steps = sqlx::query(super::built(&format!(
            "SELECT {STEP_COLUMNS} FROM saga_steps WHERE job_id = $1 ORDER BY step_index"
        )))
        .bind(job_id)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(step_from_row)
        .collect::<Result<Vec<_>>>()?;
        Ok((run, steps))
    }

    /// Whether the job is a saga with steps to run or undo.
    pub(super) async fn saga_unfinished(&self, tx: &mut WriteTx, job_id: &str) -> Result<bool> {
        let row = sqlx::query(super::built(&format!(
            "SELECT 1 AS unfinished FROM jobs WHERE job_id = $1 AND {SAGA_UNFINISHED}"
        )))
        .bind(job_id)
        .fetch_optional(&mut **tx)
        .await?;
        Ok(row.is_some())
    }

    /// Whether `fence` is still the job's current, running attempt; on
    /// Postgres the job's row stays locked until the transaction ends, so
    /// no other attempt can take over before this one's writes commit.
    pub async fn attempt_is_current(&self, tx: &mut WriteTx, fence: Fence<'_>) -> Result<bool> {
        let row = sqlx::query(super::built(&format!(
            "SELECT 1 AS current FROM jobs WHERE job_id = $1 AND attempts = $2 AND status = $3{}",
            self.dialect.for_update()
        )))
        .bind(fence.job_id)
        .bind(fence.attempt)
        .bind(JobStatus::Running.as_str())
        .fetch_optional(&mut **tx)
        .await?;
        Ok(row.is_some())
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
        self.write_saga_phase(&mut tx, fence.job_id, phase, turned_back)
            .await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn write_saga_phase(
        &self,
        tx: &mut WriteTx,
        job_id: &str,
        phase: SagaPhase,
        turned_back: Option<&TurnBack>,
    ) -> Result<()> {
        let (cause, error_type, message) = match turned_back {
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
        sqlx::query(
            "INSERT INTO saga_runs (job_id, phase, cause, error_type, error_message, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (job_id) DO UPDATE SET phase = excluded.phase,
                 cause = COALESCE(excluded.cause, saga_runs.cause),
                 error_type = COALESCE(excluded.error_type, saga_runs.error_type),
                 error_message = COALESCE(excluded.error_message, saga_runs.error_message),
                 updated_at = excluded.updated_at",
        )
        .bind(job_id)
        .bind(phase.as_str())
        .bind(cause)
        .bind(error_type)
        .bind(message)
        .bind(now_ms())
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Starts an attempt of step `index`: its row (made on the first), one
    /// more attempt, outcome `running`. Fenced: `false` means this attempt
    /// is stale and must not run the step.
    pub async fn begin_saga_step(&self, fence: Fence<'_>, index: i64, name: &str) -> Result<bool> {
        let Some(mut tx) = self.fenced_tx(fence).await? else {
            return Ok(false);
        };
        sqlx::query(
            "INSERT INTO saga_steps (job_id, step_index, name, outcome, attempts, started_at)
                 VALUES ($1, $2, $3, 'running', 1, $4)
                 ON CONFLICT (job_id, step_index) DO UPDATE SET outcome = 'running',
                     attempts = saga_steps.attempts + 1",
        )
        .bind(fence.job_id)
        .bind(index)
        .bind(name)
        .bind(now_ms())
        .execute(&mut *tx)
        .await?;
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
        sqlx::query(
            "UPDATE saga_steps SET outcome = 'done', finished_at = $3, output = $4,
                 error_type = NULL, error_message = NULL
             WHERE job_id = $1 AND step_index = $2",
        )
        .bind(job_id)
        .bind(index)
        .bind(now_ms())
        .bind(output)
        .execute(&mut **tx)
        .await?;
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
                Some(now_ms()),
                if compensate { "pending" } else { "none" },
            ),
        };
        let Some(mut tx) = self.fenced_tx(fence).await? else {
            return Ok(false);
        };
        sqlx::query(
            "UPDATE saga_steps SET outcome = $3, finished_at = $4, error_type = $5,
                     error_message = $6, compensation = $7
                 WHERE job_id = $1 AND step_index = $2",
        )
        .bind(fence.job_id)
        .bind(index)
        .bind(outcome)
        .bind(finished_at)
        .bind(error_type)
        .bind(message)
        .bind(compensation)
        .execute(&mut *tx)
        .await?;
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
        sqlx::query(
            "UPDATE saga_steps SET compensation = 'pending'
             WHERE job_id = $1 AND outcome = 'done' AND compensation = 'none'",
        )
        .bind(fence.job_id)
        .execute(&mut *tx)
        .await?;
        // A step an earlier attempt started and never finished (it died, or
        // was handed back) may have taken effect: it is compensated too.
        sqlx::query(
            "UPDATE saga_steps SET outcome = 'failed', finished_at = $2, compensation = 'pending',
                 error_type = 'interrupted',
                 error_message = 'the attempt running it ended before it finished'
             WHERE job_id = $1 AND outcome = 'running'",
        )
        .bind(fence.job_id)
        .bind(now_ms())
        .execute(&mut *tx)
        .await?;
        self.write_saga_phase(&mut tx, fence.job_id, SagaPhase::Compensating, Some(why))
            .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Starts an attempt of step `index`'s compensation, fenced: `false`
    /// means this attempt is stale and must not run it.
    pub async fn begin_saga_compensation(&self, fence: Fence<'_>, index: i64) -> Result<bool> {
        let Some(mut tx) = self.fenced_tx(fence).await? else {
            return Ok(false);
        };
        sqlx::query(
            "UPDATE saga_steps SET compensation = 'running',
                     compensation_attempts = compensation_attempts + 1,
                     compensation_started_at = COALESCE(compensation_started_at, $3)
                 WHERE job_id = $1 AND step_index = $2",
        )
        .bind(fence.job_id)
        .bind(index)
        .bind(now_ms())
        .execute(&mut *tx)
        .await?;
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
        sqlx::query(
            "UPDATE saga_steps SET compensation = 'done', compensation_finished_at = $3,
                 compensation_error_type = NULL, compensation_error_message = NULL
             WHERE job_id = $1 AND step_index = $2",
        )
        .bind(job_id)
        .bind(index)
        .bind(now_ms())
        .execute(&mut **tx)
        .await?;
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
        sqlx::query(
            "UPDATE saga_steps SET compensation_error_type = $3, compensation_error_message = $4
                 WHERE job_id = $1 AND step_index = $2",
        )
        .bind(fence.job_id)
        .bind(index)
        .bind(error_type)
        .bind(message)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }
}

/// The condition, on a `jobs` row, that it is a saga with work left to do
/// (steps to run or to undo): such a job is never ended by the sweeper or
/// by a cancel while queued, only by its own attempts, which compensate
/// first.
pub(super) const SAGA_UNFINISHED: &str = "EXISTS (SELECT 1 FROM saga_runs r \
     WHERE r.job_id = jobs.job_id AND r.phase IN ('forward', 'compensating'))";
