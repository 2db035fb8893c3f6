//! The dashboard at the HTTP level: its session cookie, CSRF checks, what
//! a tenant sees, its actions, and its answers to bad input. The browser
//! test (`dashboard_browser.rs`) drives the same pages in Chromium.

use reqwest::{StatusCode, header, redirect::Policy};
use serde_json::json;

use crate::common::{Api, Backend, KEY_A, KEY_B, Reply, TestEnv, key_known_to, moment_sql, wait};

const FIVE_SECONDS: std::time::Duration = std::time::Duration::from_secs(5);

/// A client that keeps the session cookie and does not follow redirects,
/// so a test sees each 303.
struct Visitor {
    client: reqwest::Client,
    base: String,
    cookie: Option<String>,
}

impl Visitor {
    fn new(api: &Api) -> Self {
        Visitor {
            client: reqwest::Client::builder()
                .redirect(Policy::none())
                .build()
                .expect("a client"),
            base: api.base.clone(),
            cookie: None,
        }
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Reply {
        let request = match &self.cookie {
            Some(cookie) => request.header(header::COOKIE, cookie),
            None => request,
        };
        Api::read(request).await
    }

    async fn get(&self, path: &str) -> Reply {
        self.send(self.client.get(format!("{}{path}", self.base)))
            .await
    }

    /// A form as a browser sends it from one of the dashboard's pages.
    async fn post(&self, path: &str, fields: &[(&str, &str)]) -> Reply {
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(fields)
            .finish();
        self.send(
            self.client
                .post(format!("{}{path}", self.base))
                .header(header::ORIGIN, &self.base)
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(body),
        )
        .await
    }

    async fn sign_in(&mut self, key: &str) -> Reply {
        let reply = self.post("/dashboard/sign-in", &[("api_key", key)]).await;
        if let Some(set) = reply.header("set-cookie") {
            self.cookie = set.split(';').next().map(str::to_owned);
        }
        reply
    }
}

/// The value of the first hidden field `name` in a page.
fn field(page: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let start = page
        .find(&marker)
        .unwrap_or_else(|| panic!("no {name} field in {page}"))
        + marker.len();
    page[start..].split('"').next().expect("a value").to_owned()
}

/// The value of the hidden field `name` in the form that posts to `action`.
fn form_field(page: &str, action: &str, name: &str) -> String {
    let form = page
        .split("<form")
        .find(|form| form.contains(&format!("action=\"{action}\"")))
        .unwrap_or_else(|| panic!("no form to {action} in {page}"));
    field(form, name)
}

fn assert_redirect(reply: &Reply, to: &str) {
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.text);
    assert_eq!(reply.header("location"), Some(to), "{:?}", reply.headers);
}

/// An HTML page with this status that says `message`.
fn assert_page(reply: &Reply, status: u16, message: &str) {
    assert_eq!(reply.status.as_u16(), status, "{}", reply.text);
    assert_eq!(
        reply.header("content-type"),
        Some("text/html; charset=utf-8"),
        "{}",
        reply.text
    );
    assert!(
        reply.text.contains(message),
        "the page does not say {message:?}: {}",
        reply.text
    );
}

