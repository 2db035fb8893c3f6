//! Every SQL statement of the store, prepared against a freshly migrated
//! database of its kind: a typo, a missing column or a type the database
//! refuses fails here, not in production.
//!
//! The statements are found in the source: every `sql!("...")` literal in
//! `src/postgres/` and `src/sqlite/`, and in `src/portable/` (the statements
//! written once for both), which is prepared on both. So that none escapes,
//! every call of `sqlx::query`, `query_as` or `query_scalar` there must take
//! its text from `sql!`.

use std::path::{Path, PathBuf};

use sqlx::{Connection, Executor, PgConnection, SqlSafeStr, SqliteConnection};
use syn::visit::Visit;

const POSTGRES_ADMIN: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// A statement and where it is written.
struct Statement {
    text: String,
    place: String,
}

#[derive(Default)]
struct Finder {
    file: String,
    statements: Vec<Statement>,
    unchecked: Vec<String>,
}

fn is_sql_macro(mac: &syn::Macro) -> bool {
    mac.path.is_ident("sql")
}

impl<'ast> Visit<'ast> for Finder {
    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        if is_sql_macro(mac) {
            let literal: syn::LitStr = mac
                .parse_body()
                .unwrap_or_else(|e| panic!("{}: sql! takes one literal: {e}", self.file));
            let line = literal.span().start().line;
            self.statements.push(Statement {
                text: literal.value(),
                place: format!("{}:{line}", self.file),
            });
        }
        syn::visit::visit_macro(self, mac);
    }

    fn visit_expr_call(&mut self, call: &'ast syn::ExprCall) {
        if let syn::Expr::Path(path) = &*call.func {
            let name = path
                .path
                .segments
                .last()
                .map(|s| s.ident.to_string())
                .unwrap_or_default();
            if ["query", "query_as", "query_scalar"].contains(&name.as_str()) {
                let from_sql =
                    matches!(call.args.first(), Some(syn::Expr::Macro(m)) if is_sql_macro(&m.mac));
                if !from_sql {
                    let line = path
                        .path
                        .segments
                        .last()
                        .map_or(0, |s| s.ident.span().start().line);
                    self.unchecked.push(format!("{}:{line}", self.file));
                }
            }
        }
        syn::visit::visit_expr_call(self, call);
    }
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// The statements of one database's modules.
fn statements_of(modules: &[&str]) -> Vec<Statement> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut finder = Finder::default();
    let files = modules
        .iter()
        .flat_map(|module| rust_files(&root.join("src").join(module)));
    for file in files {
        let source = std::fs::read_to_string(&file).expect("a source file");
        let parsed = syn::parse_file(&source).expect("the store's source parses");
        finder.file = file
            .strip_prefix(root)
            .unwrap_or(&file)
            .display()
            .to_string();
        finder.visit_file(&parsed);
    }
    assert!(
        finder.unchecked.is_empty(),
        "statements not written with sql!, which this test cannot find: {:?}",
        finder.unchecked
    );
    assert!(
        !finder.statements.is_empty(),
        "no statement found in {modules:?}"
    );
    finder.statements
}

fn report(failures: Vec<String>, kind: &str) {
    assert!(
        failures.is_empty(),
        "{} {kind} statement(s) do not prepare:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[tokio::test]
async fn every_postgres_statement_prepares_on_a_migrated_database() {
    let statements = statements_of(&["postgres", "portable"]);
    let name = format!("receipt_statements_{}", uuid::Uuid::now_v7().simple());
    let mut admin = PgConnection::connect(POSTGRES_ADMIN)
        .await
        .expect("Postgres on 127.0.0.1:5432");
    admin
        .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .await
        .expect("create a database");
    let url = format!("postgres://postgres@127.0.0.1:5432/{name}");
    let store = store::Store::connect(&url).await.expect("connect");
    store.migrate().await.expect("migrate");
    store.close().await;

    let mut conn = PgConnection::connect(&url).await.expect("connect");
    let mut failures = Vec::new();
    for statement in &statements {
        if let Err(error) = conn
            .prepare(sqlx::AssertSqlSafe(statement.text.clone()).into_sql_str())
            .await
        {
            failures.push(format!("{}: {error}\n{}", statement.place, statement.text));
        }
    }
    conn.close().await.expect("close");
    admin
        .execute(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE {name} WITH (FORCE)"
        )))
        .await
        .expect("drop the database");
    report(failures, "Postgres");
}

#[tokio::test]
async fn every_sqlite_statement_prepares_on_a_migrated_database() {
    let statements = statements_of(&["sqlite", "portable"]);
    let dir = tempfile::tempdir().expect("a temporary folder");
    let url = format!("sqlite://{}/jobs.db", dir.path().display());
    let store = store::Store::connect(&url).await.expect("open");
    store.migrate().await.expect("migrate");
    store.close().await;

    let mut conn = SqliteConnection::connect(&url).await.expect("open");
    let mut failures = Vec::new();
    for statement in &statements {
        if let Err(error) = conn
            .prepare(sqlx::AssertSqlSafe(statement.text.clone()).into_sql_str())
            .await
        {
            failures.push(format!("{}: {error}\n{}", statement.place, statement.text));
        }
    }
    conn.close().await.expect("close");
    report(failures, "SQLite");
}
