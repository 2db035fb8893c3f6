//! Every route needs the scope `docs/api.md` gives it: the table there
//! (Authentication and tenants, Scopes) is read here, held against the
//! OpenAPI document (every operation with a key has a row, and its
//! `security` names the row's scope), and walked with a key of each scope.

use std::collections::BTreeMap;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use store::{KeyScope, Scope};

use crate::common::{Api, Backend, Reply, TestEnv, key_known_to, send_with_key, with_store_keys};

/// A row of the table: method, path (a template, or a concrete path for
/// a rule beyond its template), and the scope (`None`: any key).
#[derive(Debug, Clone)]
struct Row {
    method: Method,
    path: String,
    scope: Option<Scope>,
}

/// The rows of the table in `docs/api.md` that follows `| Route | Scope |`.
fn documented_rows() -> Vec<Row> {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/api.md"))
        .expect("docs/api.md");
    let table = docs
        .split_once("| Route | Scope |")
        .expect("the scope table in docs/api.md")
        .1;
    let mut rows = Vec::new();
    for line in table.lines().skip(2) {
        let Some(line) = line.strip_prefix('|') else {
            break;
        };
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let route = cells[0].trim_matches('`');
        let (method, path) = route.split_once(' ').expect("METHOD /path");
        let scope = match cells[1] {
            "any" => None,
            scope => Some(
                Scope::parse(scope.trim_matches('`'))
                    .unwrap_or_else(|| panic!("{scope:?} is not a scope")),
            ),
        };
        rows.push(Row {
            method: method.parse().expect("a method"),
            path: path.to_owned(),
            scope,
        });
    }
    assert!(rows.len() > 30, "the table has {} rows", rows.len());
    rows
}

/// Whether a concrete path is one of a template's.
fn fits(template: &str, path: &str) -> bool {
    let (template, path): (Vec<&str>, Vec<&str>) =
        (template.split('/').collect(), path.split('/').collect());
    template.len() == path.len()
        && template
            .iter()
            .zip(&path)
            .all(|(t, p)| t == p || (t.starts_with('{') && t.ends_with('}')))
}

