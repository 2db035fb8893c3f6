//! The queue: Redis when `REDIS_URL` is set, else the database (apalis's
//! SQLite or Postgres storage). A message is only `{"job_id": "..."}`.

use std::time::Duration;

use apalis::prelude::TaskSink;
use apalis_postgres::PostgresStorage;
use apalis_redis::RedisStorage;
use apalis_sqlite::SqliteStorage;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use serde_json::{Value, json};
use shared::{
    settings::Settings,
    store::{Dialect, Store},
};

use crate::BoxError;

/// The payload type: decoded as any JSON value, so a malformed message
/// is dropped by our handler instead of killing the apalis worker at fetch.
pub type Message = Value;

#[derive(Clone)]
pub enum Queue {
    Redis {
        storage: RedisStorage<Message, ConnectionManager>,
        conn: ConnectionManager,
    },
    Sqlite(SqliteStorage<Message>),
    Postgres(PostgresStorage<Message>),
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Queue::Redis { .. } => "Queue::Redis",
            Queue::Sqlite(_) => "Queue::Sqlite",
            Queue::Postgres(_) => "Queue::Postgres",
        })
    }
}

/// apalis's heartbeat: its own orphan recovery re-delivers a dead worker's
/// messages after `HEARTBEAT * MISSED_HEARTBEATS`; our lease does the real
/// recovery, so this only needs to be well above any stall.
const HEARTBEAT: Duration = Duration::from_secs(10);
const MISSED_HEARTBEATS: usize = 6;

impl Queue {
    /// Connects to the queue the settings name and prepares its tables.
    pub async fn connect(settings: &Settings, store: &Store) -> Result<Self, BoxError> {
        let queue_name = format!("{}:jobs", settings.queue_name);
        if let Some(url) = &settings.redis_url {
            let client = redis::Client::open(url.as_str())?;
            // redis-rs's 500 ms default response timeout turns one slow
            // answer into a fatal stream error in apalis (apalis-redis#76).
            let config = ConnectionManagerConfig::new()
                .set_response_timeout(Some(Duration::from_secs(10)))
                .set_connection_timeout(Some(Duration::from_secs(5)));
            let conn = client.get_connection_manager_with_config(config).await?;
            let storage = RedisStorage::new(conn.clone()).with_config(
                apalis_redis::Config::default()
                    .queue(&queue_name)
                    .batch_size(1)
                    .heartbeat_interval(HEARTBEAT)
                    .missed_heartbeats(MISSED_HEARTBEATS),
            );
            return Ok(Queue::Redis { storage, conn });
        }
        match store.dialect() {
            Dialect::Sqlite => {
                let url = &sqlite_queue_url(store.url());
                // apalis's setup turns `synchronous` OFF on the connection it
                // runs on: run it on a pool of its own and throw that away.
                let setup_pool = apalis_sqlite::SqlitePool::connect(url).await?;
                SqliteStorage::setup(&setup_pool).await?;
                setup_pool.close().await;
                let options: apalis_sqlite::SqliteConnectOptions = url.parse()?;
                let options = options
                    .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                    .synchronous(sqlx::sqlite::SqliteSynchronous::Normal)
                    .busy_timeout(Duration::from_secs(10));
                let pool = apalis_sqlite::SqlitePoolOptions::new()
                    .max_connections(4)
                    .connect_with(options)
                    .await?;
                Ok(Queue::Sqlite(
                    SqliteStorage::new(&pool).with_config(
                        apalis_sqlite::Config::default()
                            .queue(&queue_name)
                            .batch_size(1)
                            .heartbeat_interval(HEARTBEAT)
                            .missed_heartbeats(MISSED_HEARTBEATS),
                    ),
                ))
            }
            Dialect::Postgres => {
                let pool = sqlx::postgres::PgPoolOptions::new()
                    .max_connections(8)
                    .connect(store.url())
                    .await?;
                PostgresStorage::setup(&pool).await?;
                Ok(Queue::Postgres(
                    PostgresStorage::new(&pool).with_config(
                        apalis_postgres::Config::default()
                            .queue(&queue_name)
                            .batch_size(1)
                            .heartbeat_interval(HEARTBEAT)
                            .missed_heartbeats(MISSED_HEARTBEATS),
                    ),
                ))
            }
        }
    }

    /// Publishes one message per job id.
    pub async fn publish(&self, job_ids: &[String]) -> Result<(), BoxError> {
        let messages: Vec<Message> = job_ids.iter().map(|id| json!({ "job_id": id })).collect();
        match self.clone() {
            Queue::Redis { mut storage, .. } => storage.push_bulk(messages).await?,
            Queue::Sqlite(mut storage) => storage.push_bulk(messages).await?,
            Queue::Postgres(mut storage) => storage.push_bulk(messages).await?,
        }
        Ok(())
    }

    /// Whether the queue answers (for `/readyz`).
    pub async fn ping(&self) -> Result<(), BoxError> {
        match self {
            Queue::Redis { conn, .. } => {
                let mut conn = conn.clone();
                redis::cmd("PING").query_async::<String>(&mut conn).await?;
            }
            Queue::Sqlite(storage) => {
                sqlx::query("SELECT 1").execute(storage.pool()).await?;
            }
            Queue::Postgres(storage) => {
                sqlx::query("SELECT 1").execute(storage.pool()).await?;
            }
        }
        Ok(())
    }
}

/// The embedded queue lives in a file of its own beside the database
/// (`data/jobs.db` -> `data/jobs.queue.db`): apalis's `Jobs` table would
/// otherwise collide with ours (SQLite names ignore case), and two files
/// have two write locks, so queue traffic does not wait on job writes.
fn sqlite_queue_url(url: &str) -> String {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    let stem = path.strip_suffix(".db").unwrap_or(path);
    if query.is_empty() {
        format!("{stem}.queue.db?mode=rwc")
    } else {
        format!("{stem}.queue.db?{query}")
    }
}
