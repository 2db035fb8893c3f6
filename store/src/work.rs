//! The store's half of the worker protocol (`docs/workers.md`): leases of
//! external jobs, their heartbeats, and the state a refused or retried
//! call is answered from. An attempt ends through the same fenced writes
//! as a built-in one ([`Store::finish_succeeded`], [`Store::finish_attempt`]).

use std::time::Duration;

use shared::{
    model::{JobStatus, Priority},
    settings::Caps,
    time::{duration_ms, now_ms},
};

use crate::{Claim, Error, Result, Store, on_postgres, on_tx, postgres, sql::Millis, sqlite};

pub(crate) use crate::rows::work::{AttemptStateRow, LeaseTerms, LeasedRow};

/// How the jobs' `worker_id` names a worker over HTTP: apart from the ids
/// of the built-in workers, whatever a worker calls itself.
fn worker_id_of(name: &str) -> String {
    format!("http:{name}")
}

/// A kind a lease asks for, with what its attempts are held to.
#[derive(Debug, Clone)]
pub struct LeasedKind {
    pub name: String,
    /// How long an attempt may run, from its lease.
    pub timeout_ms: i64,
    /// The tenant's cap on running jobs of the kind, if any.
    pub max_running: Option<i64>,
}

/// A lease of a worker's due attempts.
#[derive(Debug, Clone)]
pub struct LeaseAsk<'a> {
    pub tenant_id: &'a str,
    pub kinds: &'a [LeasedKind],
    pub most: usize,
    /// The worker's name.
    pub worker: &'a str,
    /// Note the worker as seen even when this look takes nothing (the
    /// first look of a lease request; a waiting lease's later looks
    /// write only when they take attempts).
    pub note_seen: bool,
    /// How long the lease lasts without a heartbeat.
    pub lease: Duration,
    /// The deployment's caps (`MAX_RUNNING_PER_TENANT`); each kind's own
    /// cap is added to them.
    pub caps: &'a Caps,
}

/// An attempt a lease took.
#[derive(Debug, Clone)]
pub struct LeasedAttempt {
    pub claim: Claim,
    pub priority: Priority,
    /// When the lease lapses without a heartbeat (unix ms).
    pub lease_expires_at: i64,
    /// When the attempt must have ended (unix ms): no heartbeat extends
    /// the lease past it.
    pub deadline: i64,
}

/// A heartbeat's answer for an attempt still held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heartbeat {
    pub cancel_requested: bool,
    pub lease_expires_at: i64,
    pub deadline: i64,
}

/// An external job as it stands, read to answer a call on one of its
/// attempts that its fence refused, or that repeats one that applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalJobState {
    pub kind: String,
    pub status: JobStatus,
    /// The current attempt's fencing token.
    pub attempt: i64,
    /// Which attempt it is against `max_attempts`: attempts handed back
    /// do not count.
    pub counted_attempt: i64,
    pub max_attempts: i64,
    pub cancel_requested: bool,
    pub run_after: i64,
    pub deadline: Option<i64>,
    pub error_type: Option<String>,
    pub error_message: Option<String>,
    /// The name of the worker over HTTP that holds (or last held) it.
    pub worker: Option<String>,
}

/// An external job a batch of reports names, as it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportedJob {
    pub state: ExternalJobState,
    /// Whether its kind takes a JSON result (`application/json` among its
    /// `result_media_types`).
    pub takes_json: bool,
}

/// A worker over HTTP, as `GET /v1/workers` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerRecord {
    pub name: String,
    /// The kinds its last lease named.
    pub kinds: Vec<String>,
    pub first_seen_at: i64,
    /// Its last lease (unix ms).
    pub last_seen_at: i64,
    /// Attempts it leased, in all.
    pub leased: i64,
    /// Attempts it reported failed, in all.
    pub failed: i64,
    /// Attempts it holds now.
    pub holding: i64,
}

impl From<LeasedRow> for LeasedAttempt {
    fn from(row: LeasedRow) -> Self {
        LeasedAttempt {
            priority: Priority::parse(&row.priority).unwrap_or(Priority::Normal),
            lease_expires_at: row.lease_expires_at.0,
            deadline: row.attempt_deadline.0,
            claim: Claim::from(row.claim),
        }
    }
}

impl TryFrom<AttemptStateRow> for ExternalJobState {
    type Error = Error;

    fn try_from(row: AttemptStateRow) -> Result<Self> {
        Ok(ExternalJobState {
            status: JobStatus::parse(&row.status)
                .ok_or_else(|| Error::Corrupt(format!("job status {:?}", row.status)))?,
            kind: row.kind,
            attempt: row.attempts,
            counted_attempt: row.attempts - row.handbacks,
            max_attempts: row.max_attempts,
            cancel_requested: row.cancel_requested,
            run_after: row.run_after.0,
            deadline: row.attempt_deadline.map(|at| at.0),
            error_type: row.error_type,
            error_message: row.error_message,
            worker: row
                .worker_id
                .as_deref()
                .and_then(|id| id.strip_prefix("http:"))
                .map(str::to_owned),
        })
    }
}

