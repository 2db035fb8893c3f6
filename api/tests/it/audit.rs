//! The audit log (`docs/api.md`, Audit log): every change to a tenant's
//! setup leaves one entry, naming the key and the request that made it;
//! a replay leaves none; `GET /v1/audit` filters and pages them. A month
//! closed and reopened is checked in the sagas' suite.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use store::KeyScope;

use crate::common::{Api, Backend, Reply, TestEnv, key_known_to, send_with_key, with_store_keys};

/// Sends a change with an Idempotency-Key of its own, asserting success.
async fn change(api: &Api, method: Method, path: &str, body: Option<Value>, key: &str) -> Reply {
    let reply = send_with_key(api, method, path, body, key).await;
    assert!(
        reply.status.is_success(),
        "{path}: {} {}",
        reply.status,
        reply.text
    );
    reply
}

/// The tenant's entries of one action, newest first.
async fn entries(api: &Api, action: &str) -> Vec<Value> {
    let reply = api
        .get(&format!("/v1/audit?action={action}&limit=200"))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    reply.json()["data"].as_array().expect("data").clone()
}

/// The one entry of `action` for `target`, made by the key in the request
/// whose answer was `reply`.
async fn assert_recorded(
    api: &Api,
    key_id: &str,
    action: &str,
    target: Option<&str>,
    reply: &Reply,
) -> Value {
    let found: Vec<Value> = entries(api, action)
        .await
        .into_iter()
        .filter(|entry| entry["target"].as_str() == target)
        .collect();
    assert_eq!(found.len(), 1, "{action} of {target:?}: {found:?}");
    let entry = found[0].clone();
    assert_eq!(entry["actor"], "key", "{entry}");
    assert_eq!(entry["key_id"], key_id, "{entry}");
    assert_eq!(entry["deployment_wide"], false, "{entry}");
    let request_id = reply.header("x-request-id").expect("an X-Request-Id");
    assert!(request_id.starts_with("req_"), "{request_id}");
    assert_eq!(entry["request_id"], request_id, "{entry}");
    entry
}