async fn signing_in_opens_a_strict_session_that_signing_out_closes(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;
    let mut visitor = Visitor::new(&api);

    assert_redirect(&visitor.get("/dashboard").await, "/dashboard/sign-in");
    let form = visitor.get("/dashboard/sign-in").await;
    assert_page(&form, 200, "Sign in");
    let csp = form.header("content-security-policy").expect("a CSP");
    assert!(csp.contains("default-src 'none'"), "{csp}");
    assert_page(
        &visitor.sign_in("not-a-key-of-anyone").await,
        401,
        "That API key is not valid.",
    );
    assert!(visitor.cookie.is_none());

    let signed_in = visitor.sign_in(KEY_A).await;
    assert_redirect(&signed_in, "/dashboard");
    let cookie = signed_in.header("set-cookie").expect("a cookie");
    for attribute in [
        "HttpOnly",
        "SameSite=Strict",
        "Path=/dashboard",
        "Max-Age=43200",
    ] {
        assert!(cookie.contains(attribute), "{attribute} missing: {cookie}");
    }
    assert!(!cookie.contains("Secure"), "plain http: {cookie}");
    let overview = visitor.get("/dashboard").await;
    assert_page(&overview, 200, "tenant-a");
    assert_eq!(overview.header("cache-control"), Some("no-store"));
    assert_redirect(&visitor.get("/dashboard/sign-in").await, "/dashboard");
    // Everything the page loads or links to is the dashboard's own.
    for attribute in ["src=\"", "href=\"", "action=\""] {
        for value in overview.text.split(attribute).skip(1) {
            assert!(value.starts_with("/dashboard"), "{attribute}{value}");
        }
    }
    for (asset, content_type) in [
        ("/dashboard/assets/dashboard.css", "text/css; charset=utf-8"),
        (
            "/dashboard/assets/dashboard.js",
            "text/javascript; charset=utf-8",
        ),
    ] {
        let reply = visitor.get(asset).await;
        assert_eq!(reply.status, StatusCode::OK, "{asset}");
        assert_eq!(reply.header("content-type"), Some(content_type));
        assert!(!reply.text.contains("http://") && !reply.text.contains("https://"));
    }

    // Without the session's CSRF token a form does nothing.
    let forged = visitor
        .post("/dashboard/sign-out", &[("csrf_token", "guess")])
        .await;
    assert_page(&forged, 403, "nothing was done");
    assert_page(&visitor.get("/dashboard").await, 200, "tenant-a");
    // Nor from another site's page, even with the token.
    let csrf = field(&overview.text, "csrf_token");
    let cross_site = visitor
        .send(
            visitor
                .client
                .post(format!("{}/dashboard/sign-out", visitor.base))
                .header(header::ORIGIN, "https://elsewhere.example")
                .form(&[("csrf_token", csrf.as_str())]),
        )
        .await;
    assert_page(&cross_site, 403, "another site");

    let out = visitor
        .post("/dashboard/sign-out", &[("csrf_token", &csrf)])
        .await;
    assert_redirect(&out, "/dashboard/sign-in?reason=signed-out");
    assert!(
        out.header("set-cookie")
            .unwrap()
            .contains("receipt_session=;")
    );
    assert_redirect(
        &visitor.get("/dashboard").await,
        "/dashboard/sign-in?reason=expired",
    );

    // Behind an https proxy the cookie is Secure.
    let https = visitor
        .send(
            visitor
                .client
                .post(format!("{}/dashboard/sign-in", visitor.base))
                .header("x-forwarded-proto", "https")
                .form(&[("api_key", KEY_A)]),
        )
        .await;
    assert!(
        https.header("set-cookie").unwrap().contains("Secure"),
        "{:?}",
        https.headers
    );
}

