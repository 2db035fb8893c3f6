//! Per-tenant limits: request rate, active jobs, registered webhooks (per
//! tenant and per job) and
//! concurrent long polls. Each refusal is a 429 problem with `Retry-After`
//! and changes nothing, so the client may retry the same request (and the
//! same idempotency key) later. Another tenant is never affected.
//!
//! The request rate and long polls are counted by each api process; active
//! jobs are counted in the database, read at most once a second per tenant
//! by each process, and counted up between reads, so a burst can pass the
//! limit by at most what the tenant submits in that second. Once a tenant's
//! count is known, it is read again in the background: no submit waits for
//! a `COUNT(*)`, whose cost grows with the dead index entries that a held
//! xmin horizon keeps.

use std::{
    collections::HashMap,
    net::IpAddr,
    num::NonZeroU32,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use governor::{
    DefaultKeyedRateLimiter, Quota, RateLimiter,
    clock::{Clock, DefaultClock},
};
use shared::settings::Settings;
use store::{Registration, Store, WebhookCaps};

use crate::error::{ApiError, ApiResult};

/// Client addresses whose sign-in rate is tracked before those back to a
/// full allowance are forgotten.
const SIGN_IN_ADDRESSES: usize = 10_000;

/// How long a count of a tenant's active jobs is trusted.
const ACTIVE_COUNT_FOR: Duration = Duration::from_secs(1);

pub struct Limits {
    requests: DefaultKeyedRateLimiter<String>,
    /// Dashboard sign-ins by client address, before a tenant is known.
    sign_ins: DefaultKeyedRateLimiter<IpAddr>,
    clock: DefaultClock,
    max_active_jobs: i64,
    active_jobs: Arc<Mutex<HashMap<String, ActiveCount>>>,
    webhook_caps: WebhookCaps,
    max_long_polls: usize,
    long_polls: Arc<Mutex<HashMap<String, usize>>>,
    /// Schedules per tenant (`MAX_SCHEDULES`).
    max_schedules: i64,
}

#[derive(Clone, Copy)]
struct ActiveCount {
    read_at: Instant,
    /// As read, plus the submits this process admitted since.
    count: i64,
    /// The count is being read again: one read at a time per tenant,
    /// rather than one per request, which behind a backlog would hold
    /// every pooled connection while it runs.
    refreshing: bool,
}

/// What a submit goes by.
enum ActiveCountTurn {
    /// A fresh count, or one being read again.
    Known(i64),
    /// A stale count: go by it, and read it again in the background.
    Stale(i64),
    /// None yet: read it now.
    Read,
}

type ActiveCounts = Arc<Mutex<HashMap<String, ActiveCount>>>;

fn lock_counts(counts: &ActiveCounts) -> std::sync::MutexGuard<'_, HashMap<String, ActiveCount>> {
    counts.lock().unwrap_or_else(|e| e.into_inner())
}

/// Reads the tenant's count again and keeps it; a failed read hands the
/// refresh to the next submit.
fn refresh_in_background(store: Store, counts: ActiveCounts, tenant: String) {
    tokio::spawn(async move {
        let read = store.count_active_jobs(&tenant).await;
        let mut counts = lock_counts(&counts);
        match read {
            Ok(count) => {
                counts.insert(
                    tenant,
                    ActiveCount {
                        read_at: Instant::now(),
                        count,
                        refreshing: false,
                    },
                );
            }
            Err(error) => {
                tracing::warn!(%error, tenant, "reading the tenant's active jobs failed");
                if let Some(known) = counts.get_mut(&tenant) {
                    known.refreshing = false;
                }
            }
        }
    });
}

