//! The dashboard in a real browser: headless Chromium from Debian's
//! packages (`chromium`, `chromium-driver`), driven over WebDriver by
//! fantoccini through a chromedriver this test starts on a free port and
//! stops. A person signs in, watches a job submitted over HTTP finish,
//! retries a failed job, cancels a running one, and signs out. The
//! screenshots land in `target/dashboard-screenshots/` for a person to
//! look at.

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use fantoccini::{Client, ClientBuilder, Locator};
use futures::FutureExt;
use serde_json::{Value, json};
use std::panic::AssertUnwindSafe;

use crate::common::{Api, Backend, KEY_A, TestEnv, bin_path, wait};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// How long the page may take to show what the test waits for.
const PATIENCE: Duration = Duration::from_secs(30);
/// How often a page is read again while waiting: each read is a round trip
/// to the browser, which has the page's own refreshes to run meanwhile.
const LOOK_AGAIN: Duration = Duration::from_millis(100);

/// A chromedriver on a free port of 127.0.0.1, killed when dropped.
struct Driver {
    process: Child,
    url: String,
}

impl Driver {
    fn start() -> Self {
        for path in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                std::path::Path::new(path).exists(),
                "{path} is missing: install Debian's chromium and chromium-driver \
                 (scripts/test does: apt-get install -y chromium chromium-driver)"
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let process = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        // Chromedriver prints nothing when it listens: its port answering
        // is the event.
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not listen");
            std::thread::sleep(wait::POLL);
        }
        Driver {
            process,
            url: format!("http://127.0.0.1:{port}"),
        }
    }

    /// A headless Chromium with a fresh profile that fetches nothing of
    /// its own (no updates, no sync, no background requests).
    async fn browser(&self, profile: &std::path::Path) -> Client {
        let args = vec![
            "--headless".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-quic".to_owned(),
            "--no-first-run".to_owned(),
            "--disable-background-networking".to_owned(),
            "--disable-component-update".to_owned(),
            "--disable-sync".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--window-size=1280,1000".to_owned(),
            format!("--user-data-dir={}", profile.display()),
        ];
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": { "binary": CHROMIUM, "args": args },
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!("an object")
        };
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        ClientBuilder::new(connector)
            .capabilities(capabilities)
            .connect(&self.url)
            .await
            .expect("a Chromium session")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// Where screenshots go: `target/dashboard-screenshots/`.
fn screenshot_dir() -> PathBuf {
    let target = bin_path("api")
        .parent()
        .and_then(|debug| debug.parent())
        .expect("target/")
        .to_path_buf();
    let dir = target.join("dashboard-screenshots");
    std::fs::create_dir_all(&dir).expect("the screenshot folder");
    dir
}

/// One person at the browser.
struct Person {
    browser: Client,
    base: String,
    backend: &'static str,
}

impl Person {
    async fn open(&self, path: &str) {
        self.browser
            .goto(&format!("{}{path}", self.base))
            .await
            .unwrap_or_else(|e| panic!("open {path}: {e}"));
    }

    async fn find(&self, css: &str) -> fantoccini::elements::Element {
        self.browser
            .wait()
            .at_most(PATIENCE)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no {css} on the page: {e}"))
    }

    /// Clicks the element; found again if the page replaced it meanwhile
    /// (a part of the page that refreshed itself).
    async fn click(&self, css: &str) {
        let mut tries = 0;
        loop {
            match self.find(css).await.click().await {
                Ok(()) => return,
                Err(fantoccini::error::CmdError::Standard(e))
                    if e.error == fantoccini::error::ErrorStatus::StaleElementReference
                        && tries < 5 =>
                {
                    tries += 1;
                }
                Err(e) => panic!("click {css}: {e}"),
            }
        }
    }

