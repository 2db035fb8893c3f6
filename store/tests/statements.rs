//! Every SQL statement of the store, prepared against a freshly migrated
//! database of its kind: a typo, a missing column or a type the database
//! refuses fails here, not in production. A `query_as` statement's result
//! columns are held against the `FromRow` struct its function returns (a
//! tuple's are not): names on both databases, types on Postgres.
//!
//! The statements are found in the source: every `sql!("...")` literal in
//! `src/postgres/` and `src/sqlite/`, and in `src/portable/` (the statements
//! written once for both), which is prepared on both. The store is the
//! only crate with SQL, and its other files have none (both checked
//! below). So that none escapes,
//! every call of `sqlx::query`, `query_as` or `query_scalar` there must take
//! its text from `sql!`.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};

use sqlx::{
    Column, Connection, Executor, PgConnection, SqlSafeStr, SqliteConnection, Statement as _,
    TypeInfo,
};
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
    /// The return type of the function being visited, as text.
    returns: String,
    /// Each `query_as` statement's text, with the return type of the
    /// function it is in: what its rows decode into.
    decoded: Vec<(String, String)>,
}

fn is_sql_macro(mac: &syn::Macro) -> bool {
    mac.path.is_ident("sql")
}

fn return_type(output: &syn::ReturnType) -> String {
    match output {
        syn::ReturnType::Default => String::new(),
        syn::ReturnType::Type(_, ty) => quote::ToTokens::to_token_stream(ty).to_string(),
    }
}

impl<'ast> Visit<'ast> for Finder {
    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        self.returns = return_type(&item.sig.output);
        syn::visit::visit_item_fn(self, item);
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        self.returns = return_type(&item.sig.output);
        syn::visit::visit_impl_item_fn(self, item);
    }

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
                if let (true, Some(syn::Expr::Macro(m))) = (name == "query_as", call.args.first())
                    && from_sql
                    && let Ok(literal) = m.mac.parse_body::<syn::LitStr>()
                {
                    self.decoded.push((literal.value(), self.returns.clone()));
                }
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

/// What the modules' source holds: statements, and what `query_as` ones
/// decode into.
fn found_in(modules: &[&str]) -> Finder {
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
    finder
}

/// Every struct of the store that derives `sqlx::FromRow`: its fields, by
/// name, with their types as text.
fn row_structs() -> HashMap<String, Vec<(String, String)>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut structs: HashMap<String, Vec<(String, String)>> = HashMap::new();
    for file in rust_files(&root) {
        let source = std::fs::read_to_string(&file).expect("a source file");
        let parsed = syn::parse_file(&source).expect("the store's source parses");
        for item in parsed.items {
            let syn::Item::Struct(item) = item else {
                continue;
            };
            let from_row = item.attrs.iter().any(|attr| {
                attr.path().is_ident("derive")
                    && quote::ToTokens::to_token_stream(&attr.meta)
                        .to_string()
                        .contains("FromRow")
            });
            if !from_row {
                continue;
            }
            let fields: Vec<(String, String)> = item
                .fields
                .iter()
                .filter_map(|f| {
                    let name = f.ident.as_ref()?.to_string();
                    let ty = quote::ToTokens::to_token_stream(&f.ty).to_string();
                    let sqlx: Vec<String> = f
                        .attrs
                        .iter()
                        .filter(|a| a.path().is_ident("sqlx"))
                        .map(|a| quote::ToTokens::to_token_stream(&a.meta).to_string())
                        .collect();
                    match sqlx.as_slice() {
                        [] => Some((name, ty)),
                        [flatten] if flatten == "sqlx (flatten)" => {
                            Some((FLATTENED.to_owned(), ty))
                        }
                        _ => panic!(
                            "{}.{name}: #[sqlx(..)] other than flatten, which this check does \
                             not read",
                            item.ident
                        ),
                    }
                })
                .collect();
            structs.insert(item.ident.to_string(), fields);
        }
    }
    // A flattened field stands for the fields of the struct it holds.
    let flat = |fields: &[(String, String)]| -> Vec<(String, String)> {
        fields
            .iter()
            .flat_map(|(name, ty)| match name.as_str() {
                FLATTENED => structs
                    .get(ty.as_str())
                    .unwrap_or_else(|| panic!("a flattened {ty}, which derives no FromRow"))
                    .clone(),
                _ => vec![(name.clone(), ty.clone())],
            })
            .collect()
    };
    structs
        .iter()
        .map(|(name, fields)| (name.clone(), flat(fields)))
        .collect()
}

