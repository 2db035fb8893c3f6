//! The outbox relay: publishes due outbox rows to the queue in batches.
//! Several relays may run at once (every `api` and `worker` process runs
//! one); a row is leased before it is published, so they rarely overlap,
//! and when they do the claim guard makes the duplicate message harmless.

use std::time::Duration;

use shared::{notify::Signals, store::Store, time::duration_ms};
use tokio_util::sync::CancellationToken as Shutdown;
use tracing::warn;

use crate::Queue;

const BATCH: usize = 200;
/// How often the relay looks without being woken (rows written by another
/// process, retries whose backoff has passed).
const IDLE_POLL: Duration = Duration::from_millis(100);

/// How often the relay asks whether the queue lost its messages, and
/// returns those of dead Redis consumers.
const LOSS_CHECK: Duration = Duration::from_secs(1);

pub async fn run_relay(
    store: Store,
    queue: Queue,
    signals: Signals,
    republish_after: Duration,
    shutdown: Shutdown,
) {
    let mut last_loss_check = tokio::time::Instant::now() - LOSS_CHECK;
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
        }
        let (handoff, batch) = queue.handoff_up_to(BATCH);
        let mut published_full_batch = false;
        match store
            .take_due_outbox(batch as i64, duration_ms(republish_after))
            .await
        {
            Ok(jobs) if !jobs.is_empty() => {
                if handoff.publish(&queue, &store, &jobs).await {
                    published_full_batch = jobs.len() == batch;
                    signals.published();
                }
            }
            Ok(_) => {}
            Err(error) => warn!(%error, "reading the outbox failed"),
        }
        if published_full_batch {
            continue;
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = signals.outbox_wait() => {}
            () = tokio::time::sleep(IDLE_POLL) => {}
        }
    }
}

/// When the queue lost its messages (Redis came back empty), every job
/// published but not yet claimed is made due at once, then the queue is
/// marked intact again; in that order, so a process that dies in between
/// leaves the work to the next relay that looks. Several relays may do it
/// at the same moment: a job published twice is claimed once.
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
