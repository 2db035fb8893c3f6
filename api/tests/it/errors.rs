//! Errors as a client sees them: every row of the error table of
//! `docs/api.md` answers its status with an `application/problem+json` body
//! and stores nothing; a database outage answers 503 with `Retry-After`;
//! random bodies never get a 5xx; and the OpenAPI document lists exactly
//! what the server serves.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use rand::{Rng, SeedableRng, rngs::StdRng};
use reqwest::{
    Method, StatusCode,
    header::{AUTHORIZATION, CONTENT_TYPE},
};
use serde_json::{Value, json};

use crate::common::{Api, Backend, KEY_A, KEY_B, PG_ADMIN_URL, Reply, StoreOf, TestEnv, wait};

/// A well-formed job id that no job has.
const MISSING_JOB: &str = "job_00000000000000000000000000000000";
const MIB: usize = 1024 * 1024;
/// The content type of every error (RFC 9457).
const PROBLEM_JSON: &str = "application/problem+json";

/// How a request authenticates.
#[derive(Debug, Clone, Copy)]
enum Auth {
    /// Tenant a's key.
    Valid,
    /// Tenant b's key: tenant a's resources are not found.
    TenantB,
    /// No `Authorization` header.
    Missing,
    /// A bearer token that is no key.
    Invalid,
    /// A valid key under another scheme.
    NotBearer,
}

/// One row of the table: a request and the problem it must get.
struct Case {
    what: String,
    method: Method,
    path: String,
    auth: Auth,
    /// The body and its content type (`None`: no content type header).
    body: Option<(Option<&'static str>, Vec<u8>)>,
    status: u16,
    /// For 422: exactly the fields `errors` must name.
    fields: Vec<&'static str>,
    /// Extra request headers.
    headers: Vec<(&'static str, &'static str)>,
}

impl Case {
    fn new(what: &str, method: Method, path: impl Into<String>, status: u16) -> Self {
        Case {
            what: what.to_owned(),
            method,
            path: path.into(),
            auth: Auth::Valid,
            body: None,
            status,
            fields: Vec::new(),
            headers: Vec::new(),
        }
    }

    fn get(what: &str, path: impl Into<String>, status: u16) -> Self {
        Self::new(what, Method::GET, path, status)
    }

    /// A POST with this JSON text as an `application/json` body.
    fn post(
        what: &str,
        path: impl Into<String>,
        json_text: impl Into<Vec<u8>>,
        status: u16,
    ) -> Self {
        Self::new(what, Method::POST, path, status).body(Some("application/json"), json_text)
    }

    fn body(mut self, content_type: Option<&'static str>, bytes: impl Into<Vec<u8>>) -> Self {
        self.body = Some((content_type, bytes.into()));
        self
    }

    fn auth(mut self, auth: Auth) -> Self {
        self.auth = auth;
        self
    }

