//! Months a `period-close` locked or closed, and where each tenant files
//! its returns.

use shared::time::now_ms;

use crate::{
    Actor, AuditAction, AuditChange, Result, Store, WriteTx, on_pool, on_tx, postgres,
    secrets::filing_context, sql::Millis, sqlite,
};

pub(crate) use crate::rows::periods::{EndpointRow, PeriodRow};

/// A month that is not open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Period {
    pub month: String,
    /// `locked` (a period-close is running) or `closed`.
    pub state: String,
    /// The period-close job that locked (and closed) it.
    pub job_id: String,
    pub locked_at: i64,
    pub closed_at: Option<i64>,
    pub filing_reference: Option<String>,
}

impl From<PeriodRow> for Period {
    fn from(row: PeriodRow) -> Period {
        Period {
            month: row.month,
            state: row.state,
            job_id: row.job_id,
            locked_at: row.locked_at.into(),
            closed_at: row.closed_at.map(i64::from),
            filing_reference: row.filing_reference,
        }
    }
}

/// What locking a month found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockOutcome {
    /// Locked now, or already by this job.
    Locked,
    /// Locked or closed by another job.
    Held(Period),
}

/// What a reopen found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReopenOutcome {
    /// The month was closed and is open now (or was open already).
    Open,
    /// A period-close is running on it.
    Locked(Period),
}

/// Where a tenant's returns are filed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilingEndpoint {
    pub url: String,
    /// `whsec_` + base64: signs each request as webhooks are signed.
    pub secret: String,
    pub created_at: i64,
    pub updated_at: i64,
}

impl FilingEndpoint {
    fn of_row(row: EndpointRow, secret: String) -> FilingEndpoint {
        FilingEndpoint {
            url: row.url,
            secret,
            created_at: row.created_at.into(),
            updated_at: row.updated_at.into(),
        }
    }
}

/// The month's row as the caller's transaction sees it.
async fn period_in(tx: &mut WriteTx, tenant_id: &str, month: &str) -> Result<Option<Period>> {
    let row = on_tx!(tx,
        conn => postgres::periods::get(conn, tenant_id, month).await?,
        conn => sqlite::periods::get(conn, tenant_id, month).await?,
    );
    Ok(row.map(Period::from))
}

/// Postgres: a lock on one tenant's month until the transaction ends,
/// shared by imports, exclusive for the period-close that locks it. It is
/// what makes "imports into a locked month are refused" exact: the lock
/// waits for imports of the month already under way, and an import that
/// comes after sees the lock. SQLite has one writer at a time, which
/// already orders them.
async fn month_lock(tx: &mut WriteTx, tenant_id: &str, month: &str, exclusive: bool) -> Result<()> {
    on_tx!(tx,
        conn => {
            let key = format!("period:{tenant_id}:{month}");
            if exclusive {
                postgres::periods::lock_month(conn, &key).await?;
            } else {
                postgres::periods::lock_month_shared(conn, &key).await?;
            }
        },
        _conn => {},
    );
    Ok(())
}

impl Store {
    /// Locks `month` for `job_id`, in the caller's transaction.
    pub async fn lock_period(
        &self,
        tx: &mut WriteTx,
        tenant_id: &str,
        month: &str,
        job_id: &str,
    ) -> Result<LockOutcome> {
        month_lock(tx, tenant_id, month, true).await?;
        if let Some(period) = period_in(tx, tenant_id, month).await? {
            return Ok(if period.job_id == job_id {
                LockOutcome::Locked
            } else {
                LockOutcome::Held(period)
            });
        }
        let now = Millis(now_ms());
        on_tx!(tx,
            conn => postgres::periods::insert_locked(conn, tenant_id, month, job_id, now).await?,
            conn => sqlite::periods::insert_locked(conn, tenant_id, month, job_id, now).await?,
        );
        Ok(LockOutcome::Locked)
    }

    /// Unlocks `month` if `job_id` locked it and has not closed it.
    pub async fn unlock_period(
        &self,
        tx: &mut WriteTx,
        tenant_id: &str,
        month: &str,
        job_id: &str,
    ) -> Result<()> {
        on_tx!(tx,
            conn => postgres::periods::unlock(conn, tenant_id, month, job_id).await?,
            conn => sqlite::periods::unlock(conn, tenant_id, month, job_id).await?,
        );
        Ok(())
    }