async fn a_session_ends_when_its_key_is_revoked_or_when_it_expires(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;
    let created = env.run_api(&["keys", "create", "--tenant", "tenant-a"], &[]);
    assert!(created.status.success(), "{}", created.stderr);
    let key = created
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("API key: "))
        .expect("the new key")
        .to_owned();
    let key_id = created
        .stdout
        .split_whitespace()
        .find(|word| word.starts_with("key_"))
        .expect("its id")
        .to_owned();
    let mut visitor = Visitor::new(&api);
    wait::until_true("the new key works", FIVE_SECONDS, async || {
        visitor.sign_in(&key).await.status == StatusCode::SEE_OTHER
    })
    .await;
    assert_page(&visitor.get("/dashboard").await, 200, "tenant-a");

    let revoked = env.run_api(&["keys", "revoke", &key_id], &[]);
    assert!(revoked.status.success(), "{}", revoked.stderr);
    let reply = wait::until("the session ended with its key", FIVE_SECONDS, async || {
        let reply = visitor.get("/dashboard").await;
        (reply.status == StatusCode::SEE_OTHER).then_some(reply)
    })
    .await;
    assert_redirect(&reply, "/dashboard/sign-in?reason=revoked");
    let reason = visitor.get("/dashboard/sign-in?reason=revoked").await;
    assert_page(&reason, 200, "no longer valid");

    // A session past its time: pages lead to the sign-in page, and a form
    // of that session says it expired, and does nothing.
    visitor.sign_in(KEY_A).await;
    let job = api.submit("sleep", json!({"ms": 20000})).await;
    let job_id = job["job_id"].as_str().unwrap();
    let page = visitor.get(&format!("/dashboard/jobs/{job_id}")).await;
    assert_page(&page, 200, job_id);
    env.execute_sql(&format!(
        "UPDATE dashboard_sessions SET expires_at = {}",
        moment_sql(env.backend, "0")
    ))
    .await;
    assert_redirect(
        &visitor.get("/dashboard/jobs").await,
        "/dashboard/sign-in?reason=expired",
    );
    let stale = visitor
        .post(
            &format!("/dashboard/jobs/{job_id}/cancel"),
            &[
                ("csrf_token", &field(&page.text, "csrf_token")),
                ("idempotency_key", &field(&page.text, "idempotency_key")),
            ],
        )
        .await;
    assert_page(&stale, 401, "Your session has expired");
    assert_ne!(api.job(job_id).await["status"], "CANCELLED");
    assert_eq!(api.job(job_id).await["cancel_requested"], false);
    let fragment = visitor
        .send(
            visitor
                .client
                .get(format!("{}/dashboard/overview", visitor.base))
                .header("x-dashboard-fragment", "1"),
        )
        .await;
    assert_eq!(
        fragment.status,
        StatusCode::UNAUTHORIZED,
        "the script reloads"
    );
}

async fn a_tenant_sees_and_acts_on_its_own_jobs_only(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;
    let theirs = api.as_tenant_b().submit("sleep", json!({"ms": 0})).await;
    let theirs = theirs["job_id"].as_str().unwrap();
    let done = api.submit("sleep", json!({"ms": 0})).await;
    let done = done["job_id"].as_str().unwrap();
    api.wait_final(done).await;
    let running = api.submit("sleep", json!({"ms": 20000})).await;
    let running = running["job_id"].as_str().unwrap();
    api.wait_status(running, "RUNNING").await;
    let later = api
        .post("/v1/reports/sleep?delay=600", &json!({"ms": 0}))
        .await
        .json();
    let later = later["job_id"].as_str().unwrap();
    let mut visitor = Visitor::new(&api);
    visitor.sign_in(KEY_A).await;

    let list = visitor.get("/dashboard/jobs").await;
    assert_page(&list, 200, done);
    assert!(
        list.text.contains("scheduled for "),
        "the list says why the delayed job waits"
    );
    assert_page(
        &visitor.get(&format!("/dashboard/jobs/{later}")).await,
        200,
        "id=\"job-waiting\">scheduled for ",
    );
    assert!(list.text.contains(running));
    assert!(
        !list.text.contains(theirs),
        "another tenant's job is listed"
    );
    let filtered = visitor
        .get("/dashboard/jobs?status=RUNNING&kind=sleep")
        .await;
    assert_page(&filtered, 200, running);
    assert!(!filtered.text.contains(done));
    assert_page(
        &visitor.get(&format!("/dashboard/jobs/{theirs}")).await,
        404,
        "There is no job",
    );
    let overview = visitor.get("/dashboard/overview").await;
    assert_page(&overview, 200, "id=\"count-succeeded\">1<");
    assert!(
        overview.text.contains("id=\"count-running\">1<"),
        "{}",
        overview.text
    );
    let result = visitor.get(&format!("/dashboard/jobs/{done}/result")).await;
    assert_eq!(result.status, StatusCode::OK, "{}", result.text);
    assert_eq!(result.json()["slept_ms"], 0);
    assert!(
        result
            .header("content-disposition")
            .unwrap()
            .contains("attachment")
    );

    // Cancel, then retry the cancelled job, through the page's forms.
    let page = visitor.get(&format!("/dashboard/jobs/{running}")).await;
    let fields = [
        ("csrf_token", field(&page.text, "csrf_token")),
        ("idempotency_key", field(&page.text, "idempotency_key")),
    ];
    let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let cancelled = visitor
        .post(&format!("/dashboard/jobs/{running}/cancel"), &fields)
        .await;
    assert_redirect(
        &cancelled,
        &format!("/dashboard/jobs/{running}?done=cancelled"),
    );
    assert_eq!(api.wait_final(running).await["status"], "CANCELLED");

    let page = visitor.get(&format!("/dashboard/jobs/{running}")).await;
    assert!(
        page.text.contains("id=\"retry\""),
        "a retry button: {}",
        page.text
    );
    let fields = [
        ("csrf_token", field(&page.text, "csrf_token")),
        ("idempotency_key", field(&page.text, "idempotency_key")),
    ];
    let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let retried = visitor
        .post(&format!("/dashboard/jobs/{running}/retry"), &fields)
        .await;
    assert_eq!(retried.status, StatusCode::SEE_OTHER, "{}", retried.text);
    let location = retried.header("location").unwrap().to_owned();
    let new_id = location
        .trim_start_matches("/dashboard/jobs/")
        .trim_end_matches("?done=retried");
    assert_ne!(new_id, running);
    assert_eq!(api.job(new_id).await["retry_of"], running);
    // The same form sent twice acts once.
    let twice = visitor
        .post(&format!("/dashboard/jobs/{running}/retry"), &fields)
        .await;
    assert_redirect(&twice, &location);
    let new_page = visitor.get(&location).await;
    assert_page(&new_page, 200, "Retried: this is the new job.");
    assert!(
        new_page
            .text
            .contains(&format!("href=\"/dashboard/jobs/{running}\""))
    );
    let cancel_new = api
        .post(&format!("/v1/jobs/{new_id}/cancel"), &json!({}))
        .await;
    assert_eq!(cancel_new.status, StatusCode::OK);

    // Another tenant's job cannot be acted on either.
    let refused = visitor
        .post(
            &format!("/dashboard/jobs/{theirs}/cancel"),
            &[("csrf_token", fields[0].1), ("idempotency_key", "theirs")],
        )
        .await;
    assert_page(&refused, 404, "There is no job");
    assert_eq!(
        api.as_tenant_b().wait_final(theirs).await["status"],
        "SUCCEEDED"
    );
}