    /// Waits until the element's text is `text`, as the page refreshes
    /// itself (no reload by the test).
    async fn wait_text(&self, css: &str, text: &str) {
        let read = wait::poll(PATIENCE, LOOK_AGAIN, async || {
            let found = match self.browser.find(Locator::Css(css)).await {
                Ok(element) => element.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            if found.trim() == text {
                Ok(())
            } else {
                Err(found)
            }
        })
        .await;
        if let Err(found) = read {
            let url = self.browser.current_url().await.ok();
            let page = self.browser.source().await.unwrap_or_default();
            panic!("{css} reads {found:?}, not {text:?}, at {url:?}: {page}");
        }
    }

    async fn path(&self) -> String {
        let url = self.browser.current_url().await.expect("the URL");
        match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_owned(),
        }
    }

    async fn screenshot(&self, name: &str) {
        let png = self.browser.screenshot().await.expect("a screenshot");
        let path = screenshot_dir().join(format!("{}-{name}.png", self.backend));
        std::fs::write(&path, png).expect("write the screenshot");
        eprintln!("screenshot: {}", path.display());
    }
}

fn id_of(job: &Value) -> String {
    job["job_id"].as_str().expect("job_id").to_owned()
}

async fn a_person_signs_in_watches_a_job_finish_retries_cancels_and_signs_out(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let profile = tempfile::tempdir().expect("a browser profile");
    // Every `sleep` job holds, running, until this file exists: the page
    // shows the first one running however slowly the browser looks.
    let release = profile.path().join("release-sleeps");
    let api = env
        .start_api(&[
            ("EMBEDDED_WORKER", "true"),
            ("WEBHOOK_ALLOW_PRIVATE", "true"),
            (
                "FAILPOINTS",
                &format!("reports::sleep_held_until=return({})", release.display()),
            ),
        ])
        .await;
    let driver = Driver::start();
    let person = Person {
        browser: driver.browser(profile.path()).await,
        base: api.base.clone(),
        backend: match backend {
            Backend::Sqlite => "sqlite",
            Backend::PgRedis => "pg-redis",
        },
    };
    // Closing the session quits Chromium, also when the scenario fails.
    let outcome = AssertUnwindSafe(scenario(&env, &api, &person, &release))
        .catch_unwind()
        .await;
    let _ = person.browser.clone().close().await;
    drop(driver);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

async fn scenario(env: &TestEnv, api: &Api, person: &Person, release: &std::path::Path) {
    // Signing in.
    person.open("/dashboard/jobs").await;
    assert_eq!(person.path().await, "/dashboard/sign-in");
    person.screenshot("sign-in").await;
    let field = person.find("#api-key").await;
    field.send_keys(KEY_A).await.expect("type the key");
    person.click("#sign-in").await;
    person.wait_text("#tenant", "tenant-a").await;
    assert_eq!(person.path().await, "/dashboard");

    // A job submitted over HTTP appears, runs and finishes, on a page
    // that refreshes itself.
    let job = id_of(&api.submit("sleep", json!({"ms": 0})).await);
    person.open("/dashboard/jobs").await;
    person.click(&format!("tr[data-job-id='{job}'] a")).await;
    assert_eq!(person.path().await, format!("/dashboard/jobs/{job}"));
    person.wait_text("#job-status", "RUNNING").await;
    person.screenshot("job-running").await;
    std::fs::write(release, b"").expect("release the sleeps");
    person.wait_text("#job-status", "SUCCEEDED").await;
    person.find("#download-json").await;
    assert_eq!(api.job(&job).await["status"], "SUCCEEDED");

    // A job that fails every attempt is retried as a new job.
    let failing = id_of(
        &api.submit("sleep", json!({"ms": 0, "fail_times": 10}))
            .await,
    );
    assert_eq!(api.wait_final(&failing).await["status"], "FAILED");
    person.open(&format!("/dashboard/jobs/{failing}")).await;
    person.wait_text("#job-status", "FAILED").await;
    person.find("#job-error").await;
    person.screenshot("job-failed").await;
    person.click("#retry").await;
    person.wait_text("#retry-of", &failing).await;
    let retried_path = person.path().await;
    let retried = retried_path
        .trim_start_matches("/dashboard/jobs/")
        .trim_end_matches("?done=retried")
        .to_owned();
    assert_ne!(retried, failing);
    assert_eq!(api.job(&retried).await["retry_of"], failing.as_str());
    assert_eq!(api.job(&failing).await["status"], "FAILED", "kept");

    // A running job is cancelled.
    let long = id_of(&api.submit("sleep", json!({"ms": 60000})).await);
    api.wait_status(&long, "RUNNING").await;
    person.open(&format!("/dashboard/jobs/{long}")).await;
    person.wait_text("#job-status", "RUNNING").await;
    person.click("#cancel").await;
    person.wait_text("#job-status", "CANCELLED").await;
    assert_eq!(api.job(&long).await["status"], "CANCELLED");

    // History for the overview's chart: jobs run now, then moved back
    // over the last hour as if they had run then, so that the chart has
    // bars in many minutes; and jobs waiting behind busy workers. A webhook
    // whose receiver refuses connections gets their events.
    let reply = api
        .post(
            "/v1/webhooks",
            &json!({"url": "http://127.0.0.1:9/hooks/receipt", "events": ["job.failed"]}),
        )
        .await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    let mut history = Vec::new();
    for i in 0..90 {
        let params = if i % 7 == 3 {
            json!({"ms": 0, "fail_times": 1, "permanent": true})
        } else {
            json!({"ms": i % 5})
        };
        history.push(id_of(&api.submit("sleep", params).await));
    }
    for job in &history {
        api.wait_final(job).await;
    }
    let moves: Vec<String> = history
        .iter()
        .enumerate()
        .map(|(i, job)| format!("WHEN '{job}' THEN {}", ((i * 37 + i * i) % 57 + 1) * 60_000))
        .collect();
    let shift = match env.backend {
        Backend::PgRedis => format!(
            "(CASE job_id {} ELSE 0 END) * interval '1 millisecond'",
            moves.join(" ")
        ),
        Backend::Sqlite => format!("(CASE job_id {} ELSE 0 END)", moves.join(" ")),
    };
    env.execute_sql(&format!(
        "UPDATE jobs SET created_at = created_at - {shift}, started_at = started_at - {shift},
             finished_at = finished_at - {shift}"
    ))
    .await;
    for _ in 0..6 {
        api.submit("sleep", json!({"ms": 60000})).await;
    }
    person.open("/dashboard").await;
    person.wait_text("#queue-depth", "2").await;
    let bars = person
        .browser
        .find_all(Locator::Css("#throughput-chart rect.ok"))
        .await
        .expect("the chart's bars");
    assert!(bars.len() >= 20, "{} minutes with successes", bars.len());
    person.wait_text("#count-succeeded", "78").await;
    person.wait_text("#count-failed", "15").await;
    person.screenshot("overview").await;
    person.open("/dashboard/jobs").await;
    person.find("#jobs").await;
    person.screenshot("jobs").await;
    // Its failed deliveries show, with their error.
    let shown = wait::poll(PATIENCE, Duration::from_millis(300), async || {
        person.open("/dashboard/webhooks").await;
        let row = person
            .find("#webhooks tbody tr")
            .await
            .text()
            .await
            .unwrap_or_default();
        if row.contains("0.0%") {
            Ok(())
        } else {
            Err(row)
        }
    })
    .await;
    if let Err(row) = shown {
        panic!("no failed delivery shown: {row}");
    }
    person.find("#webhooks .error-text").await;
    person.screenshot("webhooks").await;

    // Signing out: the pages need a sign-in again.
    person.click("#sign-out").await;
    person.find("#api-key").await;
    person.open("/dashboard/jobs").await;
    person.find("#api-key").await;
    assert_eq!(person.path().await, "/dashboard/sign-in");
}

crate::on_both_backends!(a_person_signs_in_watches_a_job_finish_retries_cancels_and_signs_out);
