//! A fresh, migrated database of each kind per test, dropped at the end.

use sqlx::{Connection, Executor, PgConnection};
use store::Store;

const POSTGRES_ADMIN: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// A migrated database of its own, removed when the test ends.
pub struct TestDb {
    pub store: Store,
    postgres_name: Option<String>,
    _dir: Option<tempfile::TempDir>,
}

impl TestDb {
    pub async fn postgres() -> Self {
        let name = format!("receipt_store_{}", uuid::Uuid::now_v7().simple());
        let mut admin = PgConnection::connect(POSTGRES_ADMIN)
            .await
            .expect("Postgres on 127.0.0.1:5432");
        admin
            .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .await
            .expect("create a database");
        let _ = admin.close().await;
        let store = Store::connect(&format!("postgres://postgres@127.0.0.1:5432/{name}"))
            .await
            .expect("connect");
        store.migrate().await.expect("migrate");
        TestDb {
            store,
            postgres_name: Some(name),
            _dir: None,
        }
    }

    pub async fn sqlite() -> Self {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let store = Store::connect(&format!("sqlite://{}/jobs.db", dir.path().display()))
            .await
            .expect("open");
        store.migrate().await.expect("migrate");
        TestDb {
            store,
            postgres_name: None,
            _dir: Some(dir),
        }
    }

    /// A connection to the database past the store, as another program
    /// (or an earlier release) would open.
    async fn connect_past_the_store(&self) -> sqlx::AnyConnection {
        sqlx::any::install_default_drivers();
        let url = match (&self.postgres_name, &self._dir) {
            (Some(name), _) => format!("postgres://postgres@127.0.0.1:5432/{name}"),
            (None, Some(dir)) => format!("sqlite://{}/jobs.db", dir.path().display()),
            (None, None) => unreachable!("a test database is Postgres or a SQLite file"),
        };
        sqlx::AnyConnection::connect(&url).await.expect("connect")
    }

    /// Runs statements on the database past the store.
    pub async fn execute_past_the_store(&self, statements: &str) {
        let mut conn = self.connect_past_the_store().await;
        conn.execute(sqlx::AssertSqlSafe(statements.to_owned()))
            .await
            .expect("the statements");
        let _ = conn.close().await;
    }

    /// A count read past the store.
    pub async fn count_past_the_store(&self, query: &str) -> i64 {
        let mut conn = self.connect_past_the_store().await;
        let count = sqlx::query_scalar(sqlx::AssertSqlSafe(query.to_owned()))
            .fetch_one(&mut conn)
            .await
            .expect("the count");
        let _ = conn.close().await;
        count
    }

    /// Closes the store and drops its database.
    pub async fn finish(self) {
        self.store.close().await;
        if let Some(name) = &self.postgres_name {
            let mut admin = PgConnection::connect(POSTGRES_ADMIN)
                .await
                .expect("connect");
            admin
                .execute(sqlx::AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .await
                .expect("drop the database");
        }
    }
}

/// Declares each `async fn name(db: &TestDb)` as a test on Postgres and a
/// test on SQLite: `on_both_databases!(name, other_name);`.
#[macro_export]
macro_rules! on_both_databases {
    ($($test:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test]
                async fn $test() {
                    let db = $crate::harness::TestDb::postgres().await;
                    super::$test(&db).await;
                    db.finish().await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test]
                async fn $test() {
                    let db = $crate::harness::TestDb::sqlite().await;
                    super::$test(&db).await;
                    db.finish().await;
                }
            )*
        }
    };
}