async fn bad_input_gets_a_message_on_the_page_never_a_500(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;
    let done = api.submit("sleep", json!({"ms": 0})).await;
    let done = done["job_id"].as_str().unwrap();
    api.wait_final(done).await;
    let mut visitor = Visitor::new(&api);
    visitor.sign_in(KEY_A).await;

    for (path, status, message) in [
        ("/dashboard/jobs?status=DONE", 400, "There is no status"),
        ("/dashboard/jobs?kind=nope", 400, "There is no kind"),
        (
            "/dashboard/jobs?cursor=job_zz",
            400,
            "That page link is not valid",
        ),
        (
            "/dashboard/jobs?limit=0",
            400,
            "Limit must be a whole number",
        ),
        ("/dashboard/jobs/job_123", 404, "There is no job job_123"),
        (
            "/dashboard/jobs/job_0000000000000000000000000000000a",
            404,
            "There is no job",
        ),
        (
            "/dashboard/webhooks?cursor=%00",
            400,
            "That page link is not valid",
        ),
        ("/dashboard/webhooks/wh_nope", 404, "There is no webhook"),
    ] {
        assert_page(&visitor.get(path).await, status, message);
    }
    let page = visitor.get(&format!("/dashboard/jobs/{done}")).await;
    let csrf = field(&page.text, "csrf_token");
    let refused = visitor
        .post(
            &format!("/dashboard/jobs/{done}/retry"),
            &[("csrf_token", &csrf), ("idempotency_key", "k-1")],
        )
        .await;
    assert_page(
        &refused,
        409,
        "only a FAILED or CANCELLED job can be retried",
    );
    let incomplete = visitor
        .post(
            &format!("/dashboard/jobs/{done}/cancel"),
            &[("csrf_token", &csrf), ("idempotency_key", "two words")],
        )
        .await;
    assert_page(&incomplete, 400, "This form is incomplete");
    let queued = api.submit("sleep", json!({"ms": 20000})).await;
    let queued = queued["job_id"].as_str().unwrap();
    let early = visitor
        .get(&format!("/dashboard/jobs/{queued}/result?format=csv"))
        .await;
    assert_page(&early, 409, "a result exists only once it has SUCCEEDED");
    api.post(&format!("/v1/jobs/{queued}/cancel"), &json!({}))
        .await;
}