async fn every_change_leaves_one_entry_naming_its_key_and_request(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let (_process, api, key_id) = with_store_keys(&env).await;

    // Keys: made (once, though the request is sent twice) and revoked.
    let made = change(
        &api,
        Method::POST,
        "/v1/keys",
        Some(json!({"scopes": ["read"]})),
        "k1",
    )
    .await;
    let made_key = made.json();
    let new_id = made_key["id"].as_str().expect("id").to_owned();
    assert!(
        made_key["key"]
            .as_str()
            .is_some_and(|k| k.starts_with("rk_")),
        "{made_key}"
    );
    let replay = change(
        &api,
        Method::POST,
        "/v1/keys",
        Some(json!({"scopes": ["read"]})),
        "k1",
    )
    .await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.json()["id"], new_id.as_str());
    assert_eq!(
        replay.json()["key"],
        Value::Null,
        "a replay never shows the key"
    );
    let entry = assert_recorded(&api, &key_id, "key.created", Some(&new_id), &made).await;
    assert_eq!(entry["details"]["scopes"], "read");
    let revoked = change(
        &api,
        Method::DELETE,
        &format!("/v1/keys/{new_id}"),
        None,
        "k2",
    )
    .await;
    assert_recorded(&api, &key_id, "key.revoked", Some(&new_id), &revoked).await;

    // Webhooks: registered, enabled, secret rotated, deleted.
    let hook = json!({"url": "http://127.0.0.1:9/hook"});
    let registered = change(&api, Method::POST, "/v1/webhooks", Some(hook), "w1").await;
    let webhook_id = registered.json()["id"].as_str().expect("id").to_owned();
    let path = format!("/v1/webhooks/{webhook_id}");
    let enabled = change(&api, Method::POST, &format!("{path}/enable"), None, "w2").await;
    let rotated = change(
        &api,
        Method::POST,
        &format!("{path}/rotate-secret"),
        None,
        "w3",
    )
    .await;
    let deleted = change(&api, Method::DELETE, &path, None, "w4").await;
    let entry = assert_recorded(
        &api,
        &key_id,
        "webhook.registered",
        Some(&webhook_id),
        &registered,
    )
    .await;
    assert_eq!(entry["details"]["url"], "http://127.0.0.1:9/hook");
    assert_recorded(
        &api,
        &key_id,
        "webhook.enabled",
        Some(&webhook_id),
        &enabled,
    )
    .await;
    let entry = assert_recorded(
        &api,
        &key_id,
        "webhook.secret_rotated",
        Some(&webhook_id),
        &rotated,
    )
    .await;
    let secret = rotated.json()["secret"]
        .as_str()
        .expect("secret")
        .to_owned();
    assert!(!entry.to_string().contains(&secret), "no secret in {entry}");
    assert_recorded(
        &api,
        &key_id,
        "webhook.deleted",
        Some(&webhook_id),
        &deleted,
    )
    .await;

    // Schedules: created, changed, paused, resumed, deleted.
    let schedule =
        json!({"kind": "sleep", "params": {"ms": 1}, "cron": "0 6 1 1 *", "timezone": "UTC"});
    let created = change(&api, Method::POST, "/v1/schedules", Some(schedule), "s1").await;
    let schedule_id = created.json()["schedule_id"]
        .as_str()
        .expect("id")
        .to_owned();
    let path = format!("/v1/schedules/{schedule_id}");
    let changed = change(
        &api,
        Method::PATCH,
        &path,
        Some(json!({"cron": "0 7 1 1 *"})),
        "s2",
    )
    .await;
    let paused = change(&api, Method::POST, &format!("{path}/pause"), None, "s3").await;
    let resumed = change(&api, Method::POST, &format!("{path}/resume"), None, "s4").await;
    let deleted = change(&api, Method::DELETE, &path, None, "s5").await;
    let entry = assert_recorded(
        &api,
        &key_id,
        "schedule.created",
        Some(&schedule_id),
        &created,
    )
    .await;
    assert_eq!(entry["details"]["cron"], "0 6 1 1 *");
    let entry = assert_recorded(
        &api,
        &key_id,
        "schedule.changed",
        Some(&schedule_id),
        &changed,
    )
    .await;
    assert_eq!(entry["details"]["cron"], "0 7 1 1 *");
    assert_recorded(
        &api,
        &key_id,
        "schedule.paused",
        Some(&schedule_id),
        &paused,
    )
    .await;
    assert_recorded(
        &api,
        &key_id,
        "schedule.resumed",
        Some(&schedule_id),
        &resumed,
    )
    .await;
    assert_recorded(
        &api,
        &key_id,
        "schedule.deleted",
        Some(&schedule_id),
        &deleted,
    )
    .await;

    // The filing endpoint.
    let endpoint = json!({"url": "http://127.0.0.1:9/file"});
    let set = change(
        &api,
        Method::PUT,
        "/v1/filing-endpoint",
        Some(endpoint),
        "f1",
    )
    .await;
    let entry = assert_recorded(&api, &key_id, "filing_endpoint.set", None, &set).await;
    let secret = set.json()["secret"].as_str().expect("secret").to_owned();
    assert!(!entry.to_string().contains(&secret), "no secret in {entry}");

    // Kinds: registered (the same declaration again changes nothing and
    // records nothing), deleted.
    let declaration = json!({"params_schema": {"type": "object"}, "timeout_secs": 10});
    let path = "/v1/kinds/sales-export";
    let registered = change(&api, Method::PUT, path, Some(declaration.clone()), "n1").await;
    change(&api, Method::PUT, path, Some(declaration), "n2").await;
    let deleted = change(&api, Method::DELETE, path, None, "n3").await;
    assert_recorded(
        &api,
        &key_id,
        "kind.registered",
        Some("sales-export"),
        &registered,
    )
    .await;
    assert_recorded(
        &api,
        &key_id,
        "kind.deleted",
        Some("sales-export"),
        &deleted,
    )
    .await;

    // A key made on the server's command line is the command's.
    let run = env.run_api(
        &["keys", "create", "--tenant", "tenant-a", "--scope", "read"],
        &[],
    );
    assert!(run.status.success(), "{}", run.stderr);
    let by_command: Vec<Value> = entries(&api, "key.created")
        .await
        .into_iter()
        .filter(|entry| entry["actor"] == "command")
        .collect();
    // The test's own key, and this one.
    let words: Vec<&str> = by_command
        .iter()
        .map(|e| e["request_id"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(words, ["api keys create", "test"], "{by_command:?}");

    // Another tenant sees none of it.
    let (globex, _) = key_known_to(&env, &api, "tenant-b", &KeyScope::full()).await;
    let seen = globex.get("/v1/audit").await.json();
    let seen = seen["data"].as_array().expect("data");
    assert_eq!(seen.len(), 1, "only its own key's making: {seen:?}");

    // Filters and pages.
    let all = api.get("/v1/audit?limit=200").await.json()["data"]
        .as_array()
        .expect("data")
        .clone();
    assert_eq!(all.len(), 16, "{all:#?}");
    let ids: Vec<&str> = all.iter().map(|e| e["id"].as_str().expect("id")).collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(ids, sorted, "newest first");
    let mut paged = Vec::new();
    let mut cursor = String::new();
    loop {
        let page = api
            .get(&format!("/v1/audit?limit=4&cursor={cursor}"))
            .await
            .json();
        paged.extend(
            page["data"]
                .as_array()
                .expect("data")
                .iter()
                .map(|e| e["id"].clone()),
        );
        match page["next_cursor"].as_str() {
            Some(next) => cursor = next.to_owned(),
            None => break,
        }
    }
    assert_eq!(paged.len(), all.len());
    let middle = all[9]["at"].as_str().expect("at");
    let since = api
        .get(&format!("/v1/audit?limit=200&since={middle}"))
        .await
        .json();
    let since = since["data"].as_array().expect("data");
    assert!(
        since.iter().all(|e| e["at"].as_str() >= Some(middle)),
        "{since:?}"
    );
    assert!(
        since.len() >= 10 && since.len() < all.len(),
        "{}",
        since.len()
    );
    let until = api
        .get(&format!("/v1/audit?limit=200&until={middle}"))
        .await
        .json();
    let until = until["data"].as_array().expect("data");
    assert_eq!(since.len() + until.len(), all.len());
    let bad = api.get("/v1/audit?action=key.made&since=yesterday").await;
    let problem = bad.assert_problem(422);
    let fields: Vec<&str> = problem["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .map(|e| e["field"].as_str().expect("field"))
        .collect();
    assert_eq!(fields, ["action", "since"]);
}

crate::on_both_backends!(every_change_leaves_one_entry_naming_its_key_and_request);
