//! The usual stack (`bench/peers/usual-stack/`): what teams build by hand
//! for "accept a job, run it later" (Fastify, node-postgres and BullMQ),
//! with Receipt's HTTP contract for `sleep` jobs, so that the same client
//! and the same scenarios drive it. Started on a database and a Redis key
//! prefix of its own (`testkit::TestEnv`), stopped and removed at the end.

use std::path::PathBuf;

use anyhow::{Result, bail};
use receipt_client::Client;
use testkit::{Api, Backend, Process, REDIS_URL, Stderr, TestEnv};

use crate::{Args, KEY, QUIET_KEY, Shape, Target, Watched, bench_client, warm_up, workspace_dir};

/// The peer's label in results.
pub const LABEL: &str = "usual-stack";

pub struct Peer {
    api: Api,
    client: Client,
    workers: Vec<Process>,
    slots: usize,
    /// Dropped last: the processes stop before their database goes.
    env: TestEnv,
}

/// Where the peer's files are: beside this workspace's target directory.
fn peer_dir() -> Result<PathBuf> {
    let dir = workspace_dir()?.join("bench/peers/usual-stack");
    if !dir.join("node_modules/bullmq").is_dir() {
        bail!(
            "{} has no node_modules: scripts/bench installs them (npm ci)",
            dir.display()
        );
    }
    Ok(dir)
}

impl Peer {
    /// Its api and `--workers` worker processes of `--concurrency` slots,
    /// warmed up like Receipt's services (`--warm-up`).
    pub async fn start(args: &Args) -> Result<Self> {
        let dir = peer_dir()?;
        let env = TestEnv::new(Backend::PgRedis).await;
        let keys = format!("bench:{KEY},quiet:{QUIET_KEY}");
        let base: Vec<(String, String)> = [
            ("DATABASE_URL", env.database_url.as_str()),
            ("REDIS_URL", REDIS_URL),
            ("QUEUE_PREFIX", env.queue_name.as_str()),
            ("API_KEYS", keys.as_str()),
            ("BIND_ADDR", "127.0.0.1:0"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        let api = Api::once_listening(Process::spawn(&dir.join("api.mjs"), &base, Stderr::Echo));
        let concurrency = args.concurrency.to_string();
        let mut worker_env = base.clone();
        worker_env.extend([
            ("WORKER_CONCURRENCY".to_owned(), concurrency.clone()),
            // A connection for each slot: a slot never waits for the pool.
            ("PG_POOL_SIZE".to_owned(), concurrency),
        ]);
        let workers: Vec<Process> = (0..args.workers.max(1))
            .map(|_| Process::spawn(&dir.join("worker.mjs"), &worker_env, Stderr::Echo))
            .collect();
        for worker in &workers {
            worker.wait_for_line("worker ready");
        }
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(256)
            .build()?;
        let client = bench_client(&api.base, KEY, http)?;
        let peer = Peer {
            slots: args.concurrency * workers.len(),
            api,
            client,
            workers,
            env,
        };
        if args.warm_up > 0 {
            warm_up(&peer.target(), args.warm_up, args.concurrency).await?;
        }
        Ok(peer)
    }

    /// The peer as the bench tenant drives it.
    pub fn target(&self) -> Target<'_> {
        let mut processes = vec![("api", self.api.pid())];
        processes.extend(self.workers.iter().map(|w| ("worker", w.pid())));
        Target {
            label: LABEL.to_owned(),
            client: &self.client,
            tenant: "bench",
            database_url: &self.env.database_url,
            dialect: Shape::Production,
            watched: Watched {
                pg_database: self.env.database_name(),
                processes,
                redis: true,
            },
            slots: self.slots,
        }
    }

    /// Stops its processes, then drops its database and Redis keys.
    pub fn stop(self) {
        drop(self);
    }
}