async fn the_webhooks_page_enables_and_rotates(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded_with_local_receivers().await;
    let reply = api
        .post(
            "/v1/webhooks",
            &json!({"url": "http://127.0.0.1:9/hooks/a"}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let webhook = reply.json();
    let id = webhook["id"].as_str().unwrap();
    env.execute_sql(&format!(
        "UPDATE webhooks SET enabled = false WHERE webhook_id = '{id}'"
    ))
    .await;
    let mut visitor = Visitor::new(&api);
    visitor.sign_in(KEY_A).await;

    let list = visitor.get("/dashboard/webhooks").await;
    assert_page(&list, 200, "http://127.0.0.1:9/hooks/a");
    assert!(list.text.contains("disabled"), "{}", list.text);
    assert!(
        !visitor
            .get("/dashboard/webhooks")
            .await
            .text
            .contains("whsec_"),
        "no secret on the list"
    );
    let page = visitor.get(&format!("/dashboard/webhooks/{id}")).await;
    assert_page(&page, 200, "Recent deliveries");
    let csrf = field(&page.text, "csrf_token");
    let key = field(&page.text, "idempotency_key");
    let enabled = visitor
        .post(
            &format!("/dashboard/webhooks/{id}/enable"),
            &[("csrf_token", &csrf), ("idempotency_key", &key)],
        )
        .await;
    assert_redirect(&enabled, &format!("/dashboard/webhooks/{id}?done=enabled"));
    assert_eq!(
        api.get(&format!("/v1/webhooks/{id}")).await.json()["enabled"],
        true
    );
    let rotated = visitor
        .post(
            &format!("/dashboard/webhooks/{id}/rotate-secret"),
            &[("csrf_token", &csrf), ("idempotency_key", "rotate-once")],
        )
        .await;
    assert_page(&rotated, 200, "The new secret");
    let secret = rotated
        .text
        .split("id=\"new-secret\">")
        .nth(1)
        .and_then(|rest| rest.split('<').next())
        .expect("the new secret on the page");
    assert!(secret.starts_with("whsec_"), "{secret}");
    assert_ne!(secret, webhook["secret"].as_str().unwrap());
    assert_eq!(rotated.header("cache-control"), Some("no-store"));
    // A failed delivery shows as the last error, and in the success rate.
    let job = api.submit("sleep", json!({"ms": 0})).await;
    api.wait_final(job["job_id"].as_str().unwrap()).await;
    wait::until_ok(
        "a failed delivery shown",
        std::time::Duration::from_secs(15),
        async || {
            let list = visitor.get("/dashboard/webhooks").await;
            // Both, read by two queries a delivery may fall between.
            if list.text.contains("class=\"error-text\"") && list.text.contains(">0.0%<") {
                Ok(())
            } else {
                Err(list.text)
            }
        },
    )
    .await;
    let page = visitor.get(&format!("/dashboard/webhooks/{id}")).await;
    assert!(page.text.contains("job.succeeded"), "{}", page.text);
    assert!(page.text.contains("id=\"deliveries\""), "{}", page.text);

    let mut other = Visitor::new(&api);
    other.sign_in(KEY_B).await;
    assert_page(
        &other.get(&format!("/dashboard/webhooks/{id}")).await,
        404,
        "There is no webhook",
    );
    assert!(!other.get("/dashboard/webhooks").await.text.contains(id));
}

/// The enable and rotate forms of one page are two requests: each has its
/// own Idempotency-Key, so sending one does not spoil the other.
async fn a_webhook_page_enables_then_rotates_with_its_forms_keys(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded_with_local_receivers().await;
    let reply = api
        .post(
            "/v1/webhooks",
            &json!({"url": "http://127.0.0.1:9/hooks/a"}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let id = reply.json()["id"].as_str().unwrap().to_owned();
    env.execute_sql(&format!(
        "UPDATE webhooks SET enabled = false WHERE webhook_id = '{id}'"
    ))
    .await;
    let mut visitor = Visitor::new(&api);
    visitor.sign_in(KEY_A).await;
    let page = visitor.get(&format!("/dashboard/webhooks/{id}")).await;
    let csrf = field(&page.text, "csrf_token");
    let enable = format!("/dashboard/webhooks/{id}/enable");
    let rotate = format!("/dashboard/webhooks/{id}/rotate-secret");
    let enable_key = form_field(&page.text, &enable, "idempotency_key");
    let rotate_key = form_field(&page.text, &rotate, "idempotency_key");

    let enabled = visitor
        .post(
            &enable,
            &[("csrf_token", &csrf), ("idempotency_key", &enable_key)],
        )
        .await;
    let rotated = visitor
        .post(
            &rotate,
            &[("csrf_token", &csrf), ("idempotency_key", &rotate_key)],
        )
        .await;

    assert_redirect(&enabled, &format!("/dashboard/webhooks/{id}?done=enabled"));
    assert_page(&rotated, 200, "The new secret");
    assert_ne!(enable_key, rotate_key);
}

/// Sign-ins count against `RATE_LIMIT` (by address, then by tenant): a
/// run of them opens no more sessions than the rate allows, and the rest
/// get the sign-in page with 429 and Retry-After.
async fn sign_ins_over_the_rate_are_refused_with_429(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env
        .start_api(&[("EMBEDDED_WORKER", "false"), ("RATE_LIMIT", "2")])
        .await;

    let mut replies = Vec::new();
    for _ in 0..12 {
        replies.push(Visitor::new(&api).sign_in(KEY_A).await);
    }

    let opened = replies
        .iter()
        .filter(|r| r.status == StatusCode::SEE_OTHER)
        .count();
    let refused: Vec<&Reply> = replies
        .iter()
        .filter(|r| r.status == StatusCode::TOO_MANY_REQUESTS)
        .collect();
    assert_eq!(opened + refused.len(), 12, "303 or 429 only");
    assert!(opened <= 5, "{opened} sign-ins passed a rate of 2/s");
    let refused = refused.first().expect("a refused sign-in");
    assert_page(refused, 429, "retry later");
    let retry_after: u64 = refused
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("whole seconds");
    assert!(retry_after >= 1);
    let sessions = env
        .count("SELECT COUNT(*) AS n FROM dashboard_sessions")
        .await;
    assert_eq!(sessions, opened as i64, "a session per sign-in let through");
}

/// A session cookie is checked in memory before the database: with the
/// sessions' table gone, made-up cookies (garbage, or a real key id with a
/// forged tag) still get the sign-in page, not an error of the query.
async fn a_made_up_session_cookie_costs_no_query(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let mut visitor = Visitor::new(&api);
    visitor.sign_in(KEY_A).await;
    let real = visitor.cookie.clone().expect("a session cookie");
    let value = real.split_once('=').expect("name=value").1.to_owned();
    let key_id = value.split('.').next().expect("a key id").to_owned();
    assert_eq!(visitor.get("/dashboard").await.status, StatusCode::OK);
    env.execute_sql("ALTER TABLE dashboard_sessions RENAME TO dashboard_sessions_away")
        .await;

    let forged_tag = format!("{key_id}.{}.{}", "ab".repeat(32), "cd".repeat(32));
    let garbage = "0123456789abcdef".repeat(4);
    for made_up in [garbage.as_str(), forged_tag.as_str(), "x", ""] {
        let mut stranger = Visitor::new(&api);
        stranger.cookie = Some(format!("receipt_session={made_up}"));
        let reply = stranger.get("/dashboard/jobs").await;
        assert_eq!(
            reply.status,
            StatusCode::SEE_OTHER,
            "{made_up}: {}",
            reply.text
        );
        assert!(
            reply
                .header("location")
                .is_some_and(|l| l.starts_with("/dashboard/sign-in")),
            "{:?}",
            reply.headers
        );
    }
    // The real cookie does reach the database (and fails there now).
    assert!(
        visitor
            .get("/dashboard/jobs")
            .await
            .status
            .is_server_error()
    );
}

async fn a_schedule_is_listed_paused_and_resumed_from_its_page(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;
    let created = api
        .post(
            "/v1/schedules",
            &json!({"kind": "sleep", "params": {"ms": 1}, "cron": "0 6 * * *", "timezone": "Asia/Kolkata"}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let id = created.json()["schedule_id"].as_str().unwrap().to_owned();
    let theirs = api
        .as_tenant_b()
        .post(
            "/v1/schedules",
            &json!({"kind": "sleep", "params": {"ms": 1}, "cron": "0 7 * * *", "timezone": "UTC"}),
        )
        .await
        .json();
    let theirs = theirs["schedule_id"].as_str().unwrap();
    let mut visitor = Visitor::new(&api);
    visitor.sign_in(KEY_A).await;

    let list = visitor.get("/dashboard/schedules").await;
    assert_page(&list, 200, &format!("data-schedule-id=\"{id}\""));
    assert!(
        !list.text.contains(theirs),
        "another tenant's schedule is listed"
    );
    assert!(
        list.text.contains("00:30:00"),
        "06:00 in Kolkata is 00:30 UTC"
    );
    assert_page(
        &visitor.get(&format!("/dashboard/schedules/{theirs}")).await,
        404,
        "There is no schedule",
    );

    let page = visitor.get(&format!("/dashboard/schedules/{id}")).await;
    assert_page(
        &page,
        200,
        "id=\"schedule-state\"><span class=\"badge succeeded\">active",
    );
    let fields = [
        ("csrf_token", field(&page.text, "csrf_token")),
        ("idempotency_key", field(&page.text, "idempotency_key")),
    ];
    let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let paused = visitor
        .post(&format!("/dashboard/schedules/{id}/pause"), &fields)
        .await;
    assert_redirect(&paused, &format!("/dashboard/schedules/{id}?done=paused"));
    assert_eq!(
        api.get(&format!("/v1/schedules/{id}")).await.json()["paused"],
        true
    );
    let page = visitor.get(&format!("/dashboard/schedules/{id}")).await;
    assert_page(&page, 200, "action=\"/dashboard/schedules/");
    assert!(page.text.contains(">Resume<"), "{}", page.text);
    let fields = [
        ("csrf_token", field(&page.text, "csrf_token")),
        ("idempotency_key", field(&page.text, "idempotency_key")),
    ];
    let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let resumed = visitor
        .post(&format!("/dashboard/schedules/{id}/resume"), &fields)
        .await;
    assert_redirect(&resumed, &format!("/dashboard/schedules/{id}?done=resumed"));
    assert_eq!(
        api.get(&format!("/v1/schedules/{id}")).await.json()["paused"],
        false
    );
}

/// A key of tenant-a with these scopes, once the api knows it.
async fn scoped_key(env: &TestEnv, api: &Api, scopes: &[store::Scope]) -> String {
    let scope = store::KeyScope::of(scopes, None);
    key_known_to(env, api, "tenant-a", &scope).await.0.key
}

async fn a_session_offers_and_does_only_what_its_keys_scopes_allow(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded_with_local_receivers().await;
    let running = api.submit("sleep", json!({"ms": 20000})).await;
    let running = running["job_id"].as_str().unwrap().to_owned();
    api.wait_status(&running, "RUNNING").await;
    let webhook = api
        .post(
            "/v1/webhooks",
            &json!({"url": "http://127.0.0.1:9/hooks/a"}),
        )
        .await
        .json();
    let webhook_id = webhook["id"].as_str().unwrap().to_owned();
    let reader = scoped_key(&env, &api, &[store::Scope::Read]).await;
    let worker = scoped_key(&env, &api, &[store::Scope::Work]).await;

    // A key without `read` cannot open the dashboard at all.
    let mut visitor = Visitor::new(&api);
    let refused = visitor.sign_in(&worker).await;
    assert_page(&refused, 403, "it needs the read scope");

    // A reading key sees its scopes, and no action it may not take.
    let signed_in = visitor.sign_in(&reader).await;
    assert_redirect(&signed_in, "/dashboard");
    let job_page = visitor.get(&format!("/dashboard/jobs/{running}")).await;
    assert_page(&job_page, 200, "id=\"scopes\"");
    assert!(job_page.text.contains(">read</span>"), "{}", job_page.text);
    assert!(
        !job_page.text.contains("/cancel\""),
        "a cancel form: {}",
        job_page.text
    );
    assert!(!job_page.text.contains("Audit log"), "{}", job_page.text);
    let webhook_page = visitor
        .get(&format!("/dashboard/webhooks/{webhook_id}"))
        .await;
    assert_page(&webhook_page, 200, "Recent deliveries");
    assert!(
        !webhook_page.text.contains("rotate-secret"),
        "{}",
        webhook_page.text
    );
    assert_page(&visitor.get("/dashboard/audit").await, 403, "`admin` scope");

    // ... and the server refuses it all the same when the form is sent.
    let csrf = field(&job_page.text, "csrf_token");
    let cancel = visitor
        .post(
            &format!("/dashboard/jobs/{running}/cancel"),
            &[("csrf_token", &csrf), ("idempotency_key", "scoped-cancel")],
        )
        .await;
    assert_page(&cancel, 403, "`submit` scope");
    let job = api.job(&running).await;
    assert_eq!(job["status"], "RUNNING", "{job}");
    assert_eq!(job["cancel_requested"], false, "{job}");
    let rotate = visitor
        .post(
            &format!("/dashboard/webhooks/{webhook_id}/rotate-secret"),
            &[("csrf_token", &csrf), ("idempotency_key", "scoped-rotate")],
        )
        .await;
    assert_page(&rotate, 403, "`manage` scope");

    // A key of full rights is offered every action and the audit log,
    // which shows the webhook's registration by its key.
    let mut full = Visitor::new(&api);
    full.sign_in(KEY_A).await;
    let job_page = full.get(&format!("/dashboard/jobs/{running}")).await;
    assert_page(&job_page, 200, "full rights");
    assert!(job_page.text.contains("/cancel\""), "{}", job_page.text);
    let audit = full.get("/dashboard/audit").await;
    assert_page(&audit, 200, "webhook.registered");
    assert!(audit.text.contains(&webhook_id), "{}", audit.text);
    // Its Keys page shows each key's scopes, never a key.
    let keys = full.get("/dashboard/keys").await;
    assert_page(&keys, 200, "full rights");
    assert!(
        keys.text.contains("<td class=\"scopes\">read</td>"),
        "{}",
        keys.text
    );
    assert!(
        keys.text.contains("<td class=\"scopes\">work</td>"),
        "{}",
        keys.text
    );
    assert!(!keys.text.contains(&reader) && !keys.text.contains(&worker));
    assert_page(&visitor.get("/dashboard/keys").await, 403, "`admin` scope");
}

crate::on_both_backends!(
    a_session_offers_and_does_only_what_its_keys_scopes_allow,
    a_schedule_is_listed_paused_and_resumed_from_its_page,
    signing_in_opens_a_strict_session_that_signing_out_closes,
    a_session_ends_when_its_key_is_revoked_or_when_it_expires,
    a_tenant_sees_and_acts_on_its_own_jobs_only,
    bad_input_gets_a_message_on_the_page_never_a_500,
    the_webhooks_page_enables_and_rotates,
    a_webhook_page_enables_then_rotates_with_its_forms_keys,
    sign_ins_over_the_rate_are_refused_with_429,
    a_made_up_session_cookie_costs_no_query,
);