impl Limits {
    pub fn new(settings: &Settings) -> Self {
        let rate = NonZeroU32::new(settings.rate_limit).unwrap_or(NonZeroU32::MIN);
        let burst = rate.saturating_mul(NonZeroU32::new(2).unwrap_or(NonZeroU32::MIN));
        Self {
            requests: RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst)),
            sign_ins: RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst)),
            clock: DefaultClock::default(),
            max_active_jobs: i64::try_from(settings.max_active_jobs).unwrap_or(i64::MAX),
            active_jobs: Arc::default(),
            webhook_caps: WebhookCaps {
                per_tenant: i64::try_from(settings.max_webhooks).unwrap_or(i64::MAX),
                per_job: i64::try_from(settings.max_webhooks_per_job).unwrap_or(i64::MAX),
            },
            max_long_polls: settings.max_long_polls as usize,
            long_polls: Arc::default(),
            max_schedules: i64::try_from(settings.max_schedules).unwrap_or(i64::MAX),
        }
    }

    /// Counts one request of the tenant against `RATE_LIMIT`.
    pub fn request(&self, tenant: &str) -> ApiResult<()> {
        // Keys are tenants: a bounded set, as only a valid key gets here.
        match self.requests.check_key(&tenant.to_owned()) {
            Ok(()) => Ok(()),
            Err(not_until) => {
                let wait = not_until.wait_time_from(self.clock.now());
                Err(ApiError::TooManyRequests {
                    detail: "this tenant is over its request rate (RATE_LIMIT); retry later".into(),
                    retry_after_secs: wait.as_secs_f64().ceil() as u64,
                })
            }
        }
    }

    /// Counts one dashboard sign-in from this client address against
    /// `RATE_LIMIT`, whatever key it sends; the tenant's own count
    /// ([`Limits::request`]) follows once the key is known.
    pub fn sign_in(&self, from: IpAddr) -> ApiResult<()> {
        // Addresses are not a bounded set: forget those whose rate is
        // back to full before the map grows large.
        if self.sign_ins.len() >= SIGN_IN_ADDRESSES {
            self.sign_ins.retain_recent();
            self.sign_ins.shrink_to_fit();
        }
        self.sign_ins.check_key(&from).map_err(|not_until| {
            let wait = not_until.wait_time_from(self.clock.now());
            ApiError::TooManyRequests {
                detail: "too many sign-ins from this address (RATE_LIMIT); retry later".into(),
                retry_after_secs: wait.as_secs_f64().ceil().max(1.0) as u64,
            }
        })
    }

    /// Admits one more job of the tenant, or refuses it while the tenant
    /// has `MAX_ACTIVE_JOBS` queued or running.
    pub async fn admit_job(&self, store: &Store, tenant: &str) -> ApiResult<()> {
        let count = match self.active_count_turn(tenant) {
            ActiveCountTurn::Known(count) => count,
            ActiveCountTurn::Stale(count) => {
                refresh_in_background(store.clone(), self.active_jobs.clone(), tenant.to_owned());
                count
            }
            ActiveCountTurn::Read => {
                let count = store.count_active_jobs(tenant).await?;
                self.lock_active().insert(
                    tenant.to_owned(),
                    ActiveCount {
                        read_at: Instant::now(),
                        count,
                        refreshing: false,
                    },
                );
                count
            }
        };
        if count >= self.max_active_jobs {
            return Err(ApiError::TooManyRequests {
                detail: format!(
                    "this tenant has {count} jobs queued or running, its limit (MAX_ACTIVE_JOBS); nothing was stored: submit again once some have finished"
                ),
                retry_after_secs: ACTIVE_COUNT_FOR.as_secs().max(1),
            });
        }
        if let Some(known) = self.lock_active().get_mut(tenant) {
            known.count += 1;
        }
        Ok(())
    }

    /// The tenant's count while it is fresh or being read again; a stale
    /// one to go by while this request starts its read; or, when none was
    /// ever read, the duty to read it (a tenant's first submits each read).
    fn active_count_turn(&self, tenant: &str) -> ActiveCountTurn {
        let mut counts = self.lock_active();
        match counts.get_mut(tenant) {
            Some(known) if known.refreshing || known.read_at.elapsed() < ACTIVE_COUNT_FOR => {
                ActiveCountTurn::Known(known.count)
            }
            Some(known) => {
                known.refreshing = true;
                ActiveCountTurn::Stale(known.count)
            }
            None => ActiveCountTurn::Read,
        }
    }

    fn lock_active(&self) -> std::sync::MutexGuard<'_, HashMap<String, ActiveCount>> {
        lock_counts(&self.active_jobs)
    }

    /// The webhook caps a registration goes by, checked in its transaction
    /// ([`Store::register_webhook`]) so that registrations at once cannot
    /// pass them.
    pub fn webhook_caps(&self) -> WebhookCaps {
        self.webhook_caps
    }

    /// Refuses one more schedule of a tenant that has `count`, its cap
    /// (`MAX_SCHEDULES`).
    pub fn admit_schedule(&self, count: i64) -> ApiResult<()> {
        if count < self.max_schedules {
            return Ok(());
        }
        Err(ApiError::TooManyRequests {
            detail: format!(
                "this tenant has {count} schedules, its limit (MAX_SCHEDULES); delete one first"
            ),
            retry_after_secs: 60,
        })
    }

    /// The refusal of a registration over a cap, if it was.
    pub fn refuse_webhook(registration: &Registration) -> Option<ApiError> {
        let detail = match registration {
            Registration::TenantFull(count) => format!(
                "this tenant has {count} webhooks, its limit (MAX_WEBHOOKS); delete one first"
            ),
            Registration::JobFull(count) => format!(
                "this job has {count} webhooks, its limit (MAX_WEBHOOKS_PER_JOB); delete one first"
            ),
            Registration::Registered(_) | Registration::NoJob => return None,
        };
        Some(ApiError::TooManyRequests {
            detail,
            retry_after_secs: 60,
        })
    }

    /// A place for one more long poll of the tenant, held until dropped.
    pub fn long_poll(&self, tenant: &str) -> ApiResult<LongPoll> {
        let mut open = self.long_polls.lock().unwrap_or_else(|e| e.into_inner());
        let count = open.entry(tenant.to_owned()).or_default();
        if *count >= self.max_long_polls {
            return Err(ApiError::TooManyRequests {
                detail: format!(
                    "this tenant already holds {count} long polls open, its limit (MAX_LONG_POLLS); poll without wait, or retry later"
                ),
                retry_after_secs: 1,
            });
        }
        *count += 1;
        Ok(LongPoll {
            tenant: tenant.to_owned(),
            open: self.long_polls.clone(),
        })
    }
}