impl Store {
    /// Leases up to `ask.most` of the tenant's due external jobs of the
    /// kinds asked, by rank, in one transaction (on Postgres, one call): each
    /// claimed as a built-in worker claims (the attempt counted, the job
    /// RUNNING under a lease, parked instead when over a cap) and given its
    /// deadline.
    pub async fn lease_external(&self, ask: &LeaseAsk<'_>) -> Result<Vec<LeasedAttempt>> {
        if ask.most == 0 || ask.kinds.is_empty() {
            return Ok(Vec::new());
        }
        let (now, rank_before) = self.due_bounds();
        let names: Vec<String> = ask.kinds.iter().map(|kind| kind.name.clone()).collect();
        let timeouts_ms: Vec<i64> = ask.kinds.iter().map(|kind| kind.timeout_ms).collect();
        let worker_id = worker_id_of(ask.worker);
        let terms = LeaseTerms {
            tenant_id: ask.tenant_id,
            kinds: &names,
            timeouts_ms: &timeouts_ms,
            most: i64::try_from(ask.most).unwrap_or(i64::MAX),
            now,
            rank_before,
            lease_until: Millis(now.0.saturating_add(duration_ms(ask.lease))),
            worker_id: &worker_id,
            worker: ask.worker,
            note_seen: ask.note_seen,
        };
        let mut caps = ask.caps.clone();
        for kind in ask.kinds {
            if let Some(cap) = kind.max_running {
                caps.per_kind.retain(|(name, _)| *name != kind.name);
                caps.per_kind
                    .push((kind.name.clone(), u32::try_from(cap).unwrap_or(u32::MAX)));
            }
        }
        let rows = match &self.db {
            crate::Db::Postgres(pool) => on_postgres!(self, pool, pool =>
                postgres::work::lease(pool, &terms, &caps).await?
            ),
            crate::Db::Sqlite(_) => {
                let mut tx = self.begin_write().await?;
                let rows = on_tx!(tx,
                    _conn => unreachable!("a SQLite store writes on SQLite"),
                    conn => sqlite::work::lease(conn, &terms, &caps).await?,
                );
                tx.commit().await?;
                rows
            }
        };
        Ok(rows.into_iter().map(LeasedAttempt::from).collect())
    }

    /// Extends the lease of the tenant's external attempt by `lease`
    /// (never past its deadline) and records `progress`; `None` when the
    /// attempt is no longer the job's current, running one, or its deadline
    /// passed ([`Store::external_job`] says which).
    pub async fn heartbeat_external(
        &self,
        tenant_id: &str,
        job_id: &str,
        attempt: i64,
        lease: Duration,
        progress: Option<f64>,
    ) -> Result<Option<Heartbeat>> {
        let _turn = self.write_turn().await;
        let now = now_ms();
        let lease_until = Millis(now.saturating_add(duration_ms(lease)));
        let progress = progress.map(|p| p.clamp(0.0, 1.0));
        let row = crate::on_pool!(self,
            pool => postgres::work::heartbeat(pool, tenant_id, job_id, attempt, Millis(now), lease_until, progress).await?,
            pool => sqlite::work::heartbeat(pool, tenant_id, job_id, attempt, Millis(now), lease_until, progress).await?,
        );
        Ok(row.map(|row| Heartbeat {
            cancel_requested: row.cancel_requested,
            lease_expires_at: row.lease_expires_at.0,
            deadline: row.attempt_deadline.0,
        }))
    }

    /// Counts a failed attempt against the worker over HTTP that held it.
    pub async fn count_worker_failure(&self, tenant_id: &str, worker: &str) -> Result<()> {
        let _turn = self.write_turn().await;
        crate::on_pool!(self,
            pool => postgres::work::failed(pool, tenant_id, worker).await?,
            pool => sqlite::work::failed(pool, tenant_id, worker).await?,
        );
        Ok(())
    }

    /// The tenant's workers over HTTP, the last seen first.
    pub async fn workers(&self, tenant_id: &str) -> Result<Vec<WorkerRecord>> {
        let rows = crate::on_pool!(self,
            pool => postgres::work::list(pool, tenant_id).await?,
            pool => sqlite::work::list(pool, tenant_id).await?,
        );
        rows.into_iter()
            .map(|row| {
                Ok(WorkerRecord {
                    kinds: serde_json::from_str(&row.kinds.0).map_err(|e| {
                        Error::Corrupt(format!("the kinds of worker {}: {e}", row.name))
                    })?,
                    name: row.name,
                    first_seen_at: row.first_seen_at.0,
                    last_seen_at: row.last_seen_at.0,
                    leased: row.leased,
                    failed: row.failed,
                    holding: row.holding,
                })
            })
            .collect()
    }

    /// The tenant's external jobs among `job_ids` as they stand, each with
    /// its id; ids of no such job are left out.
    pub async fn external_jobs(
        &self,
        tenant_id: &str,
        job_ids: &[String],
    ) -> Result<Vec<(String, ReportedJob)>> {
        if job_ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows = crate::on_pool!(self,
            pool => postgres::work::states(pool, tenant_id, job_ids).await?,
            pool => sqlite::work::states(pool, tenant_id, job_ids).await?,
        );
        rows.into_iter()
            .map(|row| {
                let job_id = row.state.job_id.clone();
                let job = ReportedJob {
                    state: ExternalJobState::try_from(row.state)?,
                    takes_json: row.takes_json,
                };
                Ok((job_id, job))
            })
            .collect()
    }

    /// The tenant's external job as it stands, if it has one of that id.
    pub async fn external_job(
        &self,
        tenant_id: &str,
        job_id: &str,
    ) -> Result<Option<ExternalJobState>> {
        let row = crate::on_pool!(self,
            pool => postgres::work::state(pool, tenant_id, job_id).await?,
            pool => sqlite::work::state(pool, tenant_id, job_id).await?,
        );
        row.map(ExternalJobState::try_from).transpose()
    }
}
