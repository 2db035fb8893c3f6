//! graphile-worker (`bench/peers/graphile-worker/`): a job queue on
//! Postgres alone, used through its library as its users do, with no HTTP
//! in front: a producers process whose concurrent loops each await one
//! `addJob` at a time, and worker processes running the jobs. Started on a
//! database of its own (`testkit::TestEnv`, the one Postgres Receipt's
//! production shape uses), stopped and removed at the end.

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Result, bail, ensure};
use sqlx::Row;
use testkit::{Backend, Process, Stderr, TestEnv};

use crate::{Args, CpuMeter, Run, Watched, take_statistics, watcher_pool, workspace_dir};

/// The peer's label in results.
pub const LABEL: &str = "graphile-worker";

pub struct Peer {
    dir: PathBuf,
    workers: Vec<Process>,
    /// Dropped last: the processes stop before their database goes.
    env: TestEnv,
}

/// Where the peer's files are: beside this workspace's target directory.
fn peer_dir() -> Result<PathBuf> {
    let dir = workspace_dir()?.join("bench/peers/graphile-worker");
    if !dir.join("node_modules/graphile-worker").is_dir() {
        bail!(
            "{} has no node_modules: scripts/bench installs them (npm ci)",
            dir.display()
        );
    }
    Ok(dir)
}

impl Peer {
    /// Its `--workers` worker processes of `--concurrency` slots on a new
    /// database, the first of which installs graphile-worker's schema
    /// there, warmed up like Receipt's services (`--warm-up`).
    pub async fn start(args: &Args) -> Result<Self> {
        let dir = peer_dir()?;
        let env = TestEnv::new(Backend::PgRedis).await.without_redis();
        let worker_env = vec![
            ("DATABASE_URL".to_owned(), env.database_url.clone()),
            (
                "WORKER_CONCURRENCY".to_owned(),
                args.concurrency.to_string(),
            ),
        ];
        let mut workers = Vec::new();
        // One at a time: each process installs the schema if it is not
        // there yet.
        for _ in 0..args.workers.max(1) {
            let worker = Process::spawn(&dir.join("worker.mjs"), &worker_env, Stderr::Echo);
            worker.wait_for_line("worker ready");
            workers.push(worker);
        }
        let peer = Peer { dir, workers, env };
        if args.warm_up > 0 {
            let producers = args.clients.unwrap_or(args.concurrency);
            peer.end_to_end(args.warm_up, producers).await?;
            take_statistics(&peer.env.database_url).await?;
            println!("# warmed up with {} jobs", args.warm_up);
        }
        Ok(peer)
    }

    /// `jobs` jobs added by `producers` concurrent loops, from the first
    /// `addJob` until graphile-worker's table holds none of them (it
    /// deletes a job when it succeeds, and keeps one that failed for its
    /// retry): jobs/s, and CPU per job of the producers, the workers and
    /// the Postgres backends serving the database.
    pub async fn end_to_end(&self, jobs: usize, producers: usize) -> Result<Run> {
        let pool = watcher_pool(&self.env.database_url).await?;
        let producer = Process::spawn(
            &self.dir.join("producers.mjs"),
            &[
                ("DATABASE_URL".to_owned(), self.env.database_url.clone()),
                ("PRODUCERS".to_owned(), producers.to_string()),
                ("JOBS".to_owned(), jobs.to_string()),
            ],
            Stderr::Echo,
        );
        producer.wait_for_line("producers ready");
        let mut processes = vec![("producers", producer.pid())];
        processes.extend(self.workers.iter().map(|w| ("worker", w.pid())));
        let watched = Watched {
            pg_database: self.env.database_name(),
            processes,
            redis: false,
        };
        let meter = CpuMeter::start(&watched, &pool).await?;
        let started = Instant::now();
        producer.signal("-USR1");
        let added = format!("added {jobs}");
        // Not one job can be the last to finish before every job is added;
        // from then on, count those left, every 20 ms as Receipt's e2e does.
        let elapsed = loop {
            if let Some(status) = producer.exited() {
                bail!("the producers exited ({status}) before adding {jobs} jobs");
            }
            if producer.count_lines_containing(&added) > 0 {
                let left: i64 = sqlx::query("SELECT COUNT(*) AS n FROM graphile_worker.jobs")
                    .fetch_one(&pool)
                    .await?
                    .try_get("n")?;
                if left == 0 {
                    break started.elapsed();
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        ensure!(
            self.workers.iter().all(|w| w.exited().is_none()),
            "a worker exited during the run"
        );
        let cpu_ms_per_job = meter.per_job(&pool, jobs).await?;
        pool.close().await;
        Ok(Run {
            jobs_per_s: jobs as f64 / elapsed.as_secs_f64(),
            cpu_ms_per_job,
        })
    }

    /// Stops its processes, then drops its database.
    pub fn stop(self) {
        drop(self);
    }
}
