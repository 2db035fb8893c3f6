//! The Redis primary the queue talks to: one server (`redis://...`), or
//! whichever server a set of Sentinels names primary
//! (`redis+sentinel://host:port,host:port/master_name`, see
//! `docs/operations.md`). Every connection the queue makes comes from
//! [`Primary`], so after a failover they all move to the new primary by
//! themselves: a command that finds its connection broken, or a server
//! that answers `READONLY` (a demoted primary, now a replica), makes it ask
//! the Sentinels again and reconnect there. The command itself still
//! fails; its caller tries again, as it does through any outage.

use std::{
    sync::{Arc, RwLock},
    time::Duration,
};

use redis::{
    AsyncConnectionConfig, Client, Cmd, ConnectionAddr, ErrorKind, Pipeline, RedisError,
    RedisFuture, RedisResult, ServerErrorKind, Value,
    aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection},
    sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType},
};
use tokio::{sync::Mutex as AsyncMutex, time::Instant};
use tracing::{info, warn};

/// The scheme of a `REDIS_URL` that names Sentinels rather than a server.
pub const SENTINEL_SCHEME: &str = "redis+sentinel://";
const DEFAULT_SENTINEL_PORT: u16 = 26379;
/// At most one look-up (or forced reconnect) this often: while the old
/// primary is down and the Sentinels have not yet promoted another, every
/// command fails, and each need not ask again.
const LOOK_AGAIN_AFTER: Duration = Duration::from_millis(250);
/// A Sentinel look-up that takes longer than this is given up; the next
/// failure asks again.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

enum Source {
    Server,
    Sentinels(Box<AsyncMutex<SentinelClient>>),
}

struct Current {
    /// Bumped at each reconnect, so a connection made before it (the
    /// consumers' blocking ones) knows it is stale.
    generation: u64,
    client: Client,
    manager: ConnectionManager,
}

struct Inner {
    source: Source,
    config: ConnectionManagerConfig,
    current: RwLock<Current>,
    /// When the last look-up started; held while one runs.
    looked: AsyncMutex<Option<Instant>>,
}

/// A connection to the current primary, cheap to clone (all clones share
/// one multiplexed connection); usable wherever a redis-rs connection is.
#[derive(Clone)]
pub struct Primary(Arc<Inner>);

impl Primary {
    /// Connects to the primary `url` names (see the module's doc).
    pub async fn connect(url: &str, config: ConnectionManagerConfig) -> RedisResult<Self> {
        let (source, client, config) = match url.strip_prefix(SENTINEL_SCHEME) {
            Some(rest) => {
                let mut sentinels = sentinel_client(rest)?;
                let client = tokio::time::timeout(LOOKUP_TIMEOUT, sentinels.async_get_client())
                    .await
                    .map_err(|_| lookup_timed_out())??;
                // A dead primary's address is not worth the manager's own
                // retries: the next command's failure asks the Sentinels.
                let config = config.set_number_of_retries(1);
                (
                    Source::Sentinels(Box::new(AsyncMutex::new(sentinels))),
                    client,
                    config,
                )
            }
            None => (Source::Server, Client::open(url)?, config),
        };
        let manager = client
            .get_connection_manager_with_config(config.clone())
            .await?;
        Ok(Primary(Arc::new(Inner {
            source,
            config,
            current: RwLock::new(Current {
                generation: 0,
                client,
                manager,
            }),
            looked: AsyncMutex::new(None),
        })))
    }