/// The name a flattened field is kept under until its struct's fields
/// take its place.
const FLATTENED: &str = "#flattened";

/// The row struct a `query_as` statement decodes into: the one `FromRow`
/// struct its function's return type names; `None` for a tuple or a
/// scalar.
fn row_struct_of<'a>(
    returns: &str,
    structs: &'a HashMap<String, Vec<(String, String)>>,
) -> Option<(&'a String, &'a Vec<(String, String)>)> {
    let named: Vec<_> = returns
        .split(|c: char| !c.is_alphanumeric() && c != '_')
        .filter_map(|word| structs.get_key_value(word))
        .collect();
    match named.as_slice() {
        [one] => Some(*one),
        _ => None,
    }
}

/// The Postgres types a field's Rust type decodes from; `None` where this
/// check does not know the type (it checks the name alone then).
fn postgres_types_of(rust: &str) -> Option<&'static [&'static str]> {
    let rust = rust.trim();
    if let Some(inner) = rust
        .strip_prefix("Option <")
        .and_then(|r| r.strip_suffix('>'))
    {
        return postgres_types_of(inner);
    }
    Some(match rust {
        "String" => &["TEXT", "VARCHAR", "NAME", "BPCHAR"],
        "i64" => &["INT8"],
        "i32" => &["INT4"],
        "i16" => &["INT2"],
        "bool" => &["BOOL"],
        "f64" => &["FLOAT8"],
        "Millis" => &["TIMESTAMPTZ"],
        "JsonText" => &["JSONB", "JSON"],
        "Vec < u8 >" => &["BYTEA"],
        "DateText" => &["DATE"],
        "EventTypes" => &["TEXT[]"],
        _ => return None,
    })
}

/// What is wrong with a statement's result columns for the struct it
/// decodes into: a field no column fills, a column no field takes, or
/// (with `types`) a column of a type the field cannot decode.
fn columns_against_struct(
    columns: &[(String, String)],
    name: &str,
    fields: &[(String, String)],
    types: bool,
) -> Vec<String> {
    let mut wrong = Vec::new();
    for (field, rust) in fields {
        match columns.iter().find(|(column, _)| column == field) {
            None => wrong.push(format!("{name}.{field} has no column")),
            Some((_, db)) if types => {
                if let Some(expected) = postgres_types_of(rust)
                    && !expected.contains(&db.as_str())
                {
                    wrong.push(format!(
                        "{name}.{field} is {rust}, its column {db} (expected one of {expected:?})"
                    ));
                }
            }
            Some(_) => {}
        }
    }
    for (column, _) in columns {
        if !fields.iter().any(|(field, _)| field == column) {
            wrong.push(format!("column {column} has no field in {name}"));
        }
    }
    wrong
}

