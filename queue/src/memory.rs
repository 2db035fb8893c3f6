//! The embedded default's queue: a channel inside the process, fair
//! between tenants. The worker pool runs in the same process as the relay,
//! so no second database writes, locks and acknowledges every message.
//! Nothing is lost with it on a crash, because the outbox is the record:
//! [`crate::Queue::recover`] makes every unclaimed job due again when the
//! process starts.

use std::{
    cmp::{Ordering, Reverse},
    collections::{BinaryHeap, HashMap, VecDeque},
    sync::{Arc, Mutex, MutexGuard},
};

use apalis::prelude::{MemorySink, MemoryStorage, MemoryStorageError, Task};
use futures::{Sink, SinkExt, StreamExt, lock::Mutex as AsyncMutex};
use store::QueuedJob;
use tokio::sync::Notify;

use crate::Message;

/// Messages the in-process queue holds at most, of all tenants together.
/// No outbox row is marked published without room reserved for it (see
/// [`MemoryQueue::reserve_up_to`]), so a backlog waits in the database, not
/// in memory; this many keep the workers busy at full speed for longer
/// than the relay's idle poll, so they never wait for the relay.
pub const MEMORY_QUEUE_CAPACITY: usize = 1024;

/// Messages a tenant may hold in the in-process queue even when it is full
/// with other tenants' backlog: a tenant's new job gets a place right after
/// its commit, behind at most one message of each other tenant, instead of
/// waiting in the outbox behind another tenant's backlog.
pub const FAIR_SHARE: usize = 64;

/// One queue per tenant, in rank order (a job's due time plus what its
/// priority is worth, then arrival), and a ring of the tenants that have
/// messages: a fetch takes the first of the next tenant's queue, so with
/// `n` tenants waiting each gets every `n`-th message, however long the
/// others' queues. Push and fetch are O(log n) in the tenant's queue.
#[derive(Debug)]
pub struct FairQueue<T> {
    queues: HashMap<String, BinaryHeap<Reverse<Ranked<T>>>>,
    ring: VecDeque<String>,
    len: usize,
    /// Arrival order, for jobs of equal rank.
    pushed: u64,
}

/// An item and where it ranks; ordered by rank, then arrival.
#[derive(Debug)]
struct Ranked<T> {
    rank_at: i64,
    arrival: u64,
    item: T,
}

impl<T> PartialEq for Ranked<T> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl<T> Eq for Ranked<T> {}

impl<T> PartialOrd for Ranked<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Ranked<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.rank_at, self.arrival).cmp(&(other.rank_at, other.arrival))
    }
}

impl<T> Default for FairQueue<T> {
    fn default() -> Self {
        Self {
            queues: HashMap::new(),
            ring: VecDeque::new(),
            len: 0,
            pushed: 0,
        }
    }
}

impl<T> FairQueue<T> {
    pub fn push(&mut self, tenant: &str, rank_at: i64, item: T) {
        let queue = match self.queues.get_mut(tenant) {
            Some(queue) => queue,
            None => {
                self.ring.push_back(tenant.to_owned());
                self.queues.entry(tenant.to_owned()).or_default()
            }
        };
        self.pushed += 1;
        queue.push(Reverse(Ranked {
            rank_at,
            arrival: self.pushed,
            item,
        }));
        self.len += 1;
    }

    /// The next tenant's first message; that tenant moves to the back of
    /// the ring if it has more.
    pub fn pop(&mut self) -> Option<T> {
        let tenant = self.ring.pop_front()?;
        let queue = self.queues.get_mut(&tenant)?;
        let item = queue.pop().map(|Reverse(ranked)| ranked.item);
        if queue.is_empty() {
            self.queues.remove(&tenant);
        } else {
            self.ring.push_back(tenant);
        }
        self.len -= usize::from(item.is_some());
        item
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn len_of(&self, tenant: &str) -> usize {
        self.queues.get(tenant).map_or(0, BinaryHeap::len)
    }
}

#[derive(Default)]
struct State {
    waiting: FairQueue<Message>,
    /// Places held by a [`Room`], all tenants together...
    reserved: usize,
    /// ...and those held for a named tenant, counted in its share.
    reserved_for: HashMap<String, usize>,
}

impl State {
    fn held(&self) -> usize {
        self.waiting.len() + self.reserved
    }

    fn held_by(&self, tenant: &str) -> usize {
        self.waiting.len_of(tenant) + self.reserved_for.get(tenant).copied().unwrap_or(0)
    }

