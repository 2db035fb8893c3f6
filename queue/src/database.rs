//! The production queue without Redis: the database queue in Postgres
//! (`store::queue`), fair between tenants like the Redis queue, fed to
//! apalis as a stream by a [`Consumer`].
//!
//! A consumer takes tenants in turn from where its last fetch stopped, so
//! one tenant's backlog never makes another's job wait behind it; within a
//! tenant, messages go by rank. An idle consumer waits for a NOTIFY of a
//! push (on a session of its own, `DATABASE_DIRECT_URL` behind a
//! transaction-mode pooler), and looks again after [`IDLE_LOOK`] without
//! one. Its heartbeat is a row in `queue_consumers`; what a dead consumer
//! held waits again within [`crate::ALIVE`] (the relay's check hands it back).

use std::{
    collections::HashSet,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use futures::lock::Mutex as AsyncMutex;
use sqlx::postgres::PgListener;
use store::{QUEUE_CHANNEL, QueueFetch, QueueMessage, QueuedJob, Store};
use tracing::warn;

use crate::{
    Message, Result,
    consumer::{ALIVE, Consumer, Source},
};

/// How long an idle consumer waits for a NOTIFY before it looks again on
/// its own (a notification missed while reconnecting costs no more).
const IDLE_LOOK: Duration = Duration::from_secs(1);

/// How often a consumer hands back what it holds beyond what it knows of.
/// A fetch commits without waiting for its WAL to reach disk (the function
/// `queue_fetch`): a crash of Postgres can undo one that answered. Its
/// messages then wait again (a second delivery, which the claim fences),
/// and the messages it acknowledged come back in flight under this
/// consumer, which forgot them; handed back, they are delivered again and
/// acknowledged, their jobs not claimable.
const RECONCILE_EVERY: Duration = Duration::from_secs(1);

/// The database queue named `name` (`{QUEUE_NAME}:jobs`).
#[derive(Clone)]
pub struct DatabaseQueue {
    store: Store,
    name: String,
    /// A connection, made when first used, to prune what apalis's Postgres
    /// storage left (`crate::apalis_tables`); closed when idle.
    apalis: sqlx::PgPool,
    /// Set once apalis's table is found absent: nothing makes it again.
    apalis_gone: Arc<AtomicBool>,
}

impl std::fmt::Debug for DatabaseQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseQueue")
            .field("name", &self.name)
            .finish()
    }
}

impl DatabaseQueue {
    pub fn new(store: Store, name: String) -> Result<Self> {
        let apalis = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .idle_timeout(Duration::from_secs(30))
            .connect_lazy(store.session_url())?;
        Ok(Self {
            store,
            name,
            apalis,
            apalis_gone: Arc::new(AtomicBool::new(false)),
        })
    }

    /// The pool for apalis's tables (see [`crate::apalis_tables`]), until
    /// they are found gone.
    pub(crate) fn apalis_pool(&self) -> Option<&sqlx::PgPool> {
        (!self.apalis_gone.load(Ordering::Relaxed)).then_some(&self.apalis)
    }

