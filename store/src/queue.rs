//! The job row as the queue: the shapes without Redis claim due jobs
//! straight from `jobs`, fairly between tenants (the tenants with a due
//! job in turn, starting after the tenant a worker served last), and
//! each tenant's in rank order. A claimed job is RUNNING under its lease,
//! which is the only liveness there is: a worker that dies leaves leases
//! that lapse, and the sweeper queues their jobs again.

use std::time::Duration;

use shared::{settings::Caps, time::now_ms};
use sqlx::postgres::PgListener;
use tokio::sync::Notify;

use crate::{
    Claim, Result, Store, on_pool, on_postgres, on_tx, postgres, rows::attempts::DueClaim,
    sql::Millis, sqlite,
};

/// The NOTIFY channel on which jobs made due are announced to the workers
/// that claim from the job rows. The payload is the earliest due time
/// (unix ms) of the jobs announced, `0` for at once (see [`DueJobWaiter`]).
pub const QUEUE_CHANNEL: &str = "receipt_queue";

/// The NOTIFY channel on which a submit announces the external jobs it
/// made, with [`QUEUE_CHANNEL`]'s payload, to the leases waiting in every
/// api process: the built-in workers, which have nothing to claim in them,
/// are not woken. External jobs made due again (a retry, a lapsed lease, a
/// wake from a cap) are announced on [`QUEUE_CHANNEL`], which the leases
/// wait on too.
pub const WORK_CHANNEL: &str = "receipt_work";

/// Where a worker's next claim starts its walk of the tenants: after the
/// last tenant of `claims`, in the order the claim served them (those
/// after `after_tenant` first, then those from the first tenant on).
pub fn claim_cursor(after_tenant: &str, claims: &[Claim]) -> Option<String> {
    let after = claims
        .iter()
        .map(|claim| claim.tenant_id.as_str())
        .filter(|tenant| *tenant > after_tenant)
        .max();
    after
        .or_else(|| claims.iter().map(|claim| claim.tenant_id.as_str()).max())
        .map(str::to_owned)
}

impl Store {
    /// Claims up to `most` due jobs for `worker_id`, leased until
    /// `lease_until`: the tenants with a due job in turn, from the first
    /// after `after_tenant` (wrapping around), each tenant's first by rank,
    /// as evenly as `most` allows. Under `caps` a job whose tenant (or
    /// tenant and kind) runs its cap is parked, as [`Store::claim_attempts`]
    /// parks it. Jobs another worker is claiming are skipped, not waited
    /// for. The answer is in the order the jobs were taken: one per tenant
    /// in turn, then a second per tenant, and so on.
    pub async fn claim_due(
        &self,
        worker_id: &str,
        most: usize,
        after_tenant: &str,
        lease_until: i64,
        caps: &Caps,
    ) -> Result<Vec<Claim>> {
        if most == 0 {
            return Ok(Vec::new());
        }
        let (now, rank_before) = self.due_bounds();
        let claim = DueClaim {
            worker_id,
            most: i64::try_from(most).unwrap_or(i64::MAX),
            after_tenant,
            now,
            rank_before,
            lease_until: Millis(lease_until),
            caps,
        };
        let rows = match &self.db {
            crate::Db::Postgres(pool) => on_postgres!(self, pool, pool =>
                postgres::attempts::claim_due(pool, &claim).await?
            ),
            crate::Db::Sqlite(_) => {
                let mut tx = self.begin_write().await?;
                let (chosen, rows) = on_tx!(tx,
                    _conn => unreachable!("a SQLite store writes on SQLite"),
                    conn => {
                        let chosen = sqlite::attempts::due_job_ids(&mut *conn, &claim).await?;
                        let rows = sqlite::attempts::claim(
                            conn, &chosen, claim.now, claim.lease_until, worker_id, caps, false,
                        )
                        .await?;
                        (chosen, rows)
                    },
                );
                tx.commit().await?;
                let mut claims: Vec<Claim> = rows.into_iter().map(Claim::from).collect();
                claims.sort_by_key(|claim| chosen.iter().position(|id| *id == claim.job_id));
                return Ok(claims);
            }
        };
        Ok(rows.into_iter().map(Claim::from).collect())
    }