    /// Marks `month`, locked by `job_id`, closed with the receiver's
    /// reference of the filing (`closed`), or locked again (undoing that).
    pub async fn set_period_closed(
        &self,
        tx: &mut WriteTx,
        tenant_id: &str,
        month: &str,
        job_id: &str,
        closed: bool,
        reference: Option<&str>,
    ) -> Result<()> {
        if closed {
            let now = Millis(now_ms());
            on_tx!(tx,
                conn => postgres::periods::close(conn, tenant_id, month, job_id, now, reference)
                    .await?,
                conn => sqlite::periods::close(conn, tenant_id, month, job_id, now, reference)
                    .await?,
            );
            let change = AuditChange {
                tenant_id: Some(tenant_id),
                action: AuditAction::PeriodClosed,
                target: Some(month),
                details: serde_json::json!({ "filing_reference": reference }),
            };
            let actor = Actor::Job {
                job_id: job_id.to_owned(),
            };
            self.audit(tx, &actor, &change).await?;
        } else {
            on_tx!(tx,
                conn => postgres::periods::lock_again(conn, tenant_id, month, job_id).await?,
                conn => sqlite::periods::lock_again(conn, tenant_id, month, job_id).await?,
            );
        }
        Ok(())
    }

    /// The month's state; `None` when it is open.
    pub async fn get_period(&self, tenant_id: &str, month: &str) -> Result<Option<Period>> {
        let row = on_pool!(self,
            pool => postgres::periods::get(pool, tenant_id, month).await?,
            pool => sqlite::periods::get(pool, tenant_id, month).await?,
        );
        Ok(row.map(Period::from))
    }

    /// Reopens a closed month, in the caller's transaction.
    pub async fn reopen_period(
        &self,
        tx: &mut WriteTx,
        tenant_id: &str,
        month: &str,
        actor: &Actor,
    ) -> Result<ReopenOutcome> {
        month_lock(tx, tenant_id, month, true).await?;
        match period_in(tx, tenant_id, month).await? {
            Some(period) if period.state == "locked" => Ok(ReopenOutcome::Locked(period)),
            Some(period) => {
                on_tx!(tx,
                    conn => postgres::periods::delete(conn, tenant_id, month).await?,
                    conn => sqlite::periods::delete(conn, tenant_id, month).await?,
                );
                let change = AuditChange {
                    tenant_id: Some(tenant_id),
                    action: AuditAction::PeriodReopened,
                    target: Some(month),
                    details: serde_json::json!({ "closed_by_job": period.job_id }),
                };
                self.audit(tx, actor, &change).await?;
                Ok(ReopenOutcome::Open)
            }
            None => Ok(ReopenOutcome::Open),
        }
    }

    /// Of `months` (each `YYYY-MM`), those locked or closed, in the
    /// caller's transaction: an import into any of them is refused. Holds
    /// each month's shared lock until the transaction ends.
    pub async fn periods_refusing_imports(
        &self,
        tx: &mut WriteTx,
        tenant_id: &str,
        months: &[String],
    ) -> Result<Vec<Period>> {
        if months.is_empty() {
            return Ok(Vec::new());
        }
        // The same order in every import, so that imports and the
        // period-closes queued behind them never wait on each other in a
        // cycle.
        let mut sorted = months.to_vec();
        sorted.sort();
        sorted.dedup();
        for month in &sorted {
            month_lock(tx, tenant_id, month, false).await?;
        }
        let rows = on_tx!(tx,
            conn => postgres::periods::of_months(conn, tenant_id, &sorted).await?,
            conn => sqlite::periods::of_months(conn, tenant_id, &sorted).await?,
        );
        Ok(rows.into_iter().map(Period::from).collect())
    }

    /// Registers (or moves) the tenant's filing endpoint; its secret is
    /// made once and kept when the URL changes.
    pub async fn put_filing_endpoint(
        &self,
        tenant_id: &str,
        url: &str,
        actor: &Actor,
    ) -> Result<FilingEndpoint> {
        let mut tx = self.begin_write().await?;
        let now = Millis(now_ms());
        let context = filing_context(tenant_id);
        let secret = self
            .seal_in(&mut tx, &context, &shared::ids::new_webhook_secret())
            .await?;
        let row = on_tx!(tx,
            conn => postgres::periods::put_endpoint(conn, tenant_id, url, &secret, now).await?,
            conn => sqlite::periods::put_endpoint(conn, tenant_id, url, &secret, now).await?,
        );
        let change = AuditChange {
            tenant_id: Some(tenant_id),
            action: AuditAction::FilingEndpointSet,
            target: None,
            details: serde_json::json!({ "url": url }),
        };
        self.audit(&mut tx, actor, &change).await?;
        tx.commit().await?;
        self.endpoint_of(tenant_id, row).await
    }

    /// The tenant's filing endpoint, its secret opened.
    pub async fn get_filing_endpoint(&self, tenant_id: &str) -> Result<Option<FilingEndpoint>> {
        let row = on_pool!(self,
            pool => postgres::periods::get_endpoint(pool, tenant_id).await?,
            pool => sqlite::periods::get_endpoint(pool, tenant_id).await?,
        );
        match row {
            Some(row) => Ok(Some(self.endpoint_of(tenant_id, row).await?)),
            None => Ok(None),
        }
    }

    async fn endpoint_of(&self, tenant_id: &str, row: EndpointRow) -> Result<FilingEndpoint> {
        let secret = self
            .open_secret(&filing_context(tenant_id), &row.stored_secret())
            .await?;
        Ok(FilingEndpoint::of_row(row, secret))
    }
}
