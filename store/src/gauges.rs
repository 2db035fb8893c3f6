//! What an operator's gauges read from the database: jobs queued and
//! running, the oldest job waiting past its due time, and the outbox's
//! unpublished backlog. Each read costs the same whatever the backlog:
//! counts come from the counters the triggers on `jobs` keep (migration
//! `job_counts`), ages from the first entry of an index, and the outbox's
//! count stops at [`OUTBOX_COUNT_LIMIT`].

use shared::time::now_ms;

use crate::{Result, Store, on_pool, postgres, sql::Millis, sqlite};

/// The outbox backlog is counted up to this many rows: past it the
/// number only says "far behind", and counting on would cost a scan.
pub const OUTBOX_COUNT_LIMIT: i64 = 100_000;

/// One sample of the queue and the outbox.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueSample {
    /// Per kind that has or had jobs: QUEUED (delayed and parked ones
    /// included) and RUNNING jobs.
    pub by_kind: Vec<KindSample>,
    /// The tenants with the most QUEUED jobs, most first.
    pub busiest_tenants: Vec<TenantSample>,
    /// Outbox rows due and not yet published, up to [`OUTBOX_COUNT_LIMIT`].
    pub outbox_backlog: i64,
    /// Seconds the oldest of them has waited to be published (since it was
    /// written, or a delayed job's since its time); 0 when there is none.
    pub outbox_oldest_seconds: f64,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct KindSample {
    pub kind: String,
    pub queued: i64,
    pub running: i64,
    /// Seconds the QUEUED job of this kind due the longest has been due
    /// (a delayed job counts from its time, a retry from its backoff's
    /// end); 0 when none is due.
    pub oldest_queued_seconds: f64,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct TenantSample {
    pub tenant_id: String,
    pub queued: i64,
    pub running: i64,
}

/// Seconds from `since` to `now`, never below 0.
fn seconds_since(since: Option<Millis>, now: i64) -> f64 {
    since.map_or(0.0, |since| (now - since.0).max(0) as f64 / 1000.0)
}

impl Store {
    /// Samples the queue and the outbox: counts by kind (`kinds` and any
    /// other kind with jobs), the oldest due job of each of `kinds`, and
    /// the `tenants` tenants with the most queued jobs (none for 0).
    pub async fn sample_queue(&self, kinds: &[&str], tenants: i64) -> Result<QueueSample> {
        let now = now_ms();
        let at = Millis(now);
        let counts = on_pool!(self,
            pool => postgres::gauges::counts_by_kind(pool).await?,
            pool => sqlite::gauges::counts_by_kind(pool).await?,
        );
        let mut by_kind: Vec<KindSample> = counts
            .into_iter()
            .map(|row| KindSample {
                kind: row.kind,
                queued: row.queued,
                running: row.running,
                oldest_queued_seconds: 0.0,
            })
            .collect();
        for kind in kinds {
            let oldest = on_pool!(self,
                pool => postgres::gauges::oldest_due_queued(pool, kind, at).await?,
                pool => sqlite::gauges::oldest_due_queued(pool, kind, at).await?,
            );
            let seconds = seconds_since(oldest, now);
            match by_kind.iter_mut().find(|sample| sample.kind == *kind) {
                Some(sample) => sample.oldest_queued_seconds = seconds,
                None => by_kind.push(KindSample {
                    kind: (*kind).to_owned(),
                    oldest_queued_seconds: seconds,
                    ..KindSample::default()
                }),
            }
        }
        let busiest_tenants = if tenants > 0 {
            on_pool!(self,
                pool => postgres::gauges::busiest_tenants(pool, tenants).await?,
                pool => sqlite::gauges::busiest_tenants(pool, tenants).await?,
            )
            .into_iter()
            .map(|row| TenantSample {
                tenant_id: row.tenant_id,
                queued: row.queued,
                running: row.running,
            })
            .collect()
        } else {
            Vec::new()
        };
        let outbox_backlog = on_pool!(self,
            pool => postgres::gauges::outbox_backlog(pool, at, OUTBOX_COUNT_LIMIT).await?,
            pool => sqlite::gauges::outbox_backlog(pool, at, OUTBOX_COUNT_LIMIT).await?,
        );
        let outbox_oldest = on_pool!(self,
            pool => postgres::gauges::outbox_oldest(pool, at).await?,
            pool => sqlite::gauges::outbox_oldest(pool, at).await?,
        );
        Ok(QueueSample {
            by_kind,
            busiest_tenants,
            outbox_backlog,
            outbox_oldest_seconds: seconds_since(outbox_oldest, now),
        })
    }
}
