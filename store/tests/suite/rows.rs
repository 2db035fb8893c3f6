//! Rows the suite writes and reads past the store, in each database's own
//! SQL and types: jobs in a given status (no store method of the areas
//! tested here makes one), and the tables read back to check what a store
//! method did.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use sqlx::{AssertSqlSafe, Connection, Executor, PgConnection, SqliteConnection};
use store::Dialect;

use crate::harness::TestDb;

/// A connection of the test's own to its database.
pub enum Raw {
    Postgres(PgConnection),
    Sqlite(SqliteConnection),
}

pub async fn raw(db: &TestDb) -> Raw {
    match db.store.dialect() {
        Dialect::Postgres => Raw::Postgres(
            PgConnection::connect(db.store.url())
                .await
                .expect("connect"),
        ),
        Dialect::Sqlite => {
            let mut conn = SqliteConnection::connect(db.store.url())
                .await
                .expect("open");
            conn.execute("PRAGMA busy_timeout = 10000")
                .await
                .expect("busy timeout");
            conn.execute("PRAGMA foreign_keys = ON")
                .await
                .expect("foreign keys");
            Raw::Sqlite(conn)
        }
    }
}

/// A job row as a test wants it.
#[derive(Debug, Clone)]
pub struct TestJob {
    pub job_id: String,
    pub tenant_id: String,
    pub kind: String,
    pub status: &'static str,
    pub created_at: i64,
    pub finished_at: Option<i64>,
}

impl TestJob {
    /// A queued job of `tenant_id` and kind `sleep`, made now.
    pub fn queued(tenant_id: &str) -> Self {
        TestJob {
            job_id: shared::ids::new_job_id(),
            tenant_id: tenant_id.to_owned(),
            kind: "sleep".to_owned(),
            status: "QUEUED",
            created_at: shared::time::now_ms(),
            finished_at: None,
        }
    }

    /// The same job, final in `status` at `finished_at`.
    pub fn finished(mut self, status: &'static str, finished_at: i64) -> Self {
        self.status = status;
        self.finished_at = Some(finished_at);
        self
    }

    pub fn kind(mut self, kind: &str) -> Self {
        self.kind = kind.to_owned();
        self
    }
}

pub async fn insert_job(db: &TestDb, job: &TestJob) {
    match raw(db).await {
        Raw::Postgres(mut conn) => {
            sqlx::query(
                "INSERT INTO jobs (job_id, tenant_id, kind, params, status, max_attempts,
                                   created_at, run_after, finished_at)
                 VALUES ($1, $2, $3, '{}', $4, 5, to_timestamp($5::bigint / 1000.0),
                         to_timestamp($5::bigint / 1000.0), to_timestamp($6::bigint / 1000.0))",
            )
            .bind(&job.job_id)
            .bind(&job.tenant_id)
            .bind(&job.kind)
            .bind(job.status)
            .bind(job.created_at)
            .bind(job.finished_at)
            .execute(&mut conn)
            .await
            .expect("insert a job");
        }
        Raw::Sqlite(mut conn) => {
            sqlx::query(
                "INSERT INTO jobs (job_id, tenant_id, kind, params, status, max_attempts,
                                   created_at, run_after, finished_at)
                 VALUES ($1, $2, $3, '{}', $4, 5, $5, $5, $6)",
            )
            .bind(&job.job_id)
            .bind(&job.tenant_id)
            .bind(&job.kind)
            .bind(job.status)
            .bind(job.created_at)
            .bind(job.finished_at)
            .execute(&mut conn)
            .await
            .expect("insert a job");
        }
    }
}

/// Moves a job to `status`, finished at `finished_at` (or not finished).
pub async fn set_status(db: &TestDb, job_id: &str, status: &str, finished_at: Option<i64>) {
    match raw(db).await {
        Raw::Postgres(mut conn) => {
            sqlx::query(
                "UPDATE jobs SET status = $2, finished_at = to_timestamp($3::bigint / 1000.0)
                 WHERE job_id = $1",
            )
            .bind(job_id)
            .bind(status)
            .bind(finished_at)
            .execute(&mut conn)
            .await
            .expect("update a job");
        }
        Raw::Sqlite(mut conn) => {
            sqlx::query("UPDATE jobs SET status = $2, finished_at = $3 WHERE job_id = $1")
                .bind(job_id)
                .bind(status)
                .bind(finished_at)
                .execute(&mut conn)
                .await
                .expect("update a job");
        }
    }
}