fn report(failures: Vec<String>, kind: &str) {
    assert!(
        failures.is_empty(),
        "{} {kind} statement(s) do not prepare:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// A `query_as` statement's columns against the struct it decodes into,
/// as failures that name the statement.
fn wrong_columns(
    finder: &Finder,
    structs: &HashMap<String, Vec<(String, String)>>,
    statement: &Statement,
    columns: &[(String, String)],
    types: bool,
) -> Vec<String> {
    let decoded = finder
        .decoded
        .iter()
        .filter(|(text, _)| *text == statement.text)
        .filter_map(|(_, returns)| row_struct_of(returns, structs));
    let mut failures = Vec::new();
    for (name, fields) in decoded {
        for wrong in columns_against_struct(columns, name, fields, types) {
            failures.push(format!("{}: {wrong}", statement.place));
        }
    }
    failures
}

/// What of a statement's result columns is held against its row struct.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Columns {
    /// Names alone: SQLite gives an expression's column no type.
    Names,
    NamesAndTypes,
}

/// Prepares on `conn` each statement the finder found: the failures,
/// each naming its statement.
async fn prepare_each<C>(conn: &mut C, finder: &Finder, columns: Columns) -> Vec<String>
where
    C: Connection,
    for<'c> &'c mut C: Executor<'c, Database = C::Database>,
{
    let structs = row_structs();
    let mut failures = Vec::new();
    for statement in &finder.statements {
        match conn
            .prepare(sqlx::AssertSqlSafe(statement.text.clone()).into_sql_str())
            .await
        {
            Err(error) => {
                failures.push(format!("{}: {error}\n{}", statement.place, statement.text));
            }
            Ok(prepared) => {
                let found = prepared
                    .columns()
                    .iter()
                    .map(|c| {
                        let type_name = match columns {
                            Columns::NamesAndTypes => c.type_info().name().to_owned(),
                            Columns::Names => String::new(),
                        };
                        (c.name().to_owned(), type_name)
                    })
                    .collect::<Vec<_>>();
                let types = columns == Columns::NamesAndTypes;
                failures.extend(wrong_columns(finder, &structs, statement, &found, types));
            }
        }
    }
    failures
}

#[tokio::test]
async fn every_postgres_statement_prepares_on_a_migrated_database() {
    let finder = found_in(&["postgres", "portable"]);
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
    // apalis's table of earlier versions, which the store prunes: no
    // migration makes it, so the columns its statements name stand in.
    conn.execute(
        "CREATE SCHEMA apalis;
         CREATE TABLE apalis.jobs (id TEXT PRIMARY KEY, job_type TEXT NOT NULL, status TEXT NOT NULL)",
    )
    .await
    .expect("apalis's table");
    let failures = prepare_each(&mut conn, &finder, Columns::NamesAndTypes).await;
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
    let finder = found_in(&["sqlite", "portable"]);
    let dir = tempfile::tempdir().expect("a temporary folder");
    let url = format!("sqlite://{}/jobs.db", dir.path().display());
    let store = store::Store::connect(&url).await.expect("open");
    store.migrate().await.expect("migrate");
    store.close().await;

    let mut conn = SqliteConnection::connect(&url).await.expect("open");
    let failures = prepare_each(&mut conn, &finder, Columns::Names).await;
    conn.close().await.expect("close");
    report(failures, "SQLite");
}

#[test]
fn a_column_of_another_type_or_name_than_its_field_is_named() {
    let fields = [
        ("job_id".to_owned(), "String".to_owned()),
        ("attempts".to_owned(), "i64".to_owned()),
        ("finished_at".to_owned(), "Option < Millis >".to_owned()),
    ];
    let columns = [
        ("job_id".to_owned(), "TEXT".to_owned()),
        ("attempts".to_owned(), "INT4".to_owned()),
        ("finished_at".to_owned(), "TIMESTAMPTZ".to_owned()),
        ("status".to_owned(), "TEXT".to_owned()),
    ];

    let wrong = columns_against_struct(&columns, "JobRow", &fields, true);
    let names_only = columns_against_struct(&columns, "JobRow", &fields, false);

    assert_eq!(
        wrong,
        [
            "JobRow.attempts is i64, its column INT4 (expected one of [\"INT8\"])",
            "column status has no field in JobRow",
        ]
    );
    assert_eq!(names_only, ["column status has no field in JobRow"]);
}

/// The statements above are all there is: none in the store outside its
/// dialect folders, and none in the other crates of the product (the
/// tests' tools, `testkit` and `bench`, set up databases of their own).
#[test]
fn no_statement_is_written_outside_the_stores_dialect_folders() {
    let store = Path::new(env!("CARGO_MANIFEST_DIR"));
    let workspace = store.parent().expect("the workspace");
    let dialects = ["postgres", "sqlite", "portable"].map(|d| store.join("src").join(d));
    let mut files: Vec<PathBuf> = rust_files(&store.join("src"))
        .into_iter()
        .filter(|file| !dialects.iter().any(|dialect| file.starts_with(dialect)))
        .collect();
    for crate_name in [
        "api",
        "worker",
        "queue",
        "shared",
        "reports",
        "outbound",
        "telemetry",
        "client",
    ] {
        files.extend(rust_files(&workspace.join(crate_name).join("src")));
    }
    let mut finder = Finder::default();
    for file in &files {
        let source = std::fs::read_to_string(file).expect("a source file");
        let parsed = syn::parse_file(&source).expect("the source parses");
        finder.file = file
            .strip_prefix(workspace)
            .unwrap_or(file)
            .display()
            .to_string();
        finder.visit_file(&parsed);
    }
    let places: Vec<&str> = finder
        .statements
        .iter()
        .map(|statement| statement.place.as_str())
        .chain(finder.unchecked.iter().map(String::as_str))
        .collect();
    assert!(
        places.is_empty(),
        "statements outside the store's dialect folders: {places:?}"
    );
    assert!(files.len() > 50, "the product's source was read");
}