    fn release(&mut self, tenant: Option<&str>) {
        self.reserved -= 1;
        if let Some(tenant) = tenant
            && let Some(count) = self.reserved_for.get_mut(tenant)
        {
            *count -= 1;
            if *count == 0 {
                self.reserved_for.remove(tenant);
            }
        }
    }
}

struct Shared {
    state: Mutex<State>,
    arrived: Notify,
}

#[derive(Clone)]
pub struct MemoryQueue {
    shared: Arc<Shared>,
}

impl Default for MemoryQueue {
    fn default() -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                arrived: Notify::new(),
            }),
        }
    }
}

/// Places reserved in the in-process queue, each for any tenant or for a
/// named one; given back when dropped unused.
pub struct Room {
    queue: MemoryQueue,
    places: Vec<Option<String>>,
}

impl Room {
    pub fn len(&self) -> usize {
        self.places.len()
    }

    pub fn is_empty(&self) -> bool {
        self.places.is_empty()
    }

    /// Sends one message per job into the reserved places; places left
    /// over are given back.
    pub fn send(mut self, jobs: &[QueuedJob]) {
        let places = std::mem::take(&mut self.places);
        let mut state = self.queue.lock();
        let mut sent = 0;
        for (place, job) in places.iter().zip(jobs) {
            state.release(place.as_deref());
            state
                .waiting
                .push(&job.tenant_id, job.rank_at, crate::message(job));
            sent += 1;
        }
        for place in &places[sent..] {
            state.release(place.as_deref());
        }
        drop(state);
        for _ in 0..sent {
            self.queue.shared.arrived.notify_one();
        }
    }
}

impl Drop for Room {
    fn drop(&mut self) {
        if self.places.is_empty() {
            return;
        }
        let mut state = self.queue.lock();
        for place in &self.places {
            state.release(place.as_deref());
        }
    }
}

type BoxedMemorySink =
    Box<dyn Sink<Task<Message>, Error = MemoryStorageError> + Send + Sync + Unpin>;

impl MemoryQueue {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves counts, never a broken
        // structure: every change is a few lines with no call out.
        self.shared
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Room for up to `most` messages of any tenants, as much as the
    /// queue's capacity leaves (the relay's reservation, made before it
    /// knows whose rows it will lease).
    pub fn reserve_up_to(&self, most: usize) -> Room {
        let mut state = self.lock();
        let count = most.min(MEMORY_QUEUE_CAPACITY.saturating_sub(state.held()));
        state.reserved += count;
        drop(state);
        Room {
            queue: self.clone(),
            places: vec![None; count],
        }
    }

