//! `outbox` is a queue: a few rows one minute, a backlog of thousands the
//! next. A statement prepared while it was small keeps the plan Postgres
//! made then (a sequential scan) and would read the whole backlog, dead
//! rows and all, on every job; the statements that touch it on every job
//! are planned for the rows it holds when they run (the relay's are not
//! prepared), or can only be served by key (the claim's delete names its
//! ids in the outbox's collation and runs where sequential scans are off;
//! under caps it runs as dynamic SQL inside `claim_jobs`). The
//! metrics' sample of the queue's age reads the first entry of an index
//! per kind, whatever the backlog. A claim finds its jobs by key, even
//! when statistics taken while few jobs were queued make that index look
//! like the cheaper way to them, and so does a success. The statements
//! every job runs keep one generic plan per connection, made perhaps while
//! the tables were small. A claim of due jobs (the job rows as the queue)
//! finds them by key, whatever was queued when a plan for it could have
//! been cached.

use std::time::Duration;

use crate::common::{Backend, StoreOf, TestEnv, wait};

const BACKLOG: i64 = 5_000;

/// `count` queued jobs named `{prefix}{n}`, each with its outbox row.
fn queued_jobs(prefix: &str, count: i64) -> String {
    format!(
        "INSERT INTO jobs (job_id, tenant_id, kind, params, status, max_attempts, created_at,
                           run_after)
         SELECT '{prefix}' || lpad(i::text, 6, '0'), 'tenant-a', 'sleep', '{{\"ms\":0}}',
                'QUEUED', 3, 'epoch', 'epoch'
         FROM generate_series(1, {count}) AS s(i);
         INSERT INTO outbox (job_id, publish_at)
         SELECT '{prefix}' || lpad(i::text, 6, '0'), 'epoch'
         FROM generate_series(1, {count}) AS s(i);"
    )
}

/// The statistic `read` once the statistic `counted` reaches `at_least`:
/// a backend reports all its counts together, some time after its
/// transaction, so a count its last statement made shows when the rest of
/// that statement's counts are in.
async fn statistic_after(env: &TestEnv, counted: &str, at_least: i64, read: &str) -> i64 {
    wait::until_ok(
        &format!("{counted} to reach {at_least}"),
        Duration::from_secs(20),
        async || {
            let seen = env.count(counted).await;
            if seen >= at_least { Ok(()) } else { Err(seen) }
        },
    )
    .await;
    env.count(read).await
}

const JOBS_UPDATED: &str = "SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'jobs'";
const QUEUED_INDEX_SCANS: &str =
    "SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = 'jobs_queued_by_kind'";
const QUEUED_INDEX_READ: &str =
    "SELECT idx_tup_read FROM pg_stat_user_indexes WHERE indexrelname = 'jobs_queued_by_kind'";

/// Rows of `outbox` read by sequential scans so far, once the statistics
/// count at least `deleted` deletions from it.
async fn outbox_reads(env: &TestEnv, deleted: i64) -> i64 {
    statistic_after(
        env,
        "SELECT n_tup_del FROM pg_stat_user_tables WHERE relname = 'outbox'",
        deleted,
        "SELECT seq_tup_read FROM pg_stat_user_tables WHERE relname = 'outbox'",
    )
    .await
}

#[tokio::test]
async fn a_claim_behind_a_backlog_reads_the_outbox_by_key() {
    let env = TestEnv::new(Backend::PgRedis).await;
    let store = env.store().await;
    store.migrate().await.expect("migrate");
    // A young deployment: a few jobs, and statistics taken while the outbox
    // was small, as autovacuum takes them between bursts.
    env.execute_sql(&format!(
        "{} ANALYZE outbox; ANALYZE jobs;",
        queued_jobs("early", 12)
    ))
    .await;
    let lease_until = shared::time::now_ms() + 60_000;
    // More claims than Postgres makes custom plans for before it settles
    // on a generic one (five).
    for n in 1..=12 {
        let claimed = store
            .claim_attempts(
                &[format!("early{n:06}")],
                "worker-1",
                lease_until,
                &Default::default(),
            )
            .await
            .expect("claim");
        assert!(claimed[0].is_some(), "early job {n} was not claimed");
    }
    env.execute_sql(&queued_jobs("backlog", BACKLOG)).await;
    let before = outbox_reads(&env, 12).await;

    let claimed = store
        .claim_attempts(
            &["backlog000001".to_owned()],
            "worker-1",
            lease_until,
            &Default::default(),
        )
        .await
        .expect("claim");
    assert!(
        claimed[0].is_some(),
        "the backlog's first job was not claimed"
    );

    let read = outbox_reads(&env, 13).await - before;
    assert!(
        read < BACKLOG,
        "one claim read {read} outbox rows by sequential scan, behind a backlog of {BACKLOG}"
    );
    assert_eq!(
        env.count("SELECT COUNT(*) FROM outbox").await,
        BACKLOG - 1,
        "the claim deleted its job's outbox row and no other"
    );
    store.close().await;
}