/// One open long poll, counted until dropped.
pub struct LongPoll {
    tenant: String,
    open: Arc<Mutex<HashMap<String, usize>>>,
}

impl Drop for LongPoll {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = open.get_mut(&self.tenant) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.tenant);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            settings: Settings,
        }
        let cli = <Cli as clap::Parser>::try_parse_from(["api"]).expect("default settings");
        Limits::new(&cli.settings)
    }

    /// A count of `count` read `age` ago.
    fn known(limits: &Limits, tenant: &str, count: i64, age: Duration) {
        let read_at = Instant::now().checked_sub(age).expect("an earlier instant");
        limits.lock_active().insert(
            tenant.to_owned(),
            ActiveCount {
                read_at,
                count,
                refreshing: false,
            },
        );
    }

    fn reads(turn: ActiveCountTurn) -> bool {
        matches!(turn, ActiveCountTurn::Read)
    }

    #[test]
    fn a_stale_count_is_used_while_one_request_has_it_read_again() {
        let limits = limits();
        known(&limits, "acme", 7, ACTIVE_COUNT_FOR * 2);
        assert!(matches!(
            limits.active_count_turn("acme"),
            ActiveCountTurn::Stale(7)
        ));
        for _ in 0..50 {
            assert!(matches!(
                limits.active_count_turn("acme"),
                ActiveCountTurn::Known(7)
            ));
        }
        // Another tenant's count is its own, and none was read yet.
        assert!(reads(limits.active_count_turn("globex")));
    }

    #[test]
    fn a_fresh_count_is_used_without_reading() {
        let limits = limits();
        known(&limits, "acme", 3, Duration::ZERO);
        assert!(matches!(
            limits.active_count_turn("acme"),
            ActiveCountTurn::Known(3)
        ));
    }

    /// A store whose database is gone: every read fails.
    async fn closed_store() -> (Store, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}/jobs.db", dir.path().display());
        let store = Store::connect(&url).await.expect("a SQLite store");
        store.close().await;
        (store, dir)
    }

    #[tokio::test]
    async fn a_background_read_keeps_its_count_or_hands_the_read_to_the_next_submit() {
        let limits = limits();
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}/jobs.db", dir.path().display());
        let store = Store::connect(&url).await.expect("a SQLite store");
        store.migrate().await.expect("migrations");
        known(&limits, "acme", 7, ACTIVE_COUNT_FOR * 2);
        limits.admit_job(&store, "acme").await.expect("admitted");
        // The read counts the store's jobs: none.
        testkit::wait::until_true(
            "the count read again",
            Duration::from_secs(10),
            async || matches!(limits.active_count_turn("acme"), ActiveCountTurn::Known(0)),
        )
        .await;

        let (closed, _dir) = closed_store().await;
        known(&limits, "acme", 7, ACTIVE_COUNT_FOR * 2);
        limits
            .admit_job(&closed, "acme")
            .await
            .expect("admitted by the stale count");
        testkit::wait::until_true("the read handed on", Duration::from_secs(10), async || {
            !limits
                .lock_active()
                .get("acme")
                .is_some_and(|c| c.refreshing)
        })
        .await;
        assert!(matches!(
            limits.active_count_turn("acme"),
            ActiveCountTurn::Stale(8)
        ));
    }
}