    /// Wakes the workers that claim from the job rows: on Postgres, a
    /// NOTIFY on [`QUEUE_CHANNEL`] of jobs due at once; nothing on SQLite,
    /// whose workers in this process are woken by the caller, and whose
    /// workers in other processes look again on their own.
    pub async fn wake_claimers(&self) -> Result<()> {
        if let crate::Db::Postgres(pool) = &self.db {
            on_postgres!(self, pool, pool =>
                postgres::attempts::notify(pool, QUEUE_CHANNEL, "0").await?
            );
        }
        Ok(())
    }
}

/// How long an idle worker on Postgres waits for a NOTIFY or its timer
/// before it claims again on its own: a notification missed while
/// reconnecting costs no more.
pub const IDLE_LOOK: Duration = Duration::from_secs(1);

/// How often a waiting lease of external workers on SQLite looks for due
/// jobs on its own (see [`Store::lease_look`]).
const LEASE_LOOK_SQLITE: Duration = Duration::from_millis(250);

/// How often an idle worker on SQLite looks for due jobs made by another
/// process (a look reads; only a claim that will find jobs writes).
pub const SQLITE_LOOK: Duration = Duration::from_millis(20);

/// An idle worker's wait for jobs to become due. On Postgres: a NOTIFY on
/// [`QUEUE_CHANNEL`] (on a session of its own), whose payload is the due
/// time (unix ms) of the earliest job the notifying statement made due,
/// `0` for at once; and a timer on the next due time of a job that was not
/// due when made, read once and then moved by each payload that says a job
/// comes due earlier. On SQLite: a short look. On both: a wake from its
/// own process, or [`IDLE_LOOK`].
pub struct DueJobWaiter {
    store: Store,
    /// The session the NOTIFY arrives on (Postgres), made when first
    /// waited on.
    listener: Option<PgListener>,
    next_due: NextDue,
    /// [`IDLE_LOOK`], but in tests of the wake itself.
    pub(crate) idle_look: Duration,
    /// The channels listened on.
    channels: &'static [&'static str],
}

/// What an idle worker on Postgres knows of the next job to come due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NextDue {
    /// Not known: read before the next wait (at first, after the timer
    /// fired, and after the session was lost, which may have missed a
    /// notification).
    Unknown,
    /// No job is due later.
    Never,
    /// Unix ms.
    At(i64),
}

impl NextDue {
    /// The earlier of the two.
    fn and(self, at: i64) -> NextDue {
        match self {
            NextDue::At(known) if known <= at => self,
            _ => NextDue::At(at),
        }
    }
}

impl Store {
    /// The wait of an idle worker (see [`DueJobWaiter`]).
    pub fn due_job_waiter(&self) -> DueJobWaiter {
        self.waiter_on(&[QUEUE_CHANNEL])
    }

    /// The wait of the leases of external workers (see
    /// [`Store::forward_due_wakes`]): as an idle worker's, on both
    /// channels.
    pub fn lease_waiter(&self) -> DueJobWaiter {
        self.waiter_on(&[QUEUE_CHANNEL, WORK_CHANNEL])
    }

    fn waiter_on(&self, channels: &'static [&'static str]) -> DueJobWaiter {
        DueJobWaiter {
            store: self.clone(),
            listener: None,
            next_due: NextDue::Unknown,
            idle_look: IDLE_LOOK,
            channels,
        }
    }
}