#[tokio::test]
async fn the_queue_age_gauge_reads_one_entry_per_kind_behind_a_backlog() {
    let env = TestEnv::new(Backend::PgRedis).await;
    let store = env.store().await;
    store.migrate().await.expect("migrate");
    env.execute_sql(&format!(
        "{} ANALYZE outbox; ANALYZE jobs;",
        queued_jobs("backlog", BACKLOG)
    ))
    .await;

    let sample = store.sample_queue(&["sleep"], 0).await.expect("sample");

    let sleep = &sample.by_kind[0];
    assert_eq!((sleep.kind.as_str(), sleep.queued), ("sleep", BACKLOG));
    assert!(
        sleep.oldest_queued_seconds > 1e9,
        "due since the epoch: {sample:?}"
    );
    let read = statistic_after(&env, QUEUED_INDEX_SCANS, 1, QUEUED_INDEX_READ).await;
    assert!(
        read <= 2,
        "the age of the oldest queued job read {read} index entries, behind a backlog of {BACKLOG}"
    );
    store.close().await;
}

#[tokio::test]
async fn a_claim_behind_a_backlog_reads_jobs_by_key() {
    let env = TestEnv::new(Backend::PgRedis).await;
    let store = env.store().await;
    store.migrate().await.expect("migrate");
    // No statistics yet, as before autovacuum first analyzes the table:
    // Postgres then guesses few queued jobs, and the partial index on them
    // looks cheaper than the primary key.
    env.execute_sql(&queued_jobs("early", 48)).await;
    let lease_until = shared::time::now_ms() + 60_000;
    // More claims than Postgres makes custom plans for before it settles
    // on a generic one (five), of a few jobs each, as a busy pool's are.
    for batch in 0..12 {
        let ids: Vec<String> = (1..=4)
            .map(|n| format!("early{:06}", batch * 4 + n))
            .collect();
        let claimed = store
            .claim_attempts(&ids, "worker-1", lease_until, &Default::default())
            .await
            .expect("claim");
        assert!(
            claimed.iter().all(Option::is_some),
            "early jobs {ids:?} were not all claimed"
        );
    }
    env.execute_sql(&queued_jobs("backlog", BACKLOG)).await;
    let before = statistic_after(&env, JOBS_UPDATED, 48, QUEUED_INDEX_READ).await;

    let claimed = store
        .claim_attempts(
            &(1..=4)
                .map(|n| format!("backlog{n:06}"))
                .collect::<Vec<_>>(),
            "worker-1",
            lease_until,
            &Default::default(),
        )
        .await
        .expect("claim");
    assert!(
        claimed.iter().all(Option::is_some),
        "the backlog's first jobs were not claimed"
    );

    let read = statistic_after(&env, JOBS_UPDATED, 52, QUEUED_INDEX_READ).await - before;
    assert!(
        read < 100,
        "one claim read {read} entries of jobs_queued_by_kind, behind a backlog of {BACKLOG}"
    );
    store.close().await;
}

/// `count` queued jobs named `{prefix}{n}` of tenant `tenant`, due and
/// ranked at the epoch, without outbox rows: the job rows as the queue.
fn claimable_jobs(tenant: &str, prefix: &str, count: i64) -> String {
    format!(
        "INSERT INTO jobs (job_id, tenant_id, kind, params, status, max_attempts, created_at,
                           run_after, rank_at)
         SELECT '{prefix}' || lpad(i::text, 6, '0'), '{tenant}', 'sleep', '{{\"ms\":0}}',
                'QUEUED', 3, 'epoch', 'epoch', 'epoch'
         FROM generate_series(1, {count}) AS s(i);"
    )
}