    /// Records that apalis's table is gone (see [`DatabaseQueue::apalis_pool`]).
    pub(crate) fn apalis_gone(&self) {
        self.apalis_gone.store(true, Ordering::Relaxed);
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the database answers.
    pub async fn ping(&self) -> Result<()> {
        Ok(self.store.ping().await?)
    }

    /// Adds a message per job (none for a job that has one) and wakes the
    /// consumers.
    pub async fn push(&self, jobs: &[QueuedJob]) -> Result<()> {
        Ok(self.store.queue_push(&self.name, jobs).await?)
    }

    /// Hands back the messages of consumers whose heartbeat lapsed;
    /// returns how many.
    pub async fn return_abandoned(&self) -> Result<u64> {
        Ok(self.store.queue_return_abandoned(&self.name).await?)
    }

    /// A consumer with `slots` slots, under a name no other consumer uses.
    /// Its heartbeat runs until it is released or dropped.
    pub fn consumer(&self, name: String, slots: usize) -> Consumer {
        let refresh = {
            let (queue, name) = (self.clone(), name.clone());
            move || {
                let (queue, name) = (queue.clone(), name.clone());
                async move {
                    Ok(queue
                        .store
                        .queue_heartbeat(&queue.name, &name, ALIVE)
                        .await?)
                }
            }
        };
        let fetcher = DatabaseFetcher {
            queue: self.clone(),
            name,
            after_tenant: Mutex::new(String::new()),
            held: Mutex::new(HashSet::new()),
            answer_lost: AtomicBool::new(false),
            reconciled: Mutex::new(Instant::now()),
            listener: AsyncMutex::new(None),
        };
        Consumer::new(Source::Database(Box::new(fetcher)), slots, refresh)
    }
}

/// A [`Consumer`]'s fetches from the database queue.
pub(crate) struct DatabaseFetcher {
    queue: DatabaseQueue,
    name: String,
    /// The tenant the last fetch served last: the next starts after it.
    after_tenant: Mutex<String>,
    /// The messages this consumer fetched and has not had acknowledged.
    held: Mutex<HashSet<i64>>,
    /// A fetch failed after it may have taken messages: before the next,
    /// whatever this consumer holds beyond `held` is handed back.
    answer_lost: AtomicBool,
    /// When that was last done ([`RECONCILE_EVERY`]).
    reconciled: Mutex<Instant>,
    /// The session an idle consumer waits for a NOTIFY on.
    listener: AsyncMutex<Option<PgListener>>,
}

/// The field of a message that names its row in the database queue.
const MESSAGE_ID: &str = "message_id";

/// The message a handler gets: the job's ([`crate::message`]) and the
/// row's id, by which it is acknowledged.
fn message_of(fetched: &QueueMessage) -> Message {
    let mut message = crate::message(&fetched.job);
    message[MESSAGE_ID] = fetched.message_id.into();
    message
}

fn message_ids(acks: &[String]) -> Vec<i64> {
    acks.iter()
        .filter_map(|raw| {
            serde_json::from_str::<Message>(raw)
                .ok()?
                .get(MESSAGE_ID)?
                .as_i64()
        })
        .collect()
}

impl DatabaseFetcher {
    fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        mutex
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) async fn fetch(&self, slots: usize, acks: &[String]) -> Result<Vec<Vec<u8>>> {
        let store = &self.queue.store;
        let answer_lost = self.answer_lost.load(Ordering::Relaxed);
        if answer_lost || Self::lock(&self.reconciled).elapsed() >= RECONCILE_EVERY {
            let keep: Vec<i64> = Self::lock(&self.held).iter().copied().collect();
            let back = store
                .queue_reconcile(&self.queue.name, &self.name, &keep)
                .await?;
            self.answer_lost.store(false, Ordering::Relaxed);
            *Self::lock(&self.reconciled) = Instant::now();
            if back > 0 {
                warn!(
                    back,
                    answer_lost, "handed back messages this consumer held without knowing"
                );
            }
        }
        let ack_ids = message_ids(acks);
        // The window a crash of Postgres that undid a fetch opens: its
        // acknowledgements never applied, and this consumer forgot them.
        let sent_acks: &[i64] =
            if !ack_ids.is_empty() && shared::failpoints::armed("queue::fetch_acks_undone") {
                &[]
            } else {
                &ack_ids
            };
        let after_tenant = Self::lock(&self.after_tenant).clone();
        let fetched = store
            .queue_fetch(QueueFetch {
                queue: &self.queue.name,
                consumer: &self.name,
                most: slots,
                after_tenant: &after_tenant,
                acks: sent_acks,
                alive: ALIVE,
            })
            .await;
        // The window a lost answer opens: the fetch committed, its rows
        // name this consumer, and it never learnt which.
        let fetched = match fetched {
            Ok(_) if shared::failpoints::armed("queue::fetch_answer_lost") => {
                let lost = std::io::Error::other("failpoint: the fetch's answer was lost");
                Err(store::Error::from(sqlx::Error::Io(lost)))
            }
            fetched => fetched,
        };
        let fetched = fetched.inspect_err(|_| self.answer_lost.store(true, Ordering::Relaxed))?;
        {
            let mut held = Self::lock(&self.held);
            for message_id in &ack_ids {
                held.remove(message_id);
            }
            held.extend(fetched.iter().map(|message| message.message_id));
        }
        if let Some(last) = fetched.last() {
            *Self::lock(&self.after_tenant) = last.job.tenant_id.clone();
        }
        Ok(fetched
            .iter()
            .map(|message| message_of(message).to_string().into_bytes())
            .collect())
    }

    pub(crate) async fn wait_for_push(&self) {
        let mut listener = self.listener.lock().await;
        if listener.is_none() {
            match self.listen().await {
                Ok(new) => *listener = Some(new),
                Err(error) => {
                    warn!(%error, "cannot listen for queue messages; looking again shortly");
                    tokio::time::sleep(IDLE_LOOK).await;
                    return;
                }
            }
        }
        let Some(session) = listener.as_mut() else {
            return;
        };
        let deadline = tokio::time::Instant::now() + IDLE_LOOK;
        loop {
            match tokio::time::timeout_at(deadline, session.try_recv()).await {
                Err(_) => return,
                Ok(Ok(Some(notification))) if notification.payload() == self.queue.name => return,
                Ok(Ok(Some(_))) => {}
                // The session was lost (and may have missed a push): look now.
                Ok(Ok(None)) => return,
                Ok(Err(error)) => {
                    warn!(%error, "listening for queue messages failed; reconnecting");
                    *listener = None;
                    return;
                }
            }
        }
    }

    async fn listen(&self) -> Result<PgListener> {
        let mut listener = PgListener::connect(self.queue.store.session_url()).await?;
        listener.listen(QUEUE_CHANNEL).await?;
        Ok(listener)
    }

    /// Acknowledges `acks` (with a last fetch of nothing), then hands back
    /// everything else this consumer holds.
    pub(crate) async fn release(&self, acks: &[String]) -> Result<u64> {
        self.fetch(0, acks).await?;
        let released = self
            .queue
            .store
            .queue_release(&self.queue.name, &self.name)
            .await?;
        Self::lock(&self.held).clear();
        Ok(released)
    }
}