impl DueJobWaiter {
    /// Waits until jobs may be due: a NOTIFY of jobs due now, the timer of
    /// the next due job, `woken`, a look that finds a due job, or
    /// [`IDLE_LOOK`].
    pub async fn wait(&mut self, woken: &Notify) {
        let woken = woken.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let idle_until = tokio::time::Instant::now() + self.idle_look;
        if let crate::Db::Sqlite(_) = &self.store.db {
            loop {
                tokio::select! {
                    () = &mut woken => return,
                    () = tokio::time::sleep(SQLITE_LOOK) => {}
                }
                if tokio::time::Instant::now() >= idle_until
                    || self.store.any_due_job().await.unwrap_or(true)
                {
                    return;
                }
            }
        }
        if self.listener.is_none() {
            match self.listen().await {
                Ok(new) => self.listener = Some(new),
                Err(error) => {
                    tracing::warn!(%error, "cannot listen for due jobs; looking again shortly");
                    let _ = tokio::time::timeout_at(idle_until, woken).await;
                    return;
                }
            }
            self.next_due = NextDue::Unknown;
        }
        if self.next_due == NextDue::Unknown {
            self.next_due = match self.store.next_due_later().await {
                Ok(Some(at)) => NextDue::At(at),
                Ok(None) => NextDue::Never,
                // The database is busy or down: claim again after the look.
                Err(_) => NextDue::Unknown,
            };
        }
        let Some(session) = self.listener.as_mut() else {
            return;
        };
        loop {
            let (deadline, timer) = match self.next_due {
                NextDue::At(at) => {
                    let due = tokio::time::Instant::now()
                        + Duration::from_millis(
                            u64::try_from(at.saturating_sub(now_ms())).unwrap_or(0),
                        );
                    (due.min(idle_until), due <= idle_until)
                }
                _ => (idle_until, false),
            };
            tokio::select! {
                () = &mut woken => return,
                received = tokio::time::timeout_at(deadline, session.try_recv()) => match received {
                    Err(_) => {
                        if timer {
                            self.next_due = NextDue::Unknown;
                        }
                        return;
                    }
                    Ok(Ok(Some(notification))) => {
                        match notification.payload().parse::<i64>() {
                            Ok(at) if at > now_ms() => self.next_due = self.next_due.and(at),
                            _ => return,
                        }
                    }
                    // The session was lost (and may have missed a NOTIFY): look now.
                    Ok(Ok(None)) => {
                        self.next_due = NextDue::Unknown;
                        return;
                    }
                    Ok(Err(error)) => {
                        tracing::warn!(%error, "listening for due jobs failed; reconnecting");
                        self.listener = None;
                        return;
                    }
                },
            }
        }
    }

    async fn listen(&self) -> Result<PgListener> {
        let mut listener = PgListener::connect(self.store.session_url()).await?;
        listener.listen_all(self.channels.iter().copied()).await?;
        Ok(listener)
    }
}

impl Store {
    /// How often a lease of external workers that waits looks for due
    /// jobs on its own: on Postgres, the NOTIFY that
    /// [`Store::forward_due_wakes`] forwards wakes it sooner; on SQLite,
    /// another process's jobs are found only by looking.
    pub fn lease_look(&self) -> Duration {
        match &self.db {
            crate::Db::Postgres(_) => IDLE_LOOK,
            crate::Db::Sqlite(_) => LEASE_LOOK_SQLITE,
        }
    }

    /// Wakes every waiter of `woken` whenever jobs may have become due
    /// through another process (on Postgres: a NOTIFY on [`QUEUE_CHANNEL`]
    /// or [`WORK_CHANNEL`], or the timer of a job due later), until `stop`
    /// completes. On SQLite nothing from other processes reaches this one:
    /// it returns at once.
    pub async fn forward_due_wakes(
        &self,
        woken: std::sync::Arc<Notify>,
        stop: impl std::future::Future<Output = ()>,
    ) {
        if let crate::Db::Sqlite(_) = &self.db {
            return;
        }
        let mut waiter = self.lease_waiter();
        let never = Notify::new();
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = waiter.wait(&never) => woken.notify_waiters(),
                () = &mut stop => return,
            }
        }
    }

    /// Now, and the latest rank a job due now can have: a due job ranks
    /// at most two steps of aging after its due time.
    pub(crate) fn due_bounds(&self) -> (Millis, Millis) {
        let now = now_ms();
        let aging = i64::try_from(self.priority_aging.as_millis()).unwrap_or(i64::MAX / 4);
        (
            Millis(now),
            Millis(now.saturating_add(aging.saturating_mul(2))),
        )
    }

    /// The earliest due time (unix ms) after now of a claimable job that
    /// was not due when made (Postgres; see [`DueJobWaiter`]).
    async fn next_due_later(&self) -> Result<Option<i64>> {
        let now = Millis(now_ms());
        Ok(match &self.db {
            crate::Db::Postgres(pool) => on_postgres!(self, pool, pool =>
                postgres::attempts::next_due_later(pool, now).await?
            )
            .map(|at| at.0),
            crate::Db::Sqlite(_) => None,
        })
    }

    /// Whether any job is claimable and due: a read, which on SQLite
    /// waits for no writer.
    async fn any_due_job(&self) -> Result<bool> {
        let (now, rank_before) = self.due_bounds();
        Ok(on_pool!(self,
            pool => postgres::attempts::any_due(pool, now, rank_before).await?,
            pool => sqlite::attempts::any_due(pool, now, rank_before).await?,
        ))
    }
}