/// Claims before the backlog: enough for every connection of the store's
/// pool to run the statement more often than Postgres makes custom plans
/// for before it settles on a generic one (five).
const EARLY_CLAIMS: i64 = 40;

const JOBS_SCANNED: &str = "SELECT seq_tup_read FROM pg_stat_user_tables WHERE relname = 'jobs'";
const JOBS_INDEX_READ: &str =
    "SELECT sum(idx_tup_read)::bigint FROM pg_stat_user_indexes WHERE relname = 'jobs'";

#[tokio::test]
async fn a_claim_of_due_jobs_behind_a_backlog_reads_jobs_by_key() {
    let env = TestEnv::new(Backend::PgRedis).await;
    let store = env.store().await;
    store.migrate().await.expect("migrate");
    // Statistics taken while few jobs were queued, as autovacuum takes
    // them between bursts; a few tenants, as a busy service has.
    env.execute_sql(&format!(
        "{} {} ANALYZE jobs;",
        claimable_jobs("tenant-a", "early-a", EARLY_CLAIMS * 2),
        claimable_jobs("tenant-b", "early-b", EARLY_CLAIMS * 2),
    ))
    .await;
    let caps = shared::settings::Caps::default();
    let claim = async |after: &str| {
        store
            .claim_due(
                "worker-1",
                4,
                after,
                shared::time::now_ms() + 600_000,
                &caps,
            )
            .await
            .expect("claim")
    };
    // Claims of a few jobs each, as a busy pool's are.
    let mut after = String::new();
    for _ in 0..EARLY_CLAIMS {
        let claimed = claim(&after).await;
        assert_eq!(claimed.len(), 4, "an early claim took {claimed:?}");
        let tenants: std::collections::BTreeSet<&str> =
            claimed.iter().map(|c| c.tenant_id.as_str()).collect();
        assert_eq!(
            tenants.len(),
            2,
            "each claim serves both tenants: {claimed:?}"
        );
        after = store::claim_cursor(&after, &claimed).expect("a cursor");
    }
    env.execute_sql(&claimable_jobs("tenant-c", "backlog", BACKLOG))
        .await;
    let before = statistic_after(&env, JOBS_UPDATED, EARLY_CLAIMS * 4, JOBS_SCANNED).await;
    let index_before = statistic_after(&env, JOBS_UPDATED, EARLY_CLAIMS * 4, JOBS_INDEX_READ).await;

    let taken = claim(&after).await;

    assert_eq!(
        taken.len(),
        4,
        "the claim behind the backlog took {taken:?}"
    );
    assert!(
        taken.iter().any(|c| c.tenant_id == "tenant-c"),
        "the backlog's tenant takes its turn: {taken:?}"
    );
    let read =
        statistic_after(&env, JOBS_UPDATED, EARLY_CLAIMS * 4 + 4, JOBS_SCANNED).await - before;
    assert!(
        read < BACKLOG,
        "one claim read {read} jobs by sequential scan, behind a backlog of {BACKLOG}"
    );
    // Each tenant's probe and share are a few entries of `jobs_claimable`,
    // whatever waits behind them.
    let index_read = statistic_after(&env, JOBS_UPDATED, EARLY_CLAIMS * 4 + 4, JOBS_INDEX_READ)
        .await
        - index_before;
    assert!(
        index_read < BACKLOG / 10,
        "one claim read {index_read} index entries of jobs, behind a backlog of {BACKLOG}"
    );
    store.close().await;
}

/// `count` running jobs named `{prefix}{n}`, in their first attempt.
fn running_jobs(prefix: &str, count: i64) -> String {
    format!(
        "INSERT INTO jobs (job_id, tenant_id, kind, params, status, attempts, max_attempts,
                           created_at, run_after, started_at, lease_expires_at, worker_id)
         SELECT '{prefix}' || lpad(i::text, 6, '0'), 'tenant-a', 'sleep', '{{\"ms\":0}}',
                'RUNNING', 1, 3, 'epoch', 'epoch', 'epoch', 'infinity', 'worker-1'
         FROM generate_series(1, {count}) AS s(i);"
    )
}

