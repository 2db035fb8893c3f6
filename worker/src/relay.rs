//! The outbox relay: publishes due outbox rows to the queue in batches.
//! Several relays may run at once (every `api` and `worker` process runs
//! one); a row is leased before it is published, so they rarely overlap,
//! and when they do the claim guard makes the duplicate message harmless.

use std::time::Duration;

use shared::{
    notify::Signals,
    store::Store,
    time::{duration_ms, now_ms},
};
use tokio_util::sync::CancellationToken as Shutdown;
use tracing::warn;

use crate::Queue;

const BATCH: i64 = 200;
/// How often the relay looks without being woken (rows written by another
/// process, retries whose backoff has passed).
const IDLE_POLL: Duration = Duration::from_millis(100);

/// How often the relay asks whether the queue lost its messages.
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
        }
        let mut published_full_batch = false;
        // The in-process queue leases no more rows than it has room for: a
        // backlog stays in the outbox rather than in memory (and is not
        // republished meanwhile).
        let room = queue.reserve_up_to(BATCH as usize);
        let batch = room.as_ref().map_or(BATCH, |room| room.len() as i64);
        match store
            .take_due_outbox(batch, duration_ms(republish_after))
            .await
        {
            Ok(job_ids) if !job_ids.is_empty() => {
                published_full_batch = job_ids.len() as i64 == batch;
                let published = match room {
                    Some(room) => {
                        room.send(&job_ids);
                        Ok(())
                    }
                    None => queue.publish(&job_ids).await,
                };
                if let Err(error) = published {
                    warn!(%error, count = job_ids.len(), "publishing to the queue failed; will retry");
                    let _ = store.retry_outbox_soon(&job_ids, now_ms() + 1_000).await;
                    published_full_batch = false;
                } else {
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