    fn current(&self) -> (u64, ConnectionManager) {
        let current = self.read();
        (current.generation, current.manager.clone())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Current> {
        self.0
            .current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The number of reconnects to a new primary so far: a dedicated
    /// connection made under an older one is to a server that may no
    /// longer be the primary.
    pub fn generation(&self) -> u64 {
        self.read().generation
    }

    /// A connection of its own to the current primary (for a blocking
    /// command, which would hold up every other command on a shared one),
    /// and the [`Primary::generation`] it belongs to.
    pub async fn dedicated(
        &self,
        config: &AsyncConnectionConfig,
    ) -> RedisResult<(u64, MultiplexedConnection)> {
        let (generation, client) = {
            let current = self.read();
            (current.generation, current.client.clone())
        };
        match client
            .get_multiplexed_async_connection_with_config(config)
            .await
        {
            Ok(conn) => Ok((generation, conn)),
            Err(error) => {
                self.failed(generation, &error).await;
                Err(error)
            }
        }
    }

    /// Called with the error of a command sent under `generation`: when it
    /// says the server may no longer be the primary, looks again.
    pub async fn failed(&self, generation: u64, error: &RedisError) {
        let read_only = matches!(
            error.kind(),
            ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
        );
        let lost = error.is_io_error()
            || error.is_timeout()
            || error.is_connection_dropped()
            || error.is_connection_refusal()
            || error.is_unrecoverable_error();
        if !(read_only || lost) {
            return;
        }
        // One look-up at a time; the others fail as they would anyway.
        let Ok(mut looked) = self.0.looked.try_lock() else {
            return;
        };
        if self.generation() != generation
            || looked.is_some_and(|at| at.elapsed() < LOOK_AGAIN_AFTER)
        {
            return;
        }
        *looked = Some(Instant::now());
        let client = match &self.0.source {
            Source::Sentinels(sentinels) => {
                let mut sentinels = sentinels.lock().await;
                match tokio::time::timeout(LOOKUP_TIMEOUT, sentinels.async_get_client()).await {
                    Ok(Ok(client)) => client,
                    // No primary yet (the Sentinels have not agreed on a
                    // new one): the next failure asks again.
                    Ok(Err(error)) => {
                        warn!(%error, "asking the Redis Sentinels for the primary failed");
                        return;
                    }
                    Err(_) => {
                        warn!("the Redis Sentinels did not name a primary in time");
                        return;
                    }
                }
            }
            // A single server: its name may now lead elsewhere (a managed
            // Redis moves its name on failover), so a replica's READONLY is
            // worth a fresh connection; a lost connection the manager
            // restores itself.
            Source::Server if read_only => self.read().client.clone(),
            Source::Server => return,
        };
        let moved =
            client.get_connection_info().addr() != self.read().client.get_connection_info().addr();
        if !moved && !read_only {
            return;
        }
        let manager =
            match ConnectionManager::new_lazy_with_config(client.clone(), self.0.config.clone()) {
                Ok(manager) => manager,
                Err(error) => {
                    warn!(%error, "cannot connect to the Redis primary");
                    return;
                }
            };
        let address = client.get_connection_info().addr().to_string();
        let mut current = self
            .0
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if current.generation == generation {
            current.generation += 1;
            current.client = client;
            current.manager = manager;
            info!(%address, "connected to the Redis primary");
        }
    }

    async fn checked<T>(&self, generation: u64, result: RedisResult<T>) -> RedisResult<T> {
        if let Err(error) = &result {
            self.failed(generation, error).await;
        }
        result
    }
}

impl ConnectionLike for Primary {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (generation, mut manager) = self.current();
            let result = manager.send_packed_command(cmd).await;
            self.checked(generation, result).await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let (generation, mut manager) = self.current();
            let result = manager.send_packed_commands(pipeline, offset, count).await;
            self.checked(generation, result).await
        })
    }

    fn get_db(&self) -> i64 {
        self.read().manager.get_db()
    }
}

fn lookup_timed_out() -> RedisError {
    RedisError::from((
        ErrorKind::Io,
        "the Redis Sentinels did not name a primary in time",
    ))
}

fn invalid(detail: String) -> RedisError {
    RedisError::from((
        ErrorKind::InvalidClientConfig,
        "REDIS_URL is not a valid redis+sentinel:// URL",
        detail,
    ))
}