/// Rows of `jobs` read other than through its primary key so far (by
/// sequential scans, and through its other indexes).
const JOBS_READ_NOT_BY_KEY: &str = "SELECT
    (SELECT seq_tup_read FROM pg_stat_user_tables WHERE relname = 'jobs')
    + (SELECT COALESCE(SUM(idx_tup_read), 0)::bigint FROM pg_stat_user_indexes
       WHERE relname = 'jobs' AND indexrelname <> 'jobs_pkey')";

/// Successes of `ids`' first attempts, as a worker's group commit writes them.
async fn succeed_first_attempts(store: &store::Store, ids: &[String]) {
    let writes: Vec<store::SuccessWrite> = ids
        .iter()
        .map(|id| {
            store::SuccessWrite::new(
                id.as_str(),
                1,
                shared::model::ResultBody::Document("{}".into()),
            )
        })
        .collect();
    let applied = store.finish_succeeded(&writes).await.expect("succeed");
    assert!(
        applied.iter().all(|applied| *applied),
        "{ids:?}: {applied:?}"
    );
}

#[tokio::test]
async fn a_success_behind_a_backlog_reads_jobs_by_key() {
    let env = TestEnv::new(Backend::PgRedis).await;
    let store = env.store().await;
    store.migrate().await.expect("migrate");
    // No statistics yet, as before autovacuum first analyzes the table:
    // Postgres then guesses few running jobs, and an index on status looks
    // as cheap a way to them as the primary key.
    env.execute_sql(&running_jobs("early", 48)).await;
    for batch in 0..12 {
        let ids: Vec<String> = (1..=4)
            .map(|n| format!("early{:06}", batch * 4 + n))
            .collect();
        succeed_first_attempts(&store, &ids).await;
    }
    env.execute_sql(&running_jobs("backlog", BACKLOG)).await;
    let before = statistic_after(&env, JOBS_UPDATED, 48, JOBS_READ_NOT_BY_KEY).await;

    succeed_first_attempts(
        &store,
        &(1..=4)
            .map(|n| format!("backlog{n:06}"))
            .collect::<Vec<_>>(),
    )
    .await;

    let read = statistic_after(&env, JOBS_UPDATED, 52, JOBS_READ_NOT_BY_KEY).await - before;
    assert!(
        read < 100,
        "one group commit of successes read {read} jobs other than by key, behind {BACKLOG} running"
    );
    store.close().await;
}

/// The statement every job's submit, claim and success run, each planned
/// once per connection: planned afresh for each call, the plan costs about
/// what the statement does.
#[tokio::test]
async fn the_statements_every_job_runs_are_planned_once() {
    let env = TestEnv::new(Backend::PgRedis).await;
    let store = env.store().await;
    store.migrate().await.expect("migrate");
    let lease_until = shared::time::now_ms() + 60_000;
    // One at a time, so that one connection of the pool runs them all; more
    // calls than Postgres makes custom plans for before it weighs a generic
    // one (five).
    for _ in 0..8 {
        let job = store
            .submit_job(&store::NewJob {
                job_id: shared::ids::new_job_id(),
                tenant_id: "tenant-a".into(),
                kind: "sleep".into(),
                params: r#"{"ms":0}"#.into(),
                max_attempts: 3,
                priority: Default::default(),
                external: false,
            })
            .await
            .expect("submit");
        let claim = store
            .claim_attempt(&job.job_id, "worker-1", lease_until)
            .await
            .expect("claim")
            .expect("claimed");
        succeed_first_attempts(&store, &[claim.job_id]).await;
    }

    let plans = store.per_job_plans().await.expect("plans");
    for (statement, calls) in [("WITH submitted AS", 8), ("WITH claimed AS", 16)] {
        let (_, generic, custom) = plans
            .iter()
            .find(|(text, _, _)| text.trim_start().starts_with(statement))
            .unwrap_or_else(|| panic!("no statement {statement}... among {plans:?}"));
        assert_eq!(
            (*generic, *custom),
            (calls, 0),
            "{statement}...: (generic, custom) plans"
        );
    }
    store.close().await;
}
