//! The outbox relay: publishes due outbox rows to the queue in batches,
//! and finds published jobs whose message the queue lost. Several relays
//! may run at once (every `api` and `worker` process runs one); a row is
//! leased before it is published, so they rarely overlap, and when they do
//! the claim guard makes the duplicate message harmless.

use std::time::Duration;

use shared::{
    notify::Signals,
    time::{duration_ms, now_ms},
};
use store::{QueuedJob, Store, SweepCursor};
use tokio_util::sync::CancellationToken as Shutdown;
use tracing::warn;

use crate::Queue;

const BATCH: usize = 200;
/// How often the relay looks without being woken (rows written by another
/// process, retries whose backoff has passed).
const IDLE_POLL: Duration = Duration::from_millis(100);
/// How long the relay waits after the queue refused a publish.
const PUBLISH_FAILED_PAUSE: Duration = Duration::from_secs(1);

/// How often the relay asks whether the queue lost its messages, returns
/// those of dead Redis consumers, and checks a page of published jobs.
const LOSS_CHECK: Duration = Duration::from_secs(1);
/// How long after its publish a job must be held by the queue: a push
/// that follows its commit has had this long to arrive.
pub const LOST_AFTER: Duration = Duration::from_secs(3);
/// Published, unclaimed jobs checked against the queue per look: a lost
/// message is found within `LOST_AFTER` plus one look per this many jobs
/// the queue holds.
const LOSS_CHECK_PAGE: i64 = 1_000;

pub async fn run_relay(
    store: Store,
    queue: Queue,
    signals: Signals,
    republish_after: Duration,
    shutdown: Shutdown,
) {
    let mut last_loss_check = tokio::time::Instant::now() - LOSS_CHECK;
    let mut sweep = LostMessageSweep::default();
    loop {
        if last_loss_check.elapsed() >= LOSS_CHECK {
            last_loss_check = tokio::time::Instant::now();
            recover_lost_messages(&store, &queue).await;
            match queue.return_abandoned().await {
                Ok(0) | Err(_) => {}
                Ok(returned) => warn!(
                    returned,
                    "returned the messages of a queue consumer that stopped"
                ),
            }
            if queue.can_lose_published() {
                sweep.look(&store, &queue, republish_after).await;
            }
        }
        let batch = BATCH;
        let mut pause = IDLE_POLL;
        let mut published_full_batch = false;
        let taken = store
            .take_due_outbox(batch as i64, duration_ms(republish_after), |jobs| {
                send(&queue, jobs)
            })
            .await;
        match taken {
            Ok(jobs) if !jobs.is_empty() => {
                published_full_batch = jobs.len() == batch;
                signals.published();
            }
            Ok(_) => {}
            Err(error) => {
                warn!(%error, "reading the outbox failed");
                pause = PUBLISH_FAILED_PAUSE;
            }
        }
        if published_full_batch {
            continue;
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = signals.outbox_wait() => {}
            () = tokio::time::sleep(pause) => {}
        }
    }
}

/// Hands leased jobs to the queue; answers whether it has them.
async fn send(queue: &Queue, jobs: Vec<QueuedJob>) -> bool {
    match queue.publish(&jobs).await {
        Ok(()) => true,
        Err(error) => {
            warn!(%error, count = jobs.len(), "publishing to the queue failed; trying again");
            tokio::time::sleep(PUBLISH_FAILED_PAUSE).await;
            false
        }
    }
}

/// Walks the queued jobs the queue should hold a page per look, and
/// publishes again those it does not: a job pushed at once without an
/// outbox row whose api died before its push, whose push failed, or whose
/// commit's answer was lost, and messages a Redis crash or failover lost.
/// Found by asking the queue, not by waiting for `REPUBLISH_AFTER`, which
/// stays the last resort for jobs that have a row.
#[derive(Default)]
struct LostMessageSweep {
    /// Where the next look starts; the default starts from the first.
    after: SweepCursor,
}

impl LostMessageSweep {
    async fn look(&mut self, store: &Store, queue: &Queue, republish_after: Duration) {
        let published_before = now_ms() - duration_ms(LOST_AFTER);
        let page = match store
            .queued_unclaimed(&self.after, published_before, LOSS_CHECK_PAGE)
            .await
        {
            Ok((page, next)) => {
                self.after = next.unwrap_or_default();
                page
            }
            Err(error) => {
                warn!(%error, "could not read the queued jobs");
                return;
            }
        };
        let lost = match queue.not_held(page).await {
            Ok(lost) if lost.is_empty() => return,
            Ok(lost) => lost,
            // The queue is down: the next look, once it answers, finds out.
            Err(_) => return,
        };
        let republished = store
            .republish_outbox(
                &lost,
                published_before,
                duration_ms(republish_after),
                |jobs| send(queue, jobs),
            )
            .await;
        match republished {
            Ok(jobs) if !jobs.is_empty() => warn!(
                count = jobs.len(),
                "the queue did not hold these queued jobs; published them again"
            ),
            Ok(_) => {}
            Err(error) => warn!(%error, "could not publish lost jobs again"),
        }
    }
}

/// When the queue lost its messages (Redis came back empty), every job
/// published but not yet claimed, with a row or without, is made due at
/// once, then the queue is marked intact again; in that order, so a
/// process that dies in between leaves the work to the next relay that
/// looks. Several relays may do it at the same moment: a job published
/// twice is claimed once.
async fn recover_lost_messages(store: &Store, queue: &Queue) {
    match queue.lost_messages().await {
        Ok(true) => match store.make_outbox_due_now().await {
            Ok(due) => {
                if due > 0 {
                    warn!(
                        due,
                        "the queue lost its messages; publishing every unclaimed job again"
                    );
                }
                if let Err(error) = queue.mark_intact().await {
                    warn!(%error, "could not mark the queue intact");
                }
            }
            Err(error) => warn!(%error, "could not make unclaimed jobs due again"),
        },
        Ok(_) => {}
        // The queue is down: the next look, once it answers, finds out.
        Err(_) => {}
    }
}