    /// Room for one message per tenant named (repeated for each of its
    /// jobs), or `None` unless every one fits: each fits while the queue
    /// has room, or while its tenant holds less than its [`FAIR_SHARE`].
    pub fn reserve_for<'a>(&self, tenants: impl IntoIterator<Item = &'a str>) -> Option<Room> {
        let mut state = self.lock();
        let mut room = Room {
            queue: self.clone(),
            places: Vec::new(),
        };
        for tenant in tenants {
            if state.held() >= MEMORY_QUEUE_CAPACITY && state.held_by(tenant) >= FAIR_SHARE {
                drop(state);
                return None; // `room` gives back what it held
            }
            state.reserved += 1;
            *state.reserved_for.entry(tenant.to_owned()).or_default() += 1;
            room.places.push(Some(tenant.to_owned()));
        }
        Some(room)
    }

    /// Pushes without a reservation; for a caller with no outbox row to
    /// hold the message back (it may go over capacity).
    pub fn push(&self, jobs: &[QueuedJob]) {
        let mut state = self.lock();
        for job in jobs {
            state
                .waiting
                .push(&job.tenant_id, job.rank_at, crate::message(job));
        }
        drop(state);
        for _ in jobs {
            self.shared.arrived.notify_one();
        }
    }

    /// The next message in fair order, waiting for one.
    pub async fn next(&self) -> Message {
        loop {
            let arrived = self.shared.arrived.notified();
            tokio::pin!(arrived);
            // Registered before looking, so a push in between is not missed.
            arrived.as_mut().enable();
            if let Some(message) = self.lock().waiting.pop() {
                return message;
            }
            arrived.await;
        }
    }

    /// An apalis backend reading this queue. A restarted apalis worker
    /// gets a new one over the same queue, so no message is stranded in a
    /// dead worker's backend.
    pub fn storage(&self) -> MemoryStorage<Message> {
        // Messages come through `Room::send` (the relay, and the api right
        // after a submit's commit); apalis's own sink is never used.
        let unused_sink: BoxedMemorySink =
            Box::new(futures::sink::drain().sink_map_err(|never| match never {}));
        let messages = futures::stream::unfold(self.clone(), |queue| async move {
            let message = queue.next().await;
            Some((Task::new(message), queue))
        });
        MemoryStorage::new_with(
            MemorySink::new(Arc::new(AsyncMutex::new(unused_sink))),
            messages.boxed(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(tenant: &str, n: usize) -> QueuedJob {
        ranked(tenant, n, 0)
    }

    fn ranked(tenant: &str, n: usize, rank_at: i64) -> QueuedJob {
        QueuedJob {
            job_id: format!("{tenant}-{n}"),
            tenant_id: tenant.to_owned(),
            rank_at,
        }
    }

    fn push(queue: &mut FairQueue<QueuedJob>, job: QueuedJob) {
        queue.push(&job.tenant_id.clone(), job.rank_at, job);
    }

    fn next_ids(queue: &mut FairQueue<QueuedJob>, n: usize) -> Vec<String> {
        (0..n)
            .filter_map(|_| queue.pop().map(|job| job.job_id))
            .collect()
    }

    #[test]
    fn a_tenant_behind_a_backlog_is_served_next_in_turn() {
        let mut queue = FairQueue::default();
        for n in 0..1000 {
            push(&mut queue, job("a", n));
        }
        push(&mut queue, job("b", 0));
        push(&mut queue, job("c", 0));
        assert_eq!(next_ids(&mut queue, 4), ["a-0", "b-0", "c-0", "a-1"]);
        assert_eq!(queue.len(), 998);
    }

    #[test]
    fn each_tenant_keeps_its_own_order() {
        let mut queue = FairQueue::default();
        for n in 0..3 {
            push(&mut queue, job("a", n));
            push(&mut queue, job("b", n));
        }
        assert_eq!(
            next_ids(&mut queue, 7),
            ["a-0", "b-0", "a-1", "b-1", "a-2", "b-2"]
        );
        assert!(queue.is_empty());
    }

    #[test]
    fn a_tenant_s_jobs_run_in_rank_order_and_tenants_keep_their_turns() {
        let mut queue = FairQueue::default();
        // a: a backlog ranked late (low priority), then one ranked early.
        for n in 0..100 {
            push(&mut queue, ranked("a", n, 1_000 + n as i64));
        }
        push(&mut queue, ranked("a", 100, 10));
        push(&mut queue, ranked("b", 0, 5_000));
        push(&mut queue, ranked("b", 1, 5_000));
        assert_eq!(
            next_ids(&mut queue, 5),
            ["a-100", "b-0", "a-0", "b-1", "a-1"],
            "a's early job first among a's, equal ranks in arrival order, turns kept"
        );
    }

    #[test]
    fn a_full_queue_still_admits_a_tenant_below_its_share() {
        let queue = MemoryQueue::default();
        let backlog: Vec<QueuedJob> = (0..MEMORY_QUEUE_CAPACITY).map(|n| job("a", n)).collect();
        queue.reserve_up_to(backlog.len()).send(&backlog);
        assert_eq!(queue.reserve_up_to(10).len(), 0, "the queue is full");
        assert!(queue.reserve_for(["a"]).is_none(), "a is over its share");
        let room = queue.reserve_for(["b"]).expect("b holds nothing");
        room.send(&[job("b", 0)]);
        let shares = vec!["b"; FAIR_SHARE - 1];
        assert!(queue.reserve_for(shares.iter().copied()).is_some());
        let shares = vec!["b"; FAIR_SHARE];
        assert!(queue.reserve_for(shares.iter().copied()).is_none());
    }

    #[test]
    fn unused_room_is_given_back() {
        let queue = MemoryQueue::default();
        let room = queue.reserve_up_to(MEMORY_QUEUE_CAPACITY);
        assert_eq!(queue.reserve_up_to(1).len(), 0);
        room.send(&[job("a", 0)]);
        assert_eq!(
            queue.reserve_up_to(MEMORY_QUEUE_CAPACITY).len(),
            MEMORY_QUEUE_CAPACITY - 1
        );
    }
}
