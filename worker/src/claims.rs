//! apalis's backend over the job rows: where the job row is the queue
//! (Postgres without Redis), a worker's tasks are the attempts its claims
//! of due jobs win (`Store::claim_due`). The backend counts the pool's
//! slots: it claims only as many jobs as it has free slots, so nothing it
//! holds waits for one, and a claim is an attempt already RUNNING under
//! its lease, the only liveness there is. apalis's `Monitor` and worker
//! run it like any backend; nothing is acknowledged afterwards, the
//! attempt's outcome being the end of it.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use futures::StreamExt;
use queue::{JobRowQueue, WorkWaiter};
use shared::{
    settings::Caps,
    time::{duration_ms, now_ms},
};
use store::Claim;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::warn;

use crate::{backend::QueueBackend, runner::Runner};

/// How long a worker waits after a claim that failed before it claims again.
const CLAIM_FAILED_PAUSE: Duration = Duration::from_millis(500);

/// An attempt a claim won, and the slot it holds until it is freed or
/// dropped.
pub struct ClaimedJob {
    pub claim: Claim,
    /// When the claim answered: the attempt's wait in this process starts.
    pub arrived: SystemTime,
    slot: Arc<Mutex<Option<OwnedSemaphorePermit>>>,
}

impl ClaimedJob {
    /// A handle that frees the slot: its handler goes on (writing an
    /// outcome) without holding it.
    pub fn slot(&self) -> SlotHandle {
        SlotHandle(self.slot.clone())
    }
}

/// Frees a [`ClaimedJob`]'s slot, once.
#[derive(Clone)]
pub struct SlotHandle(Arc<Mutex<Option<OwnedSemaphorePermit>>>);

impl SlotHandle {
    pub fn free(&self) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
    }
}

/// What a worker's claims need between two batches.
struct Claimer {
    runner: Arc<Runner>,
    waiter: WorkWaiter,
    queue: JobRowQueue,
    slots: Arc<Semaphore>,
    caps: Caps,
    lease: Duration,
    /// The tenant the last claim served last: the next starts after it.
    after_tenant: String,
    /// A claim failed after it may have committed: before the next, the
    /// attempts this worker holds without knowing are taken up.
    answer_lost: bool,
    /// The last claim took fewer jobs than it asked for (without caps) or
    /// none: no other due job was free then. A slot that frees waits for
    /// a wake before it claims, rather than claim again for nothing;
    /// whatever makes a job due wakes the workers (the NOTIFY of a submit
    /// or of a job queued again or woken at a cap, the timer of a job due
    /// later, see `store::DueJobWaiter`).
    drained: bool,
}

/// apalis's backend over one worker's claims (see the module's doc):
/// the backend of a worker whose slots are `slots`' permits, claiming
/// for `runner`'s worker id. A worker apalis restarts gets a new
/// backend over the same slots, some of which its predecessor's
/// attempts may still hold.
pub fn job_row_backend(
    runner: Arc<Runner>,
    queue: JobRowQueue,
    slots: Arc<Semaphore>,
    caps: Caps,
    lease: Duration,
) -> QueueBackend<ClaimedJob> {
    let claimer = Claimer {
        runner,
        waiter: queue.waiter(),
        queue,
        slots,
        caps,
        lease,
        after_tenant: String::new(),
        answer_lost: false,
        drained: false,
    };
    let claims = futures::stream::unfold(
        (claimer, VecDeque::new()),
        |(mut claimer, mut claimed)| async move {
            loop {
                if let Some(job) = claimed.pop_front() {
                    return Some((job, (claimer, claimed)));
                }
                claimed = claimer.next_batch().await;
            }
        },
    );
    QueueBackend::new(claims.boxed())
}

impl Claimer {
    /// Waits for a free slot, then claims as many due jobs as there are
    /// free slots (at least one), waiting for jobs while none is due.
    async fn next_batch(&mut self) -> VecDeque<ClaimedJob> {
        let Ok(first) = self.slots.clone().acquire_owned().await else {
            return VecDeque::new();
        };
        let mut permits = vec![first];
        while let Ok(more) = self.slots.clone().try_acquire_owned() {
            permits.push(more);
        }
        loop {
            if self.drained && !self.answer_lost {
                self.waiter.wait().await;
                self.drained = false;
                while let Ok(more) = self.slots.clone().try_acquire_owned() {
                    permits.push(more);
                }
            }
            if self.answer_lost {
                match self.held_unknown().await {
                    Ok(adopted) => {
                        self.answer_lost = false;
                        if !adopted.is_empty() {
                            warn!(
                                adopted = adopted.len(),
                                "took up attempts a claim won although its answer was lost"
                            );
                            return self.with_slots(adopted, permits);
                        }
                    }
                    Err(error) => {
                        warn!(%error, "could not look for attempts this worker holds; looking again");
                        tokio::time::sleep(CLAIM_FAILED_PAUSE).await;
                        continue;
                    }
                }
            }
            let lease_until = now_ms() + duration_ms(self.lease);
            let claimed = self
                .queue
                .store()
                .claim_due(
                    &self.runner.worker_id,
                    permits.len(),
                    &self.after_tenant,
                    lease_until,
                    &self.caps,
                )
                .await;
            let claimed = match shared::failpoints::armed("worker::claim_refused") {
                true => Err(store::Error::Config(
                    "failpoint worker::claim_refused: claim refused".into(),
                )),
                // The window a lost answer opens: the claim committed, its
                // attempts are RUNNING under this worker, which never
                // learnt of them.
                false => match claimed {
                    Ok(claims) if !claims.is_empty() => {
                        store::lose_answer("worker::claim_answer_lost", Ok(claims))
                    }
                    claimed => claimed,
                },
            };
            match claimed {
                Ok(claims) if !claims.is_empty() => {
                    // Under caps a claim parks jobs, so a short claim
                    // says nothing of the jobs left.
                    self.drained = claims.len() < permits.len() && self.caps.is_none();
                    if let Some(cursor) = store::claim_cursor(&self.after_tenant, &claims) {
                        self.after_tenant = cursor;
                    }
                    return self.with_slots(claims, permits);
                }
                Ok(_) => self.drained = true,
                Err(error) => {
                    self.answer_lost = true;
                    warn!(%error, "could not claim due jobs; claiming again shortly");
                    tokio::time::sleep(CLAIM_FAILED_PAUSE).await;
                }
            }
        }
    }

    /// The attempts this worker holds that no slot of this process runs.
    async fn held_unknown(&self) -> store::Result<Vec<Claim>> {
        let held = self
            .queue
            .store()
            .attempts_held_by(&self.runner.worker_id)
            .await?;
        Ok(held
            .into_iter()
            .filter(|claim| !self.runner.runs_here(&claim.job_id, claim.attempt))
            .collect())
    }

    /// Pairs each claim with a slot; the slots left over are free again.
    fn with_slots(
        &self,
        claims: Vec<Claim>,
        mut permits: Vec<OwnedSemaphorePermit>,
    ) -> VecDeque<ClaimedJob> {
        let arrived = SystemTime::now();
        claims
            .into_iter()
            .map(|claim| ClaimedJob {
                claim,
                arrived,
                // More claims than slots happen only when attempts are taken
                // up after a lost answer: those run without a slot.
                slot: Arc::new(Mutex::new(permits.pop())),
            })
            .collect()
    }
}