/// A path to call for a row: each parameter filled with a value of its
/// shape that names nothing stored.
fn concrete(path: &str) -> String {
    path.split('/')
        .map(|part| match part {
            "{kind}" => "gst-summary",
            "{job_id}" => "job_00000000000000000000000000000000",
            "{name}" => "sales-export",
            "{token}" => "not-a-token",
            "{schedule_id}" => "sch_00000000000000000000000000000000",
            "{webhook_id}" => "wh_00000000000000000000000000000000",
            "{month}" => "2026-10",
            "{key_id}" => "key_0000000000000000",
            part if part.starts_with('{') => panic!("no value for {part}: add one here"),
            part => part,
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[tokio::test]
async fn every_route_answers_each_scope_as_docs_api_md_says() {
    let env = TestEnv::new(Backend::Sqlite).await;
    // Keys of the store alone (no API_KEYS), as the API makes them.
    let api = env
        .start_api(&[("EMBEDDED_WORKER", "true"), ("API_KEYS", "")])
        .await;
    let rows = documented_rows();

    // Every operation that takes a key has its row, with its scope in
    // the document; every row's template is an operation.
    let document = reqwest::get(api.url("/openapi.json"))
        .await
        .expect("openapi")
        .json::<Value>()
        .await
        .expect("json");
    let mut operations = BTreeMap::new();
    for (path, item) in document["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("an item") {
            let Some(security) = operation.get("security") else {
                continue;
            };
            let scopes: Vec<String> = security[0]["bearer"]
                .as_array()
                .expect("bearer scopes")
                .iter()
                .map(|s| s.as_str().expect("a scope").to_owned())
                .collect();
            operations.insert((method.to_uppercase(), path.clone()), scopes);
        }
    }
    assert!(operations.len() > 30, "{operations:?}");
    for ((method, path), scopes) in &operations {
        let row = rows
            .iter()
            .find(|row| row.method.as_str() == method && row.path == *path)
            .unwrap_or_else(|| panic!("{method} {path} has no row in docs/api.md's scope table"));
        let documented: Vec<String> = row.scope.iter().map(|s| s.name().to_owned()).collect();
        assert_eq!(
            *scopes, documented,
            "{method} {path}: the document's security"
        );
    }
    for row in &rows {
        let served = operations.keys().any(|(method, path)| {
            method == row.method.as_str() && (*path == row.path || fits(path, &row.path))
        });
        assert!(
            served,
            "{} {} is in the table but not served",
            row.method, row.path
        );
    }

    // A key of each scope, and one of full rights.
    let mut keys = Vec::new();
    for scope in Scope::ALL
        .map(|scope| KeyScope::of(&[scope], None))
        .into_iter()
        .chain([KeyScope::full()])
    {
        let (key, _) = key_known_to(&env, &api, "tenant-a", &scope).await;
        keys.push((scope, key));
    }

    let mut checked = 0;
    for row in &rows {
        let path = concrete(&row.path);
        for (scope, key) in &keys {
            let mut request = key
                .request(row.method.clone(), &path)
                .header("idempotency-key", format!("scopes-{checked}"));
            if [Method::POST, Method::PUT, Method::PATCH].contains(&row.method) {
                request = request.json(&json!({}));
            }
            let reply = Api::read(request).await;
            let allowed = row.scope.is_none_or(|needed| scope.allows(needed));
            let context = format!(
                "{} {path} with a key of {}: {} {}",
                row.method,
                scope.describe(),
                reply.status,
                reply.text
            );
            assert_ne!(reply.status, StatusCode::UNAUTHORIZED, "{context}");
            if allowed {
                assert_ne!(reply.status, StatusCode::FORBIDDEN, "{context}");
                assert!(!reply.status.is_server_error(), "{context}");
            } else {
                let problem = reply.assert_problem(403);
                assert_eq!(problem["type"], "/problems/forbidden", "{context}");
                let needed = row.scope.map(Scope::name);
                assert_eq!(problem["required_scope"].as_str(), needed, "{context}");
            }
            checked += 1;
        }
    }
    assert_eq!(checked, rows.len() * keys.len());
}

fn assert_needs(reply: &Reply, scope: &str) {
    let problem = reply.assert_problem(403);
    assert_eq!(problem["required_scope"], scope, "{problem}");
}

#[tokio::test]
async fn closing_a_month_needs_close_however_the_period_close_is_made() {
    let env = TestEnv::new(Backend::Sqlite).await;
    let (api, full, _) = with_store_keys(&env).await;
    let submitter = KeyScope::of(&[Scope::Read, Scope::Submit], None);
    let (submitter, _) = key_known_to(&env, &api, "tenant-a", &submitter).await;
    let manager = KeyScope::of(&[Scope::Read, Scope::Manage], None);
    let (manager, _) = key_known_to(&env, &api, "tenant-a", &manager).await;
    let endpoint = json!({"url": "http://127.0.0.1:9/returns"});
    let set = send_with_key(
        &full,
        Method::PUT,
        "/v1/filing-endpoint",
        Some(endpoint),
        "f",
    )
    .await;
    assert_eq!(set.status, StatusCode::OK, "{}", set.text);
    let month = json!({"month": "2026-10"});

    // A submit of it.
    let path = "/v1/reports/period-close";
    assert_needs(
        &send_with_key(&submitter, Method::POST, path, Some(month.clone()), "c1").await,
        "close",
    );
    let closing = send_with_key(&full, Method::POST, path, Some(month.clone()), "c2").await;
    assert_eq!(closing.status, StatusCode::ACCEPTED, "{}", closing.text);
    let job_id = closing.json()["job_id"]
        .as_str()
        .expect("job_id")
        .to_owned();

    // A retry of one, whatever its status: `submit` alone is not enough.
    let retry = format!("/v1/jobs/{job_id}/retry");
    assert_needs(
        &send_with_key(&submitter, Method::POST, &retry, None, "r1").await,
        "close",
    );
    let by_full = send_with_key(&full, Method::POST, &retry, None, "r2").await;
    assert_ne!(by_full.status, StatusCode::FORBIDDEN, "{}", by_full.text);

    // A schedule of one, made or changed into one: `manage` alone is not
    // enough, and nothing is stored.
    let schedule =
        json!({"kind": "period-close", "params": month, "cron": "0 6 1 1 *", "timezone": "UTC"});
    let refused = send_with_key(
        &manager,
        Method::POST,
        "/v1/schedules",
        Some(schedule.clone()),
        "s1",
    )
    .await;
    assert_needs(&refused, "close");
    let made = send_with_key(&full, Method::POST, "/v1/schedules", Some(schedule), "s2").await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.text);
    let sleeping =
        json!({"kind": "sleep", "params": {"ms": 1}, "cron": "0 6 1 1 *", "timezone": "UTC"});
    let sleeping = send_with_key(
        &manager,
        Method::POST,
        "/v1/schedules",
        Some(sleeping),
        "s3",
    )
    .await;
    assert_eq!(sleeping.status, StatusCode::CREATED, "{}", sleeping.text);
    let id = sleeping.json()["schedule_id"]
        .as_str()
        .expect("id")
        .to_owned();
    let into_close = json!({"kind": "period-close", "params": {"month": "2026-10"}});
    let path = format!("/v1/schedules/{id}");
    assert_needs(
        &send_with_key(&manager, Method::PATCH, &path, Some(into_close), "s4").await,
        "close",
    );
    assert_eq!(manager.get(&path).await.json()["kind"], "sleep");
    let schedules = full.get("/v1/schedules").await.json();
    assert_eq!(
        schedules["data"].as_array().expect("data").len(),
        2,
        "{schedules}"
    );
}
