//! A fresh, migrated database of each kind per test, dropped at the end.

use sqlx::{Connection, Executor, PgConnection};
use store::{Keyring, Store};

const POSTGRES_ADMIN: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// A migrated database of its own, removed when the test ends.
pub struct TestDb {
    pub store: Store,
    /// Postgres: the master key its store was given (SQLite's is in the
    /// key file beside the database).
    master_key: Option<String>,
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
        // Postgres has no key file: the test's store gets a key of its own.
        let master_key = Keyring::new_master_key();
        let keyring = Keyring::parse(&master_key).expect("a master key");
        let store = Store::connect(&format!("postgres://postgres@127.0.0.1:5432/{name}"))
            .await
            .expect("connect")
            .with_keyring(keyring);
        store.migrate().await.expect("migrate");
        TestDb {
            store,
            master_key: Some(master_key),
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
            master_key: None,
            postgres_name: None,
            _dir: Some(dir),
        }
    }

    fn url(&self) -> String {
        match (&self.postgres_name, &self._dir) {
            (Some(name), _) => format!("postgres://postgres@127.0.0.1:5432/{name}"),
            (None, Some(dir)) => format!("sqlite://{}/jobs.db", dir.path().display()),
            (None, None) => unreachable!("a test database is Postgres or a SQLite file"),
        }
    }

    /// A connection to the database past the store, as another program
    /// (or an earlier release) would open.
    async fn connect_past_the_store(&self) -> sqlx::AnyConnection {
        sqlx::any::install_default_drivers();
        sqlx::AnyConnection::connect(&self.url())
            .await
            .expect("connect")
    }

    /// The master key the test's store seals with.
    pub fn master_key(&self) -> String {
        match (&self.master_key, &self._dir) {
            (Some(key), _) => key.clone(),
            (None, Some(dir)) => std::fs::read_to_string(dir.path().join("jobs.db.master-key"))
                .expect("the key file beside the database")
                .trim()
                .to_owned(),
            (None, None) => unreachable!("a test database is Postgres or a SQLite file"),
        }
    }

    /// Another store on the same database, as another process would open
    /// it with `RECEIPT_MASTER_KEYS=master_keys`.
    pub async fn store_with_keys(&self, master_keys: &str) -> Store {
        let keyring = Keyring::parse(master_keys).expect("master keys");
        Store::connect(&self.url())
            .await
            .expect("connect")
            .with_keyring(keyring)
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
