//! Months a `period-close` locked or closed, and where each tenant files
//! its returns.

use sqlx::{Row, any::AnyRow};

use super::{Dialect, Store, WriteTx, built, placeholders};
use crate::Result;
use shared::time::now_ms;

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

fn period_from_row(row: &AnyRow) -> Result<Period> {
    Ok(Period {
        month: row.try_get("month")?,
        state: row.try_get("state")?,
        job_id: row.try_get("job_id")?,
        locked_at: row.try_get("locked_at")?,
        closed_at: row.try_get("closed_at")?,
        filing_reference: row.try_get("filing_reference")?,
    })
}

const PERIOD_COLUMNS: &str = "month, state, job_id, locked_at, closed_at, filing_reference";

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

fn endpoint_from_row(row: &AnyRow) -> Result<FilingEndpoint> {
    Ok(FilingEndpoint {
        url: row.try_get("url")?,
        secret: row.try_get("secret")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

/// The month's row as the caller's transaction sees it.
async fn period_in(tx: &mut WriteTx, tenant_id: &str, month: &str) -> Result<Option<Period>> {
    let row = sqlx::query(built(&format!(
        "SELECT {PERIOD_COLUMNS} FROM periods WHERE tenant_id = $1 AND month = $2"
    )))
    .bind(tenant_id)
    .bind(month)
    .fetch_optional(&mut **tx)
    .await?;
    row.as_ref().map(period_from_row).transpose()
}

impl Store {
    /// Postgres: a lock on one tenant's month until the transaction ends,
    /// shared by imports, exclusive for the period-close that locks it. It
    /// is what makes "imports into a locked month are refused" exact: the
    /// lock waits for imports of the month already under way, and an
    /// import that comes after sees the lock. SQLite has one writer at a
    /// time, which already orders them.
    async fn month_lock(
        &self,
        tx: &mut WriteTx,
        tenant_id: &str,
        month: &str,
        exclusive: bool,
    ) -> Result<()> {
        if self.dialect != Dialect::Postgres {
            return Ok(());
        }
        let sql = if exclusive {
            "SELECT 1 AS locked FROM (SELECT pg_advisory_xact_lock(hashtextextended($1, 0))) AS l"
        } else {
            "SELECT 1 AS locked FROM (SELECT pg_advisory_xact_lock_shared(hashtextextended($1, 0))) AS l"
        };
        sqlx::query(sql)
            .bind(format!("period:{tenant_id}:{month}"))
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Locks `month` for `job_id`, in the caller's transaction.
    pub async fn lock_period(
        &self,
        tx: &mut WriteTx,
        tenant_id: &str,
        month: &str,
        job_id: &str,
    ) -> Result<LockOutcome> {
        self.month_lock(tx, tenant_id, month, true).await?;
        if let Some(period) = period_in(tx, tenant_id, month).await? {
            return Ok(if period.job_id == job_id {
                LockOutcome::Locked
            } else {
                LockOutcome::Held(period)
            });
        }
        sqlx::query(
            "INSERT INTO periods (tenant_id, month, state, job_id, locked_at)
             VALUES ($1, $2, 'locked', $3, $4)",
        )
        .bind(tenant_id)
        .bind(month)
        .bind(job_id)
        .bind(now_ms())
        .execute(&mut **tx)
        .await?;
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
        sqlx::query(
            "DELETE FROM periods
             WHERE tenant_id = $1 AND month = $2 AND job_id = $3 AND state = 'locked'",
        )
        .bind(tenant_id)
        .bind(month)
        .bind(job_id)
        .execute(&mut **tx)
        .await?;
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
        let (state, closed_at) = if closed {
            ("closed", Some(now_ms()))
        } else {
            ("locked", None)
        };
        sqlx::query(
            "UPDATE periods SET state = $4, closed_at = $5, filing_reference = $6
             WHERE tenant_id = $1 AND month = $2 AND job_id = $3",
        )
        .bind(tenant_id)
        .bind(month)
        .bind(job_id)
        .bind(state)
        .bind(closed_at)
        .bind(reference.filter(|_| closed))
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// The month's state; `None` when it is open.
    pub async fn get_period(&self, tenant_id: &str, month: &str) -> Result<Option<Period>> {
        let row = sqlx::query(built(&format!(
            "SELECT {PERIOD_COLUMNS} FROM periods WHERE tenant_id = $1 AND month = $2"
        )))
        .bind(tenant_id)
        .bind(month)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(period_from_row).transpose()
    }

    /// Reopens a closed month, in the caller's transaction.
    pub async fn reopen_period(
        &self,
        tx: &mut WriteTx,
        tenant_id: &str,
        month: &str,
    ) -> Result<ReopenOutcome> {
        self.month_lock(tx, tenant_id, month, true).await?;
        match period_in(tx, tenant_id, month).await? {
            Some(period) if period.state == "locked" => Ok(ReopenOutcome::Locked(period)),
            Some(_) => {
                sqlx::query("DELETE FROM periods WHERE tenant_id = $1 AND month = $2")
                    .bind(tenant_id)
                    .bind(month)
                    .execute(&mut **tx)
                    .await?;
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
        let mut sorted = months.to_vec();
        sorted.sort();
        sorted.dedup();
        for month in &sorted {
            self.month_lock(tx, tenant_id, month, false).await?;
        }
        let sql = format!(
            "SELECT {PERIOD_COLUMNS} FROM periods WHERE tenant_id = $1 AND month IN ({})
             ORDER BY month",
            placeholders(2, sorted.len())
        );
        let mut query = sqlx::query(built(&sql)).bind(tenant_id);
        for month in &sorted {
            query = query.bind(month);
        }
        query
            .fetch_all(&mut **tx)
            .await?
            .iter()
            .map(period_from_row)
            .collect()
    }

    /// Registers (or moves) the tenant's filing endpoint; its secret is
    /// made once and kept when the URL changes.
    pub async fn put_filing_endpoint(&self, tenant_id: &str, url: &str) -> Result<FilingEndpoint> {
        let _turn = self.write_turn().await;
        let now = now_ms();
        let row = sqlx::query(
            "INSERT INTO filing_endpoints (tenant_id, url, secret, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $4)
             ON CONFLICT (tenant_id) DO UPDATE SET url = excluded.url,
                 updated_at = excluded.updated_at
             RETURNING url, secret, created_at, updated_at",
        )
        .bind(tenant_id)
        .bind(url)
        .bind(shared::ids::new_webhook_secret())
        .bind(now)
        .fetch_one(&self.pool)
        .await?;
        endpoint_from_row(&row)
    }

    pub async fn get_filing_endpoint(&self, tenant_id: &str) -> Result<Option<FilingEndpoint>> {
        let row = sqlx::query(
            "SELECT url, secret, created_at, updated_at FROM filing_endpoints WHERE tenant_id = $1",
        )
        .bind(tenant_id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(endpoint_from_row).transpose()
    }
}