/// Runs a statement whose text suits both databases.
pub async fn execute(db: &TestDb, statement: &str) {
    let statement = AssertSqlSafe(statement.to_owned());
    match raw(db).await {
        Raw::Postgres(mut conn) => conn.execute(statement).await.map(drop),
        Raw::Sqlite(mut conn) => conn.execute(statement).await.map(drop),
    }
    .expect("a statement");
}

/// The one integer a query (whose text suits both databases) answers.
pub async fn scalar(db: &TestDb, query: &str) -> i64 {
    let query = AssertSqlSafe(query.to_owned());
    match raw(db).await {
        Raw::Postgres(mut conn) => sqlx::query_scalar(query).fetch_one(&mut conn).await,
        Raw::Sqlite(mut conn) => sqlx::query_scalar(query).fetch_one(&mut conn).await,
    }
    .expect("a count")
}

/// The one text column a query (whose text suits both databases)
/// answers, row by row.
pub async fn strings(db: &TestDb, query: &str) -> Vec<String> {
    let query = AssertSqlSafe(query.to_owned());
    match raw(db).await {
        Raw::Postgres(mut conn) => sqlx::query_scalar(query).fetch_all(&mut conn).await,
        Raw::Sqlite(mut conn) => sqlx::query_scalar(query).fetch_all(&mut conn).await,
    }
    .expect("rows")
}

/// The tenant's jobs counted by (kind, status), from the jobs themselves.
pub async fn jobs_by_kind_and_status(
    db: &TestDb,
    tenant_id: &str,
) -> BTreeMap<(String, String), i64> {
    let query = "SELECT kind, status, COUNT(*) FROM jobs WHERE tenant_id = $1
                 GROUP BY kind, status";
    let rows: Vec<(String, String, i64)> = match raw(db).await {
        Raw::Postgres(mut conn) => {
            sqlx::query_as(query)
                .bind(tenant_id)
                .fetch_all(&mut conn)
                .await
        }
        Raw::Sqlite(mut conn) => {
            sqlx::query_as(query)
                .bind(tenant_id)
                .fetch_all(&mut conn)
                .await
        }
    }
    .expect("counts");
    rows.into_iter()
        .map(|(kind, status, n)| ((kind, status), n))
        .collect()
}

/// The tenant's final jobs counted by (minute's start in unix ms, status),
/// from the jobs themselves.
pub async fn finished_by_minute(db: &TestDb, tenant_id: &str) -> BTreeMap<(i64, String), i64> {
    let rows: Vec<(i64, String, i64)> = match raw(db).await {
        Raw::Postgres(mut conn) => {
            sqlx::query_as(
                "SELECT CAST(EXTRACT(EPOCH FROM date_trunc('minute', finished_at)) * 1000
                             AS BIGINT),
                        status, COUNT(*)
                 FROM jobs WHERE tenant_id = $1
                   AND status IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
                   AND finished_at IS NOT NULL
                 GROUP BY 1, 2",
            )
            .bind(tenant_id)
            .fetch_all(&mut conn)
            .await
        }
        Raw::Sqlite(mut conn) => {
            sqlx::query_as(
                "SELECT finished_at / 60000 * 60000, status, COUNT(*)
                 FROM jobs WHERE tenant_id = $1
                   AND status IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
                   AND finished_at IS NOT NULL
                 GROUP BY 1, 2",
            )
            .bind(tenant_id)
            .fetch_all(&mut conn)
            .await
        }
    }
    .expect("counts");
    rows.into_iter()
        .map(|(minute, status, n)| ((minute, status), n))
        .collect()
}

/// Waits (up to 30 s) until `n` sessions of the test's database wait for
/// a lock.
pub async fn wait_for_lock_waits(db: &TestDb, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let waiting = scalar(
            db,
            "SELECT COUNT(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .await;
        if waiting >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{waiting} sessions wait for a lock, not {n}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