/// A client of the Sentinels in a `redis+sentinel://` URL (without its
/// scheme):
/// `[[username]:password@]host[:port][,host[:port]...]/master_name[/db][?sentinel_username=...&sentinel_password=...]`.
/// The user and password are the Redis servers'; a Sentinel's own, when
/// it has one (`requirepass` in its configuration), are the query's.
fn sentinel_client(rest: &str) -> RedisResult<SentinelClient> {
    let (authority, path) = rest
        .split_once('/')
        .ok_or_else(|| invalid("no master name: add /master_name after the Sentinels".into()))?;
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo), hosts),
        None => (None, authority),
    };
    let sentinels = hosts
        .split(',')
        .map(sentinel_address)
        .collect::<RedisResult<Vec<_>>>()?;
    // The rest is an ordinary URL's: let the URL parser decode it.
    let userinfo = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
    let parsed = url::Url::parse(&format!("redis://{userinfo}sentinels/{path}"))
        .map_err(|error| invalid(error.to_string()))?;
    let decode = |text: &str| {
        percent_encoding::percent_decode_str(text)
            .decode_utf8()
            .map(|text| text.into_owned())
            .map_err(|error| invalid(error.to_string()))
    };
    let mut segments = parsed
        .path_segments()
        .into_iter()
        .flatten()
        .filter(|segment| !segment.is_empty());
    let master = decode(
        segments
            .next()
            .ok_or_else(|| invalid("no master name after the Sentinels".into()))?,
    )?;
    let db = segments
        .next()
        .map(|db| {
            db.parse::<i64>()
                .map_err(|_| invalid(format!("{db:?} is not a database number")))
        })
        .transpose()?;
    if segments.next().is_some() {
        return Err(invalid(
            "the path is /master_name or /master_name/db".into(),
        ));
    }
    let mut builder = SentinelClientBuilder::new(sentinels, &master, SentinelServerType::Master)?;
    if !parsed.username().is_empty() {
        builder = builder.set_client_to_redis_username(decode(parsed.username())?);
    }
    if let Some(password) = parsed.password() {
        builder = builder.set_client_to_redis_password(decode(password)?);
    }
    if let Some(db) = db {
        builder = builder.set_client_to_redis_db(db);
    }
    for (name, value) in parsed.query_pairs() {
        builder = match name.as_ref() {
            "sentinel_username" => builder.set_client_to_sentinel_username(value.as_ref()),
            "sentinel_password" => builder.set_client_to_sentinel_password(value.as_ref()),
            other => {
                return Err(invalid(format!(
                    "unknown parameter {other:?} (sentinel_username, sentinel_password)"
                )));
            }
        };
    }
    builder.build()
}

fn sentinel_address(host_port: &str) -> RedisResult<ConnectionAddr> {
    let host_port = host_port.trim();
    let (host, port) = match host_port.rsplit_once(':') {
        // An IPv6 address without a port has colons but ends in `]`.
        Some((host, port)) if !port.ends_with(']') => (
            host,
            port.parse::<u16>()
                .map_err(|_| invalid(format!("{host_port:?}: {port:?} is not a port")))?,
        ),
        _ => (host_port, DEFAULT_SENTINEL_PORT),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(invalid(format!("{host_port:?} names no Sentinel host")));
    }
    Ok(ConnectionAddr::Tcp(host.to_owned(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sentinel_url_names_its_sentinels_master_and_credentials() {
        assert!(sentinel_client("a:26379,b:26380,[::1]:26381,c/mymaster").is_ok());
        assert!(sentinel_client("user:p%40ss@a,b/mymaster/2?sentinel_password=s%26cret").is_ok());
        assert_eq!(
            sentinel_address("[::1]").unwrap(),
            ConnectionAddr::Tcp("::1".into(), DEFAULT_SENTINEL_PORT)
        );
        assert_eq!(
            sentinel_address("10.0.0.1:26380").unwrap(),
            ConnectionAddr::Tcp("10.0.0.1".into(), 26380)
        );
        for bad in [
            "a:26379,b:26379",
            "a:26379/",
            "a:port/mymaster",
            ",b/mymaster",
            "a/mymaster/notadb",
            "a/mymaster/0/extra",
            "a/mymaster?password=x",
        ] {
            let error = sentinel_client(bad)
                .err()
                .unwrap_or_else(|| panic!("{bad} accepted"));
            assert_eq!(
                error.kind(),
                ErrorKind::InvalidClientConfig,
                "{bad}: {error}"
            );
        }
    }
}
