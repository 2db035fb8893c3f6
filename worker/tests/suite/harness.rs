//! A runner on a fresh database per test, and jobs submitted to it past
//! the API, as the API would submit them.

use clap::Parser;
use reports::Registry;
use serde_json::Value;
use shared::{
    ids::new_job_id,
    model::{Job, JobStatus, Priority},
    notify::Signals,
    settings::Settings,
    time::now_ms,
};
use store::{NewJob, Publishing, Store, Submission};
use testkit::TestEnv;
use worker::Runner;

#[derive(Parser)]
struct SettingsOnly {
    #[command(flatten)]
    settings: Settings,
}

/// The settings of a runner on `env`'s database: the diagnostic kinds
/// registered, filing endpoints on loopback allowed, and `settings` (as
/// command-line arguments) on top.
pub fn settings(env: &TestEnv, settings: &[&str]) -> Settings {
    let mut args = vec![
        "test",
        "--database-url",
        &env.database_url,
        "--enable-diagnostic-kinds",
        "--webhook-allow-private",
        "--webhook-timeout",
        "5s",
    ];
    if let Some(keys) = &env.master_keys {
        args.extend_from_slice(&["--master-keys", keys]);
    }
    args.extend_from_slice(settings);
    SettingsOnly::parse_from(args).settings
}

/// A runner on `env`'s fresh, migrated database, with [`settings`].
pub async fn runner_with(env: &TestEnv, extra: &[&str]) -> Runner {
    let settings = settings(env, extra);
    let store = Store::open(&settings).await.expect("store");
    store.migrate().await.expect("migrate");
    Runner::new(store, Signals::default(), &settings, "test-worker".into())
}

/// A runner whose retries wait `retry_delay`.
pub async fn runner(env: &TestEnv, retry_delay: &str) -> Runner {
    runner_with(
        env,
        &[
            "--retry-base-delay",
            retry_delay,
            "--retry-max-delay",
            retry_delay,
        ],
    )
    .await
}

/// A job as the API submits it: the kind's attempt limit, run at once.
pub fn new_job(tenant_id: &str, kind: &str, params: &Value) -> NewJob {
    NewJob {
        job_id: new_job_id(),
        tenant_id: tenant_id.into(),
        kind: kind.into(),
        params: params.to_string(),
        max_attempts: Registry::new(true)
            .get(kind)
            .map_or(5, |kind| kind.max_attempts()),
        priority: Priority::default(),
        external: false,
    }
}

/// Submits `job`, due `due_ago_ms` ago; returns its id.
pub async fn submit_due_since(store: &Store, job: NewJob, due_ago_ms: i64) -> String {
    let submission = Submission::at_once(job, now_ms() - due_ago_ms);
    store
        .submit_batch(std::slice::from_ref(&submission), Publishing::Relay)
        .await
        .expect("submit");
    submission.job.job_id
}

/// Submits a job of `tenant-a` due now; returns its id.
pub async fn submit(store: &Store, kind: &str, params: Value) -> String {
    submit_due_since(store, new_job("tenant-a", kind, &params), 0).await
}

pub async fn job(store: &Store, job_id: &str) -> Job {
    store
        .get_job_unscoped(job_id)
        .await
        .expect("read")
        .expect("the job")
}

pub async fn status_and_attempts(store: &Store, job_id: &str) -> (JobStatus, i64) {
    let job = job(store, job_id).await;
    (job.status, job.attempts)
}

/// The job's error, once it has one, as `(type, message)`.
pub async fn error_of(store: &Store, job_id: &str) -> Option<(String, String)> {
    let job = job(store, job_id).await;
    job.error_type.zip(job.error_message)
}

/// Declares each `async fn name(backend: Backend)` as a test on the
/// embedded SQLite default and one on Postgres.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(testkit::Backend::Sqlite).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(testkit::Backend::PgRedis).await;
                }
            )*
        }
    };
}