    fn fields(mut self, fields: &[&'static str]) -> Self {
        self.fields = fields.to_vec();
        self
    }

    fn header(mut self, name: &'static str, value: &'static str) -> Self {
        self.headers.push((name, value));
        self
    }
}

/// Sends a request as `auth`, with `body` as given (content type and bytes).
async fn send_raw(
    api: &Api,
    method: Method,
    path: &str,
    auth: Auth,
    body: Option<(Option<&str>, Vec<u8>)>,
) -> Reply {
    send_with_headers(api, method, path, auth, body, &[]).await
}

async fn send_with_headers(
    api: &Api,
    method: Method,
    path: &str,
    auth: Auth,
    body: Option<(Option<&str>, Vec<u8>)>,
    headers: &[(&str, &str)],
) -> Reply {
    let mut request = api.client.request(method, api.url(path));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request = match auth {
        Auth::Valid => request.bearer_auth(KEY_A),
        Auth::TenantB => request.bearer_auth(KEY_B),
        Auth::Missing => request,
        Auth::Invalid => request.bearer_auth("not-a-key-of-anyone"),
        Auth::NotBearer => request.header(AUTHORIZATION, format!("Basic {KEY_A}")),
    };
    if let Some((content_type, bytes)) = body {
        if let Some(content_type) = content_type {
            request = request.header(CONTENT_TYPE, content_type);
        }
        request = request.body(bytes);
    }
    Api::read(request).await
}

/// A valid ledger entry with this id, as JSON.
fn entry(id: &str) -> Value {
    json!({"id": id, "date": "2026-10-03", "direction": "sale", "amount": "1299.00",
           "gst_rate": "18", "interstate": false, "party": "Acme", "description": "widgets"})
}

/// A valid entry with some members replaced or added.
fn entry_with(id: &str, changes: Value) -> Value {
    let mut entry = entry(id);
    for (k, v) in changes.as_object().unwrap() {
        entry[k] = v.clone();
    }
    entry
}

fn ledger_body(entries: &[Value]) -> String {
    json!({ "entries": entries }).to_string()
}

/// A JSON body of exactly `len` bytes: `{"month":"aaa…"}`.
fn padded_month_body(len: usize) -> Vec<u8> {
    let frame = r#"{"month":""}"#.len();
    format!(r#"{{"month":"{}"}}"#, "a".repeat(len - frame)).into_bytes()
}

/// A ledger import of exactly `len` bytes whose one entry has a long
/// description (so it is invalid, and stores nothing).
fn padded_ledger_body(len: usize) -> Vec<u8> {
    let frame = ledger_body(&[entry_with("pad", json!({"description": ""}))]).len();
    let body = ledger_body(&[entry_with(
        "pad",
        json!({"description": "d".repeat(len - frame)}),
    )]);
    assert_eq!(body.len(), len);
    body.into_bytes()
}

fn ids_of(page: &Value) -> BTreeSet<String> {
    page["data"]
        .as_array()
        .expect("a page of jobs")
        .iter()
        .map(|job| job["job_id"].as_str().unwrap().to_owned())
        .collect()
}

async fn entries_stored(env: &TestEnv, tenant: &str) -> i64 {
    let store = env.store().await;
    let n = store
        .count_entries(tenant, "0000-01-01", "9999-12-31")
        .await
        .expect("count entries");
    store.close().await;
    n
}

/// Asserts the problem members beyond `Reply::assert_problem`'s: `type`,
/// `title` and `detail` are strings, and the detail says something.
fn assert_problem_members(problem: &Value, context: &str) {
    for member in ["type", "title", "detail"] {
        assert!(
            problem[member].is_string(),
            "{context}: {member} is not a string: {problem}"
        );
    }
    assert!(
        !problem["detail"].as_str().unwrap().trim().is_empty(),
        "{context}: empty detail: {problem}"
    );
}

async fn every_row_of_the_error_table_is_a_problem_and_stores_nothing(backend: Backend) {
    // Arrange: one ledger entry, and a job in each state the table needs.
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;
    let imported = api.import(json!([entry("inv-1")])).await;
    assert_eq!(imported.status, StatusCode::OK, "{}", imported.text);
    let succeeded = api.submit("sleep", json!({"ms": 1})).await;
    let succeeded = succeeded["job_id"].as_str().unwrap().to_owned();
    let failed = api
        .submit(
            "sleep",
            json!({"ms": 1, "fail_times": 1, "permanent": true}),
        )
        .await;
    let failed = failed["job_id"].as_str().unwrap().to_owned();
    let cancelled = api.submit("sleep", json!({"ms": 600_000})).await;
    let cancelled = cancelled["job_id"].as_str().unwrap().to_owned();
    let reply = send_with_headers(
        &api,
        Method::POST,
        "/v1/reports/sleep",
        Auth::Valid,
        Some((Some("application/json"), br#"{"ms": 600000}"#.to_vec())),
        &[("idempotency-key", "errors-running")],
    )
    .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.text);
    let running = reply.json()["job_id"].as_str().unwrap().to_owned();
    assert_eq!(api.wait_final(&succeeded).await["status"], "SUCCEEDED");
    assert_eq!(api.wait_final(&failed).await["status"], "FAILED");
    let reply = api
        .post(&format!("/v1/jobs/{cancelled}/cancel"), &json!({}))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(api.wait_final(&cancelled).await["status"], "CANCELLED");
    let jobs_before = ids_of(&api.get("/v1/jobs?limit=200").await.json());
    assert_eq!(jobs_before.len(), 4);

    let gst = "/v1/reports/gst-summary";
    let export = "/v1/reports/ledger-export";
    let ledger = "/v1/ledger/entries";
    let valid_params = r#"{"month": "2026-10"}"#;
    let valid_import = ledger_body(&[entry("inv-2")]);
    let cases = vec![
        // 400: malformed JSON, wrong JSON type, unknown (or missing) field.
        Case::post("malformed JSON on a report", gst, r#"{"month": "#, 400),
        Case::post(
            "malformed JSON on an import",
            ledger,
            r#"{"entries": [{"id": "#,
            400,
        ),
        Case::post("an empty JSON body", gst, "", 400),
        Case::post(
            "trailing garbage after JSON",
            gst,
            r#"{"month": "2026-10"} x"#,
            400,
        ),
        Case::post(
            "a number where a string belongs",
            gst,
            r#"{"month": 10}"#,
            400,
        ),
        Case::post(
            "parameters that are not an object",
            gst,
            r#"["2026-10"]"#,
            400,
        ),
        Case::post(
            "an amount sent as a JSON number",
            ledger,
            ledger_body(&[entry_with("inv-2", json!({"amount": 1299}))]),
            400,
        ),
        Case::post(
            "entries that are not a list",
            ledger,
            r#"{"entries": {"id": "x"}}"#,
            400,
        ),
        Case::post(
            "an unknown report parameter",
            gst,
            r#"{"month": "2026-10", "currency": "INR"}"#,
            400,
        ),
        Case::post(
            "an unknown ledger-export parameter",
            export,
            r#"{"from": "2026-10-01", "to": "2026-10-31", "format": "csv"}"#,
            400,
        ),
        Case::post(
            "an unknown field in an entry",
            ledger,
            ledger_body(&[entry_with("inv-2", json!({"colour": "red"}))]),
            400,
        ),
        Case::post(
            "an unknown field beside the entries",
            ledger,
            r#"{"entries": [], "dry_run": true}"#,
            400,
        ),
        Case::post("a missing required parameter", gst, "{}", 400),
        Case::post(
            "an import that is a list, not an object",
            ledger,
            json!([[entry("inv-2")]]).to_string(),
            400,
        ),
        Case::post(
            "an entry written as a list of its values",
            ledger,
            r#"{"entries": [["inv-2", "2026-10-03", "sale", "1299.00", "18"]]}"#,
            400,
        ),
        Case::post("an Idempotency-Key with a space", gst, valid_params, 400)
            .header("idempotency-key", "two words"),
        Case::post("an empty Idempotency-Key", gst, valid_params, 400)
            .header("idempotency-key", ""),
        // 401, with WWW-Authenticate: Bearer.
        Case::post("no Authorization on a submit", gst, valid_params, 401).auth(Auth::Missing),
        Case::get("no Authorization on the list", "/v1/jobs", 401).auth(Auth::Missing),
        Case::get("an invalid key", format!("/v1/jobs/{running}"), 401).auth(Auth::Invalid),
        Case::post(
            "an invalid key on an import",
            ledger,
            valid_import.clone(),
            401,
        )
        .auth(Auth::Invalid),
        Case::get("a key under the Basic scheme", "/v1/jobs", 401).auth(Auth::NotBearer),
        // 404: unknown job, report kind, another tenant's job, unknown route.
        Case::get("an unknown job", format!("/v1/jobs/{MISSING_JOB}"), 404),
        Case::get("a job id of another form", "/v1/jobs/42", 404),
        Case::get("a job id with a NUL byte", "/v1/jobs/job_%00", 404),
        Case::post(
            "a cancel of a job id with a NUL byte",
            "/v1/jobs/job_%00/cancel",
            "{}",
            404,
        ),
        Case::get(
            "the result of an unknown job",
            format!("/v1/jobs/{MISSING_JOB}/result"),
            404,
        ),
        Case::post(
            "a cancel of an unknown job",
            format!("/v1/jobs/{MISSING_JOB}/cancel"),
            "{}",
            404,
        ),
        Case::get("another tenant's job", format!("/v1/jobs/{running}"), 404).auth(Auth::TenantB),
        Case::post(
            "an unknown report kind",
            "/v1/reports/tax-evasion",
            valid_params,
            404,
        ),
        Case::get("an unknown route", "/v1/invoices", 404),
        Case::get("an unknown route outside /v1", "/nope", 404),
        Case::post(
            "an unknown action on a job",
            format!("/v1/jobs/{running}/restart"),
            "{}",
            404,
        ),
        // 409: an action the job's state does not allow.
        Case::post(
            "a cancel of a SUCCEEDED job",
            format!("/v1/jobs/{succeeded}/cancel"),
            "{}",
            409,
        ),
        Case::post(
            "a cancel of a FAILED job",
            format!("/v1/jobs/{failed}/cancel"),
            "{}",
            409,
        ),
        Case::get(
            "the result of a job not yet SUCCEEDED",
            format!("/v1/jobs/{running}/result"),
            409,
        ),
        Case::get(
            "the result of a FAILED job",
            format!("/v1/jobs/{failed}/result"),
            409,
        ),
        Case::get(
            "the result of a CANCELLED job",
            format!("/v1/jobs/{cancelled}/result"),
            409,
        ),
        // 413: over the route's body limit.
        Case::post("a submit over 1 MiB", gst, padded_month_body(MIB + 1), 413),
        Case::post(
            "an import over 16 MiB",
            ledger,
            padded_ledger_body(16 * MIB + 1),
            413,
        ),
        // 415: a body that is not application/json.
        Case::new("a text/plain submit", Method::POST, gst, 415)
            .body(Some("text/plain"), valid_params),
        Case::new("a submit without a content type", Method::POST, gst, 415)
            .body(None, valid_params),
        Case::new("a form-encoded import", Method::POST, ledger, 415).body(
            Some("application/x-www-form-urlencoded"),
            valid_import.clone(),
        ),
        // 422: well-formed JSON that fails validation, naming the fields.
        Case::post("a bad month", gst, r#"{"month": "2026-13"}"#, 422).fields(&["month"]),
        Case::post(
            "an impossible date",
            export,
            r#"{"from": "2026-10-32", "to": "2026-10-31"}"#,
            422,
        )
        .fields(&["from"]),
        Case::post(
            "a range that ends before it starts",
            export,
            r#"{"from": "2026-10-31", "to": "2026-10-01"}"#,
            422,
        )
        .fields(&["to"]),
        Case::post(
            "a sleep over the limit",
            "/v1/reports/sleep",
            r#"{"ms": 600001}"#,
            422,
        )
        .fields(&["ms"]),
        Case::post(
            "a negative amount",
            ledger,
            ledger_body(&[entry_with("inv-2", json!({"amount": "-5.00"}))]),
            422,
        )
        .fields(&["entries[0].amount"]),
        Case::post(
            "a GST rate that does not exist",
            ledger,
            ledger_body(&[entry_with("inv-2", json!({"gst_rate": "17"}))]),
            422,
        )
        .fields(&["entries[0].gst_rate"]),
        Case::post(
            "a valid entry beside an invalid one",
            ledger,
            ledger_body(&[
                entry("inv-2"),
                entry_with("inv-3", json!({"amount": "1.005", "date": "2026-02-30"})),
            ]),
            422,
        )
        .fields(&["entries[1].amount", "entries[1].date"]),
        Case::post(
            "a NUL byte in an entry's id and party",
            ledger,
            ledger_body(&[entry_with("inv-\u{0}2", json!({"party": "Acme\u{0}"}))]),
            422,
        )
        .fields(&["entries[0].id", "entries[0].party"]),
        Case::get("a list limit of 0", "/v1/jobs?limit=0", 422).fields(&["limit"]),
        Case::get("a kind filter with a NUL byte", "/v1/jobs?kind=%00", 422).fields(&["kind"]),
        Case::post(
            "an Idempotency-Key reused with another body",
            "/v1/reports/sleep",
            r#"{"ms": 1}"#,
            422,
        )
        .header("idempotency-key", "errors-running")
        .fields(&["Idempotency-Key"]),
        Case::post(
            "an Idempotency-Key reused on another path",
            gst,
            valid_params,
            422,
        )
        .header("idempotency-key", "errors-running")
        .fields(&["Idempotency-Key"]),
        Case::get(
            "a wait that is no number",
            format!("/v1/jobs/{running}?wait=soon"),
            422,
        )
        .fields(&["wait"]),
    ];

    // Act and assert, row by row.
    for case in cases {
        let context = format!("{} ({} {})", case.what, case.method, case.path);
        let reply = send_with_headers(
            &api,
            case.method,
            &case.path,
            case.auth,
            case.body,
            &case.headers,
        )
        .await;
        assert_eq!(
            reply.status.as_u16(),
            case.status,
            "{context}: {}",
            reply.text
        );
        assert_eq!(
            reply.header("content-type"),
            Some(PROBLEM_JSON),
            "{context}"
        );
        let problem = reply.assert_problem(case.status);
        assert_problem_members(&problem, &context);
        if case.status == 401 {
            assert_eq!(
                reply.header("www-authenticate"),
                Some("Bearer"),
                "{context}"
            );
        }
        if case.status == 422 {
            let errors = problem["errors"]
                .as_array()
                .unwrap_or_else(|| panic!("{context}: a 422 without errors: {problem}"));
            for error in errors {
                assert!(
                    error["field"].is_string()
                        && error["message"].as_str().is_some_and(|m| !m.is_empty()),
                    "{context}: not a {{field, message}}: {error}"
                );
            }
            let named: BTreeSet<&str> = errors
                .iter()
                .map(|e| e["field"].as_str().unwrap())
                .collect();
            let expected: BTreeSet<&str> = case.fields.iter().copied().collect();
            assert_eq!(named, expected, "{context}: {problem}");
        }
    }

    // Nothing a refused request sent was stored.
    let jobs_after = ids_of(&api.get("/v1/jobs?limit=200").await.json());
    assert_eq!(jobs_after, jobs_before, "a refused submit made a job");
    assert_eq!(
        entries_stored(&env, "tenant-a").await,
        1,
        "a refused import stored entries"
    );
    assert_eq!(entries_stored(&env, "tenant-b").await, 0);
    assert_eq!(
        api.job(&running).await["status"]
            .as_str()
            .map(|s| s != "CANCELLED"),
        Some(true),
        "tenant b's requests changed nothing"
    );
}

async fn a_wrong_method_on_a_known_path_is_still_a_problem(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let job = api.submit("sleep", json!({"ms": 1})).await;
    let job_id = job["job_id"].as_str().unwrap();

    for (method, path, allowed) in [
        (Method::GET, "/v1/reports/gst-summary".to_owned(), "POST"),
        (Method::GET, "/v1/ledger/entries".to_owned(), "POST"),
        (Method::DELETE, format!("/v1/jobs/{job_id}"), "GET"),
        (Method::PUT, "/v1/jobs".to_owned(), "GET"),
        (Method::GET, format!("/v1/jobs/{job_id}/cancel"), "POST"),
        (Method::POST, format!("/v1/jobs/{job_id}/result"), "GET"),
        (Method::POST, "/healthz".to_owned(), "GET"),
        (Method::DELETE, "/openapi.json".to_owned(), "GET"),
    ] {
        let context = format!("{method} {path}");
        let reply = send_raw(
            &api,
            method,
            &path,
            Auth::Valid,
            Some((Some("application/json"), b"{}".to_vec())),
        )
        .await;
        let status = reply.status.as_u16();
        assert!(
            status == 404 || status == 405,
            "{context}: {status} {}",
            reply.text
        );
        let problem = reply.assert_problem(status);
        assert_problem_members(&problem, &context);
        if status == 405 {
            let allow = reply.header("allow").unwrap_or_default();
            assert!(allow.contains(allowed), "{context}: Allow is {allow:?}");
        }
    }
    assert_eq!(
        api.job(job_id).await["status"],
        "QUEUED",
        "no wrong-method request touched the job"
    );
}

async fn body_limits_are_per_route_and_include_the_limit_itself(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let gst = "/v1/reports/gst-summary";
    let ledger = "/v1/ledger/entries";
    let json_ct = Some("application/json");

    // Exactly 1 MiB is read (and refused for its content, not its size).
    let at_limit = send_raw(
        &api,
        Method::POST,
        gst,
        Auth::Valid,
        Some((json_ct, padded_month_body(MIB))),
    )
    .await;
    at_limit.assert_problem(422);
    let over = send_raw(
        &api,
        Method::POST,
        gst,
        Auth::Valid,
        Some((json_ct, padded_month_body(MIB + 1))),
    )
    .await;
    assert_eq!(
        over.assert_problem(413)["type"].as_str().map(str::is_empty),
        Some(false)
    );

    // The ledger import takes far more than 1 MiB, up to 16 MiB.
    let two_mib = send_raw(
        &api,
        Method::POST,
        ledger,
        Auth::Valid,
        Some((json_ct, padded_ledger_body(2 * MIB))),
    )
    .await;
    let problem = two_mib.assert_problem(422);
    assert_eq!(problem["errors"][0]["field"], "entries[0].description");
    let at_limit = send_raw(
        &api,
        Method::POST,
        ledger,
        Auth::Valid,
        Some((json_ct, padded_ledger_body(16 * MIB))),
    )
    .await;
    at_limit.assert_problem(422);

    assert!(
        api.get("/v1/jobs").await.json()["data"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert_eq!(entries_stored(&env, "tenant-a").await, 0);
}

/// Takes a Postgres database offline (no new connections, every existing
/// one terminated) and brings it back; back on drop too, so a failing test
/// still lets the harness drop the database.
struct DatabaseOutage {
    database: String,
    over: bool,
}

async fn admin(sql: String) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(PG_ADMIN_URL)
        .await
        .expect("Postgres on 127.0.0.1:5432");
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
        .execute(&mut conn)
        .await
        .expect("admin sql");
    conn.close().await.ok();
}

impl DatabaseOutage {
    async fn begin(database: &str) -> Self {
        admin(format!("ALTER DATABASE {database} ALLOW_CONNECTIONS false")).await;
        admin(format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = '{database}' AND pid <> pg_backend_pid()"
        ))
        .await;
        DatabaseOutage {
            database: database.to_owned(),
            over: false,
        }
    }

    async fn end(mut self) {
        admin(self.restore_sql()).await;
        self.over = true;
    }

    fn restore_sql(&self) -> String {
        format!("ALTER DATABASE {} ALLOW_CONNECTIONS true", self.database)
    }
}

impl Drop for DatabaseOutage {
    fn drop(&mut self) {
        if self.over {
            return;
        }
        let sql = self.restore_sql();
        let _ = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(admin(sql));
        })
        .join();
    }
}

fn assert_retry_after(reply: &Reply, context: &str) {
    let retry_after = reply
        .header("retry-after")
        .unwrap_or_else(|| panic!("{context}: a 503 without Retry-After"));
    let seconds: u64 = retry_after
        .parse()
        .unwrap_or_else(|_| panic!("{context}: Retry-After {retry_after:?} is not seconds"));
    assert!(seconds >= 1, "{context}: Retry-After {seconds}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_redis_a_database_outage_answers_503_with_retry_after_until_it_ends() {
    // Arrange: a job, and the key used once (the api caches it).
    let env = TestEnv::new(Backend::PgRedis).await;
    let mut api = env.start_api(&[]).await;
    let job = api.submit("sleep", json!({"ms": 1})).await;
    let job_path = format!("/v1/jobs/{}", job["job_id"].as_str().unwrap());
    let ready = api.get("/readyz").await;
    assert_eq!(ready.status, StatusCode::OK, "{}", ready.text);
    let database = env.database_name().expect("a Postgres database").to_owned();

    // Act: the database goes away.
    let outage = DatabaseOutage::begin(&database).await;
    let started = Instant::now();
    let reply = api.get(&job_path).await;

    // Assert: 503 problems with Retry-After, not a hang or a 500.
    let problem = reply.assert_problem(503);
    assert_problem_members(&problem, "GET job while down");
    assert_retry_after(&reply, "GET job while down");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "answered in time"
    );
    let submit = api.post("/v1/reports/sleep", &json!({"ms": 1})).await;
    submit.assert_problem(503);
    assert_retry_after(&submit, "submit while down");
    let not_ready = api.get("/readyz").await;
    not_ready.assert_problem(503);
    assert_retry_after(&not_ready, "readyz while down");
    let health = api.get("/healthz").await;
    assert_eq!(health.status, StatusCode::OK, "the process itself is up");

    // The database comes back: so does the service, without a restart.
    outage.end().await;
    wait::until_ok("ready again", Duration::from_secs(20), async || {
        let ready = api.get("/readyz").await;
        if ready.status == StatusCode::OK {
            Ok(())
        } else {
            Err(ready.text)
        }
    })
    .await;
    let reply = api.get(&job_path).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert!(
        api.process.as_mut().unwrap().try_wait().is_none(),
        "the api survived the outage"
    );
}

// ---------------------------------------------------------------- fuzzing

/// Member names: the real ones of every body, and some near misses.
const NAMES: &[&str] = &[
    "month",
    "ms",
    "fail_times",
    "permanent",
    "from",
    "to",
    "entries",
    "id",
    "date",
    "direction",
    "amount",
    "gst_rate",
    "interstate",
    "party",
    "description",
    "job_id",
    "kind",
    "status",
    "",
    " ",
    "MONTH",
    "mönth",
    "🧾",
    "__proto__",
    "entries[0].amount",
    "a\u{0}b",
];

/// JSON scalars, as text: edge cases of every type.
const SCALARS: &[&str] = &[
    "null",
    "true",
    "false",
    "0",
    "-0",
    "1",
    "-1",
    "0.5",
    "1e3",
    "1E-400",
    "1e400",
    "-1e400",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775809",
    "123456789012345678901234567890.123456789",
    "600000",
    "600001",
    "4294967296",
    r#""""#,
    r#""2026-10""#,
    r#""2026-13""#,
    r#""0000-00""#,
    r#""2026-10-03""#,
    r#""2026-02-30""#,
    r#""sale""#,
    r#""purchase""#,
    r#""1299.00""#,
    r#""-1""#,
    r#""1e3""#,
    r#""18""#,
    r#""0.25""#,
    r#""28""#,
    r#""\ud800""#,
    r#""\u0000""#,
    r#""\uDBFF\uDFFF""#,
    r#""ünïcödé ₹ 🧾""#,
    r#""\"""#,
    r#""𝕳𝖊𝖑𝖑𝖔""#,
    r#""job_00000000000000000000000000000000""#,
];

fn random_string(rng: &mut StdRng) -> String {
    let len = if rng.random_ratio(1, 20) {
        rng.random_range(1000..20_000)
    } else {
        rng.random_range(0..24)
    };
    let text: String = (0..len)
        .map(|_| match rng.random_range(0..4) {
            0 => char::from(rng.random_range(b' '..=b'~')),
            1 => char::from_u32(rng.random_range(0..0x3000)).unwrap_or('?'),
            2 => char::from_u32(rng.random_range(0x1F300..0x1FAFF)).unwrap_or('?'),
            _ => char::from(rng.random_range(b'0'..=b'9')),
        })
        .collect();
    serde_json::to_string(&text).unwrap()
}

fn random_scalar(rng: &mut StdRng) -> String {
    match rng.random_range(0..6) {
        0..=2 => SCALARS[rng.random_range(0..SCALARS.len())].to_owned(),
        3 => rng.random::<i64>().to_string(),
        4 => format!(
            "{:e}",
            rng.random::<f64>() * 10f64.powi(rng.random_range(-300..300))
        ),
        _ => random_string(rng),
    }
}

fn random_name(rng: &mut StdRng) -> String {
    if rng.random_ratio(4, 5) {
        serde_json::to_string(NAMES[rng.random_range(0..NAMES.len())]).unwrap()
    } else {
        random_string(rng)
    }
}

/// A random JSON value, as text.
fn random_json(rng: &mut StdRng, depth: u32) -> String {
    if depth == 0 || rng.random_ratio(2, 5) {
        return random_scalar(rng);
    }
    let n = rng.random_range(0..6);
    if rng.random_bool(0.6) {
        let members: Vec<String> = (0..n)
            .map(|_| format!("{}:{}", random_name(rng), random_json(rng, depth - 1)))
            .collect();
        format!("{{{}}}", members.join(","))
    } else {
        let items: Vec<String> = (0..n).map(|_| random_json(rng, depth - 1)).collect();
        format!("[{}]", items.join(","))
    }
}

/// An object of real member names (each at most once, most of them) with
/// random values, often strings: many such bodies get past decoding.
fn random_shaped(rng: &mut StdRng, names: &[&str], depth: u32) -> String {
    let strings: Vec<&str> = SCALARS
        .iter()
        .copied()
        .filter(|s| s.starts_with('"'))
        .collect();
    let mut members = Vec::new();
    for name in names {
        if rng.random_ratio(3, 20) {
            continue;
        }
        let value = match rng.random_range(0..20) {
            0..=9 => strings[rng.random_range(0..strings.len())].to_owned(),
            10..=12 => random_string(rng),
            13..=17 => random_scalar(rng),
            _ => random_json(rng, depth),
        };
        members.push(format!("{}:{value}", serde_json::to_string(name).unwrap()));
    }
    if rng.random_ratio(1, 10) {
        members.push(format!("{}:{}", random_name(rng), random_scalar(rng)));
    }
    if rng.random_ratio(1, 20) && !members.is_empty() {
        // A member twice.
        members.push(members[0].clone());
    }
    format!("{{{}}}", members.join(","))
}

/// A body for any route: shaped like a real one, random JSON, very deep
/// JSON, or not JSON at all.
fn random_body(rng: &mut StdRng) -> Vec<u8> {
    const ENTRY: &[&str] = &[
        "id",
        "date",
        "direction",
        "amount",
        "gst_rate",
        "interstate",
        "party",
        "description",
    ];
    match rng.random_range(0..20) {
        0..=4 => {
            // The parameters of one kind (of any, for the other routes).
            const KINDS: [&[&str]; 4] = [
                &["month"],
                &["from", "to"],
                &["ms", "fail_times", "permanent"],
                &["month", "ms", "fail_times", "permanent", "from", "to"],
            ];
            let names = KINDS[rng.random_range(0..KINDS.len())];
            random_shaped(rng, names, 2).into_bytes()
        }
        5..=9 => {
            let entries: Vec<String> = (0..rng.random_range(0..4))
                .map(|_| random_shaped(rng, ENTRY, 2))
                .collect();
            format!(r#"{{"entries":[{}]}}"#, entries.join(",")).into_bytes()
        }
        10..=14 => random_json(rng, 5).into_bytes(),
        15 => {
            let depth = rng.random_range(100..400);
            let (open, close) = if rng.random_bool(0.5) {
                (r#"{"entries":"#, "}")
            } else {
                ("[", "]")
            };
            format!("{}1{}", open.repeat(depth), close.repeat(depth)).into_bytes()
        }
        16 => {
            let mut bytes = vec![0u8; rng.random_range(0..300)];
            rng.fill(&mut bytes[..]);
            bytes
        }
        17 => {
            // Valid JSON, cut short or with a byte changed.
            let mut bytes = random_shaped(rng, &["month", "entries"], 2).into_bytes();
            let at = rng.random_range(0..bytes.len());
            if rng.random_bool(0.5) {
                bytes.truncate(at);
            } else {
                bytes[at] = rng.random();
            }
            bytes
        }
        18 => {
            let mut bytes = b"\xEF\xBB\xBF".to_vec();
            bytes.extend(random_json(rng, 2).into_bytes());
            bytes
        }
        _ => format!(
            r#"{{"month":"2026-10"}}{}"#,
            ["", " ", "\n", "x", "{}", "\u{0}"][rng.random_range(0..6)]
        )
        .into_bytes(),
    }
}

fn random_content_type(rng: &mut StdRng) -> Option<&'static str> {
    const OTHERS: &[Option<&str>] = &[
        Some("application/json; charset=utf-8"),
        Some("APPLICATION/JSON"),
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("application/problem+json"),
        Some("multipart/form-data; boundary=x"),
        None,
    ];
    if rng.random_ratio(17, 20) {
        Some("application/json")
    } else {
        OTHERS[rng.random_range(0..OTHERS.len())]
    }
}

/// Never a 5xx; every 4xx a problem document of its own status.
fn fuzz_verdict(reply: &Reply) -> Result<(), String> {
    let status = reply.status.as_u16();
    if status >= 500 {
        return Err(format!("a {status}"));
    }
    if status >= 400 {
        if reply.header("content-type") != Some(PROBLEM_JSON) {
            return Err(format!(
                "a {status} with content-type {:?}",
                reply.header("content-type")
            ));
        }
        let problem: Value = serde_json::from_str(&reply.text)
            .map_err(|e| format!("a {status} whose body is not JSON: {e}"))?;
        for member in ["type", "title", "detail"] {
            if !problem[member].is_string() {
                return Err(format!("a {status} without a string {member}"));
            }
        }
        if problem["status"] != status {
            return Err(format!(
                "a {status} whose status member is {}",
                problem["status"]
            ));
        }
    }
    Ok(())
}

fn preview(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    if text.chars().count() > 600 {
        format!(
            "{}… ({} bytes)",
            text.chars().take(600).collect::<String>(),
            bytes.len()
        )
    } else {
        text.into_owned()
    }
}

const FUZZ_BODIES: usize = 500;

async fn random_bodies_never_get_a_5xx_or_a_non_problem_error(backend: Backend) {
    // Arrange: a fixed seed (FUZZ_SEED overrides it) so a failure reproduces.
    let seed: u64 = std::env::var("FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5EC_2026);
    println!("fuzz seed {seed} (rerun with FUZZ_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);
    let env = TestEnv::new(backend).await;
    let mut api = env.start_embedded().await;
    let real_job = api.submit("sleep", json!({"ms": 1})).await;
    let real_job = real_job["job_id"].as_str().unwrap().to_owned();
    let job_ids = [
        real_job,
        MISSING_JOB.to_owned(),
        "not-a-job".to_owned(),
        "%F0%9F%A7%BE".to_owned(),
        "job_%00".to_owned(),
        "j".repeat(2000),
    ];
    let started = Instant::now();
    let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();

    // Act: every body at every POST route.
    for case in 0..FUZZ_BODIES {
        let body = random_body(&mut rng);
        let content_type = random_content_type(&mut rng);
        let job_id = &job_ids[rng.random_range(0..job_ids.len())];
        let routes = [
            "/v1/reports/gst-summary".to_owned(),
            "/v1/reports/ledger-export".to_owned(),
            "/v1/reports/sleep".to_owned(),
            "/v1/ledger/entries".to_owned(),
            format!("/v1/jobs/{job_id}/cancel"),
        ];
        for path in &routes {
            let reply = send_raw(
                &api,
                Method::POST,
                path,
                Auth::Valid,
                Some((content_type, body.clone())),
            )
            .await;
            *statuses.entry(reply.status.as_u16()).or_default() += 1;
            // Assert, naming everything needed to reproduce.
            if let Err(why) = fuzz_verdict(&reply) {
                panic!(
                    "{why} for seed {seed}, case {case}: POST {path} content-type {content_type:?}\n\
                     body: {}\nanswer: {}",
                    preview(&body),
                    reply.text
                );
            }
        }
    }
    println!("statuses {statuses:?} in {:?}", started.elapsed());

    // Assert: the mix reached past the JSON parser, and the api lives on.
    assert!(statuses.contains_key(&400) && statuses.contains_key(&415));
    assert!(
        statuses
            .keys()
            .any(|s| [200, 202, 404, 409, 422].contains(s)),
        "no body got past decoding: {statuses:?}"
    );
    assert!(
        api.process.as_mut().unwrap().try_wait().is_none(),
        "the api process died"
    );
    let health = api.get("/healthz").await;
    assert_eq!(health.status, StatusCode::OK);
}

// ---------------------------------------------------------------- OpenAPI

/// Every route of the API (see `api::routes::configure`); the dashboard's
/// pages (`/dashboard`) are HTML for people, not part of the API document.
const SERVED: [(&str, &str); 44] = [
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
    ("GET", "/openapi.json"),
    ("POST", "/v1/reports/{kind}"),
    ("GET", "/v1/kinds"),
    ("GET", "/v1/workers"),
    ("GET", "/v1/kinds/{name}"),
    ("PUT", "/v1/kinds/{name}"),
    ("DELETE", "/v1/kinds/{name}"),
    ("POST", "/v1/work/lease"),
    ("POST", "/v1/work/attempts/{token}/heartbeat"),
    ("POST", "/v1/work/attempts/{token}/complete"),
    ("POST", "/v1/work/attempts/{token}/fail"),
    ("POST", "/v1/work/attempts/{token}/cancelled"),
    ("GET", "/v1/jobs"),
    ("GET", "/v1/jobs/{job_id}"),
    ("GET", "/v1/jobs/{job_id}/result"),
    ("POST", "/v1/jobs/{job_id}/cancel"),
    ("POST", "/v1/jobs/{job_id}/retry"),
    ("POST", "/v1/schedules"),
    ("GET", "/v1/schedules"),
    ("GET", "/v1/schedules/{schedule_id}"),
    ("PATCH", "/v1/schedules/{schedule_id}"),
    ("DELETE", "/v1/schedules/{schedule_id}"),
    ("POST", "/v1/schedules/{schedule_id}/pause"),
    ("POST", "/v1/schedules/{schedule_id}/resume"),
    ("POST", "/v1/ledger/entries"),
    ("POST", "/v1/webhooks"),
    ("GET", "/v1/webhooks"),
    ("GET", "/v1/webhooks/{webhook_id}"),
    ("DELETE", "/v1/webhooks/{webhook_id}"),
    ("GET", "/v1/webhooks/{webhook_id}/deliveries"),
    ("POST", "/v1/webhooks/{webhook_id}/enable"),
    ("POST", "/v1/webhooks/{webhook_id}/rotate-secret"),
    ("PUT", "/v1/filing-endpoint"),
    ("GET", "/v1/filing-endpoint"),
    ("GET", "/v1/periods/{month}"),
    ("POST", "/v1/periods/{month}/reopen"),
    ("GET", "/v1/key"),
    ("GET", "/v1/keys"),
    ("POST", "/v1/keys"),
    ("DELETE", "/v1/keys/{key_id}"),
    ("GET", "/v1/audit"),
];

const HTTP_METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "patch", "head", "options", "trace",
];

/// Whether the server answered that nothing serves this method and path.
/// The job ids filled in are real, so a served route never answers 404.
fn is_no_route(reply: &Reply) -> bool {
    matches!(reply.status.as_u16(), 404 | 405)
}

/// Every error response of an operation is a `Problem`, and those that
/// carry `Retry-After` or `WWW-Authenticate` say so.
fn assert_errors_are_problems(method: &str, path: &str, operation: &Value) {
    let responses = operation["responses"].as_object().expect("responses");
    assert!(
        responses.contains_key("default"),
        "{method} {path}: no default (problem) response"
    );
    for (status, response) in responses {
        if !(status == "default" || status.starts_with('4') || status.starts_with('5')) {
            continue;
        }
        let context = format!("{method} {path} {status}");
        assert_eq!(
            response["content"][PROBLEM_JSON]["schema"]["$ref"], "#/components/schemas/Problem",
            "{context}: {response}"
        );
        assert_eq!(
            response["content"].as_object().map(|c| c.len()),
            Some(1),
            "{context}"
        );
        let header = match status.as_str() {
            "429" | "503" => Some("Retry-After"),
            "401" => Some("WWW-Authenticate"),
            _ => None,
        };
        if let Some(header) = header {
            assert!(
                response["headers"][header].is_object(),
                "{context}: no {header} header"
            );
        }
    }
    if path.starts_with("/v1/") {
        for status in ["401", "429", "503"] {
            assert!(
                responses.contains_key(status),
                "{method} {path}: no {status}"
            );
        }
    }
}

async fn the_openapi_document_lists_exactly_the_served_routes(backend: Backend) {
    // Arrange: a real job, so paths with a job id name one.
    let env = TestEnv::new(backend).await;
    let api = env
        .start_api(&[
            ("EMBEDDED_WORKER", "false"),
            ("WEBHOOK_ALLOW_PRIVATE", "true"),
        ])
        .await;
    let job = api.submit("gst-summary", json!({"month": "2026-10"})).await;
    let job_id = job["job_id"].as_str().unwrap().to_owned();
    // Two real webhooks: one for DELETE, one for the routes that read it.
    let mut webhook_ids = Vec::new();
    for _ in 0..2 {
        let reply = api
            .post("/v1/webhooks", &json!({"url": "http://127.0.0.1:9/hook"}))
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
        webhook_ids.push(reply.json()["id"].as_str().unwrap().to_owned());
    }
    // Two real schedules, likewise.
    let mut schedule_ids = Vec::new();
    for _ in 0..2 {
        let reply = api
            .post(
                "/v1/schedules",
                &json!({"kind": "sleep", "params": {"ms": 1}, "cron": "0 6 * * *", "timezone": "UTC"}),
            )
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
        schedule_ids.push(reply.json()["schedule_id"].as_str().unwrap().to_owned());
    }
    // A filing endpoint, so reading it finds one.
    let reply = api
        .send(
            Method::PUT,
            "/v1/filing-endpoint",
            Some(&json!({"url": "http://127.0.0.1:9/returns"})),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    // A key of the tenant's besides the one in use, for the route that
    // revokes one.
    let store = env.store().await;
    let spare_key = store
        .create_api_key("tenant-a", &store::Actor::Command("test"))
        .await
        .expect("a key")
        .key_id;
    store.close().await;

    // Act: the document, fetched without a key.
    let reply = Api::read(api.client.get(api.url("/openapi.json"))).await;

    // Assert: OpenAPI 3.1.
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert!(
        reply
            .header("content-type")
            .is_some_and(|ct| ct.starts_with("application/json")),
        "{:?}",
        reply.header("content-type")
    );
    let doc = reply.json();
    let version = doc["openapi"].as_str().unwrap_or_default();
    assert!(version.starts_with("3.1"), "openapi is {version:?}");

    let mut documented = BTreeSet::new();
    let mut operation_ids = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("a path item") {
            if !HTTP_METHODS.contains(&method.as_str()) {
                continue;
            }
            let operation_id = operation["operationId"].as_str().unwrap_or_default();
            assert!(
                operation_ids.insert(operation_id.to_owned()) && !operation_id.is_empty(),
                "{method} {path}: operationId {operation_id:?} is missing or not unique"
            );
            assert_errors_are_problems(method, path, operation);
            let needs_key = path.starts_with("/v1/");
            let has_security = operation["security"]
                .as_array()
                .is_some_and(|s| s.iter().any(|r| r.get("bearer").is_some()));
            assert_eq!(
                has_security, needs_key,
                "{method} {path}: bearer security documented iff it needs a key"
            );
            documented.insert((method.to_uppercase(), path.clone()));
        }
    }
    assert!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"]
            .as_str()
            .is_some_and(|s| s.eq_ignore_ascii_case("bearer"))
    );

    // Every served route is documented ...
    for (method, path) in SERVED {
        assert!(
            documented.contains(&(method.to_owned(), path.to_owned())),
            "{method} {path} is served but not in the document: {documented:?}"
        );
    }

    // ... and every documented route is served. (The predicate does tell:
    // an undocumented path and a wrong method both count as no route.)
    let no_route = api.get("/v1/not-a-route").await;
    assert!(is_no_route(&no_route), "{}", no_route.text);
    let wrong_method = api.get("/v1/reports/gst-summary").await;
    assert!(is_no_route(&wrong_method), "{}", wrong_method.text);
    for (method, path) in &documented {
        let deleted = usize::from(method != "DELETE");
        let filled = path
            .replace("{job_id}", &job_id)
            .replace("{webhook_id}", &webhook_ids[deleted])
            .replace("{schedule_id}", &schedule_ids[deleted])
            .replace("{kind}", "gst-summary")
            .replace("{name}", "gst-summary")
            .replace("{token}", &format!("{job_id}.1"))
            .replace("{month}", "2026-10")
            .replace("{key_id}", &spare_key);
        assert!(
            !filled.contains('{'),
            "{path}: a path parameter this test does not know how to fill"
        );
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        let body = (method == Method::POST).then(|| (Some("application/json"), b"{}".to_vec()));
        let reply = send_raw(&api, method.clone(), &filled, Auth::Valid, body).await;
        assert!(
            !is_no_route(&reply),
            "{method} {path} is documented but not served: {} {}",
            reply.status,
            reply.text
        );
    }

    // The problem schema names the members of every problem, and those of
    // a validation problem and of a ledger conflict.
    let problem = &doc["components"]["schemas"]["Problem"];
    let required: BTreeSet<&str> = problem["required"]
        .as_array()
        .expect("Problem.required")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        required,
        BTreeSet::from(["type", "title", "status", "detail"])
    );
    assert_eq!(
        problem["properties"]["errors"]["items"]["$ref"],
        "#/components/schemas/FieldError"
    );
    assert_eq!(problem["properties"]["ids"]["items"]["type"], "string");

    // The job object's schema names every member a real job object has.
    let properties = doc["components"]["schemas"]["JobObject"]["properties"]
        .as_object()
        .expect("components.schemas.JobObject.properties");
    let documented_fields: BTreeSet<&str> = properties.keys().map(String::as_str).collect();
    let real = api.job(&job_id).await;
    let real_fields: BTreeSet<&str> = real
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let undocumented: Vec<&&str> = real_fields.difference(&documented_fields).collect();
    assert!(
        undocumented.is_empty(),
        "job object members missing from JobObject: {undocumented:?}"
    );
    for field in [
        "job_id",
        "kind",
        "params",
        "status",
        "attempts",
        "progress",
        "created_at",
        "started_at",
        "finished_at",
        "result_url",
        "error",
        "cancel_requested",
    ] {
        assert!(
            real_fields.contains(field),
            "docs/api.md's {field} is not in a job object"
        );
    }
}

crate::on_both_backends!(
    every_row_of_the_error_table_is_a_problem_and_stores_nothing,
    a_wrong_method_on_a_known_path_is_still_a_problem,
    body_limits_are_per_route_and_include_the_limit_itself,
    random_bodies_never_get_a_5xx_or_a_non_problem_error,
    the_openapi_document_lists_exactly_the_served_routes,
);
