//! A worker's view of the Redis queue: it
//! fetches at most as many messages as it has free slots, so nothing it
//! holds waits for a slot, acknowledges each message once its handler has
//! returned (with its next fetch: one round trip for both, as a finished
//! handler frees the slot that fetch fills), and keeps a heartbeat, so
//! what it holds returns to the queue soon after its process dies.

use std::{
    collections::VecDeque,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures::{StreamExt, stream::BoxStream};
use tokio::sync::Semaphore;
use tracing::warn;

use crate::{Message, Result, redis::RedisFetcher};

/// How long a consumer waits after a failed fetch before it tries again.
const FETCH_FAILED_PAUSE: Duration = Duration::from_millis(500);
/// How often a consumer refreshes its heartbeat.
const HEARTBEAT: Duration = Duration::from_secs(1);

struct ConsumerInner {
    fetcher: RedisFetcher,
    /// Slots not holding a message: a fetch takes at most this many.
    free: Arc<Semaphore>,
    /// Messages whose handlers returned, acknowledged with the next fetch
    /// or, for a consumer that stops, by its release.
    acks: Mutex<Vec<String>>,
    heartbeat: tokio::task::JoinHandle<()>,
}

impl Drop for ConsumerInner {
    fn drop(&mut self) {
        self.heartbeat.abort();
    }
}

/// One worker's view of the queue (see the module's doc).
#[derive(Clone)]
pub struct Consumer(Arc<ConsumerInner>);

impl Consumer {
    /// A consumer of `slots` slots fetching with `fetcher`, whose
    /// heartbeat keeps it alive for [`crate::ALIVE`], refreshed every
    /// [`HEARTBEAT`] until the consumer is released or dropped.
    pub(crate) fn new(fetcher: RedisFetcher, slots: usize) -> Self {
        let beat = fetcher.heartbeat();
        let heartbeat = tokio::spawn(async move {
            loop {
                if let Err(error) = beat.beat().await {
                    warn!(%error, "refreshing the queue consumer's heartbeat failed");
                }
                tokio::time::sleep(HEARTBEAT).await;
            }
        });
        Consumer(Arc::new(ConsumerInner {
            fetcher,
            free: Arc::new(Semaphore::new(slots)),
            acks: Mutex::new(Vec::new()),
            heartbeat,
        }))
    }

    /// The messages this consumer fetches, each for a free slot: a worker's
    /// tasks (apalis runs the handlers; each handler's [`Delivery`] frees
    /// its slot). The stream never ends.
    pub fn messages(&self) -> BoxStream<'static, Message> {
        let start = (self.clone(), VecDeque::new());
        futures::stream::unfold(start, |(consumer, mut fetched)| async move {
            loop {
                if let Some(message) = fetched.pop_front() {
                    return Some((message, (consumer, fetched)));
                }
                fetched = consumer.fetch().await;
            }
        })
        .boxed()
    }

    /// Waits for a free slot, then fetches as many messages as there are
    /// free slots (at least one), waiting for a push while the queue is
    /// empty.
    async fn fetch(&self) -> VecDeque<Message> {
        let Ok(first) = self.0.free.clone().acquire_owned().await else {
            return VecDeque::new();
        };
        first.forget();
        let mut slots = 1;
        while let Ok(more) = self.0.free.try_acquire() {
            more.forget();
            slots += 1;
        }
        loop {
            match self.fetch_and_acknowledge(slots).await {
                Ok(raw) if !raw.is_empty() => {
                    self.0.free.add_permits(slots - raw.len());
                    let mut messages = VecDeque::with_capacity(raw.len());
                    for raw in raw {
                        messages.push_back(self.decode(raw).await);
                    }
                    return messages;
                }
                Ok(_) => self.0.fetcher.wait_for_push().await,
                Err(error) => {
                    warn!(%error, "fetching from the Redis queue failed; trying again");
                    tokio::time::sleep(FETCH_FAILED_PAUSE).await;
                }
            }
        }
    }

    /// One fetch of up to `slots` messages, carrying the acknowledgements
    /// waiting since the last; they wait for the next one if it fails.
    async fn fetch_and_acknowledge(&self, slots: usize) -> Result<Vec<Vec<u8>>> {
        let acks = std::mem::take(&mut *self.lock_acks());
        let fetched = self.0.fetcher.fetch(slots, &acks).await;
        if fetched.is_err() {
            self.lock_acks().extend(acks);
        }
        fetched
    }

    fn lock_acks(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.0
            .acks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A message as JSON. One that does not read back as the same bytes
    /// (not JSON, or not as we write it) could not be acknowledged by its
    /// value later: it is dropped now, and its handler drops it.
    async fn decode(&self, raw: Vec<u8>) -> Message {
        let value: Option<Message> = serde_json::from_slice(&raw).ok();
        if let Some(value) = value
            && value.to_string().as_bytes() == raw.as_slice()
        {
            return value;
        }
        if let Err(error) = self.0.fetcher.drop_unreadable(&raw).await {
            warn!(%error, "could not drop an unreadable queue message");
        }
        Message::String(String::from_utf8_lossy(&raw).into_owned())
    }

    /// A handler's hold on its message and slot (see [`Delivery`]).
    pub fn delivery(&self, message: &Message) -> Delivery {
        Delivery {
            consumer: self.clone(),
            raw: message.to_string(),
            finished: AtomicBool::new(false),
            slot_freed: AtomicBool::new(false),
        }
    }

    /// Returns whatever this consumer still holds to the queue and stops
    /// its heartbeat: for a consumer that stops (its handlers are done, or
    /// were abandoned at the end of the shutdown grace).
    pub async fn release(&self) -> Result<u64> {
        self.0.heartbeat.abort();
        // Finished messages must not go back with the unfinished ones.
        let acks = std::mem::take(&mut *self.lock_acks());
        let released = self.0.fetcher.release(&acks).await;
        if released.is_err() {
            self.lock_acks().extend(acks);
        }
        released
    }
}

/// A message a handler holds. When the handler finished with it, dropping
/// this acknowledges the message (with the consumer's next fetch); dropped
/// unfinished (the handler was abandoned), the message stays in flight
/// until its consumer is released or reaped, and then runs again. Either
/// way its slot is free, if [`Delivery::free_slot`] did not free it before.
pub struct Delivery {
    consumer: Consumer,
    raw: String,
    finished: AtomicBool,
    slot_freed: AtomicBool,
}

impl Delivery {
    pub fn finished(&self) {
        self.finished.store(true, Ordering::Relaxed);
    }

    /// Frees the message's slot before the message is done with: its
    /// handler goes on (writing an outcome) without holding a slot, and the
    /// acknowledgement goes with a later fetch.
    pub fn free_slot(&self) {
        if !self.slot_freed.swap(true, Ordering::Relaxed) {
            self.consumer.0.free.add_permits(1);
        }
    }
}

impl Drop for Delivery {
    fn drop(&mut self) {
        if self.finished.load(Ordering::Relaxed) {
            let raw = std::mem::take(&mut self.raw);
            self.consumer.lock_acks().push(raw);
        }
        // After the acknowledgement is queued, so the fetch this slot
        // wakes carries it.
        self.free_slot();
    }
}
