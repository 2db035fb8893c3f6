//! The client against the real service behind a proxy that loses answers
//! (it forwards the request, lets the service answer, then closes the
//! client's connection without a byte of the answer) and cuts connections
//! (it closes one partway through the request). Every intent must make
//! exactly one job, and the client must end with the right answer.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use futures::{StreamExt, TryStreamExt, stream};
use receipt_client::{
    Client, Job, JobFilter, JobStatus, LedgerEntry, NewSchedule, NewWebhook, RetryPolicy, Sleep,
    Submit,
};
use testkit::{Backend, KEY_A, TestEnv};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

/// What the proxy does with one connection.
#[derive(Debug, Clone, Copy)]
enum Fate {
    Pass,
    /// The request reaches the service, which answers; the answer is
    /// dropped and the connection closed.
    LoseAnswer,
    /// The connection is closed after part of the request was forwarded.
    Cut,
}

/// A TCP proxy on loopback in front of the service, with counts of what it
/// did.
struct LossyProxy {
    addr: SocketAddr,
    lost: Arc<AtomicUsize>,
    cut: Arc<AtomicUsize>,
}

impl LossyProxy {
    /// Connections take their fates in turn: of every five, two pass, two
    /// lose their answer and one is cut.
    async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let lost = Arc::new(AtomicUsize::new(0));
        let cut = Arc::new(AtomicUsize::new(0));
        let (lost_count, cut_count) = (lost.clone(), cut.clone());
        tokio::spawn(async move {
            let mut n = 0usize;
            while let Ok((client, _)) = listener.accept().await {
                let fate = match n % 5 {
                    0 | 1 => Fate::Pass,
                    2 | 3 => Fate::LoseAnswer,
                    _ => Fate::Cut,
                };
                n += 1;
                let (lost, cut) = (lost_count.clone(), cut_count.clone());
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(upstream).await {
                        let counter = match fate {
                            Fate::Pass => None,
                            Fate::LoseAnswer => Some(lost),
                            Fate::Cut => Some(cut),
                        };
                        if relay(client, server, fate).await
                            && let Some(counter) = counter
                        {
                            counter.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        LossyProxy { addr, lost, cut }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// Relays one connection according to its fate; true when the fate was
/// carried out on a request (not on a connection the client closed idle).
async fn relay(mut client: TcpStream, mut server: TcpStream, fate: Fate) -> bool {
    match fate {
        Fate::Pass => {
            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            false
        }
        Fate::LoseAnswer => {
            let (mut from_client, _to_client) = client.split();
            let (mut from_server, mut to_server) = server.split();
            let mut first = [0u8; 1];
            tokio::select! {
                _ = tokio::io::copy(&mut from_client, &mut to_server) => false,
                // The service answers only once it has committed what the
                // request did: from here the answer can be lost.
                read = from_server.read(&mut first) => matches!(read, Ok(1)),
            }
        }
        Fate::Cut => {
            let mut request = vec![0u8; 64 * 1024];
            match client.read(&mut request).await {
                Ok(n) if n > 0 => {
                    let _ = server.write_all(&request[..n / 2]).await;
                    true
                }
                _ => false,
            }
        }
    }
}

/// A client through `url` that retries quickly and opens a connection per
/// request, so that every request meets the proxy's next fate.
fn lossy_client(url: &str) -> Client {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("http client");
    Client::builder(url, KEY_A)
        .http_client(http)
        .retry(RetryPolicy {
            deadline: Duration::from_secs(90),
            first_backoff: Duration::from_millis(20),
            max_backoff: Duration::from_millis(300),
            try_timeout: Duration::from_secs(15),
            max_tries: None,
        })
        .build()
        .expect("client")
}

fn entry(id: &str) -> LedgerEntry {
    serde_json::from_value(serde_json::json!({
        "id": id, "date": "2026-10-03", "direction": "sale", "amount": "100.00", "gst_rate": "18"
    }))
    .expect("an entry")
}

async fn every_intent_takes_effect_once_through_a_lossy_proxy(backend: Backend) {
    // Arrange: the service, the proxy in front of it, a direct client to
    // check what was made and a lossy one to act.
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded_with_local_receivers().await;
    let upstream: SocketAddr = api
        .base
        .trim_start_matches("http://")
        .parse()
        .expect("the api's address");
    let proxy = LossyProxy::start(upstream).await;
    let direct = Client::new(&api.base, KEY_A).expect("client");
    let lossy = lossy_client(&proxy.url());
    let submits = 20u64;
    let failed: Vec<Job> = stream::iter(0..3u64)
        .then(|i| {
            direct.submit(Sleep {
                ms: Some((10_000 + i).into()),
                fail_times: Some(1u8.into()),
                permanent: Some(true),
            })
        })
        .try_collect()
        .await
        .expect("jobs to retry");
    for job in &failed {
        let job = direct
            .wait(&job.job_id, Duration::from_secs(60))
            .await
            .expect("wait");
        assert_eq!(job.status, JobStatus::Failed);
    }

    // Act: submits, each waited for and its result read; retries; a
    // cancel; ledger imports; all through the proxy, four at a time.
    let answers: Vec<(u64, Job, serde_json::Value)> = stream::iter(0..submits)
        .map(|ms| {
            let lossy = &lossy;
            async move {
                let job = lossy
                    .submit(Sleep {
                        ms: Some(ms.into()),
                        ..Sleep::default()
                    })
                    .await?;
                let job = lossy.wait(&job.job_id, Duration::from_secs(90)).await?;
                let result = lossy.result(&job.job_id).await?;
                Ok::<_, receipt_client::Error>((ms, job, result))
            }
        })
        .buffer_unordered(4)
        .try_collect()
        .await
        .expect("every submit ends with its answer");
    let retries: Vec<Job> = stream::iter(&failed)
        .then(|job| lossy.retry(&job.job_id))
        .try_collect()
        .await
        .expect("every retry answers its new job");
    let delayed = direct
        .submit(
            Submit::json("sleep", serde_json::json!({"ms": 20_000}))
                .delay(Duration::from_secs(3600)),
        )
        .await
        .expect("a delayed job");
    let cancelled = lossy.cancel(&delayed.job_id).await.expect("cancel");
    let mut imports = Vec::new();
    for batch in 0..4 {
        let entries: Vec<LedgerEntry> =
            (0..5).map(|i| entry(&format!("inv-{batch}-{i}"))).collect();
        imports.push(lossy.import_ledger(&entries).await.expect("import"));
    }

    let mut webhooks = BTreeSet::new();
    let mut schedules = BTreeSet::new();
    for i in 0..3 {
        let hook = NewWebhook::to(format!("http://127.0.0.1:9/hook-{i}"));
        webhooks.insert(lossy.register_webhook(&hook).await.expect("register").id);
        let monthly = NewSchedule::new(
            "gst-summary",
            serde_json::json!({"month": {"$fire": "previous_month"}}),
            "0 6 1 * *",
            "Asia/Kolkata",
        );
        schedules.insert(
            lossy
                .create_schedule(&monthly)
                .await
                .expect("create")
                .schedule_id,
        );
    }

    // Assert: the proxy did lose answers and cut connections ...
    let (lost, cut) = (
        proxy.lost.load(Ordering::Relaxed),
        proxy.cut.load(Ordering::Relaxed),
    );
    assert!(
        lost >= 5 && cut >= 3,
        "lost {lost} answers, cut {cut} connections"
    );
    // ... every submit ended with its own job and result ...
    for (ms, job, result) in &answers {
        assert_eq!(job.status, JobStatus::Succeeded, "{job:?}");
        assert_eq!(job.params["ms"], *ms);
        assert_eq!(result["slept_ms"], *ms, "job {}", job.job_id);
    }
    // ... each intent made exactly one job ...
    let jobs: Vec<Job> = direct
        .jobs(JobFilter {
            page_size: Some(7),
            ..Default::default()
        })
        .try_collect()
        .await
        .expect("list");
    let mut by_ms: BTreeMap<u64, Vec<&Job>> = BTreeMap::new();
    for job in &jobs {
        by_ms
            .entry(job.params["ms"].as_u64().expect("ms"))
            .or_default()
            .push(job);
    }
    for ms in 0..submits {
        let made = by_ms.get(&ms).map(Vec::len).unwrap_or(0);
        assert_eq!(made, 1, "the submit of ms={ms} made {made} jobs");
    }
    let answered: BTreeSet<&str> = answers
        .iter()
        .map(|(_, job, _)| job.job_id.as_str())
        .collect();
    assert_eq!(
        answered.len() as u64,
        submits,
        "two submits answered one job"
    );
    for (original, retry) in failed.iter().zip(&retries) {
        let made: Vec<&str> = jobs
            .iter()
            .filter(|job| job.retry_of.as_deref() == Some(original.job_id.as_str()))
            .map(|job| job.job_id.as_str())
            .collect();
        assert_eq!(
            made,
            [retry.job_id.as_str()],
            "retries of {}",
            original.job_id
        );
    }
    assert_eq!(
        jobs.len() as u64,
        submits + 2 * failed.len() as u64 + 1,
        "jobs made in all"
    );
    // ... and so did each registration of a webhook and each schedule ...
    let listed: BTreeSet<String> = direct
        .webhooks()
        .map_ok(|webhook| webhook.id)
        .try_collect()
        .await
        .expect("webhooks");
    assert_eq!(listed, webhooks);
    let listed: BTreeSet<String> = direct
        .schedules()
        .map_ok(|schedule| schedule.schedule_id)
        .try_collect()
        .await
        .expect("schedules");
    assert_eq!(listed, schedules);
    // ... and the cancel and the imports answered as their first try did.
    assert_eq!(cancelled.status, JobStatus::Cancelled);
    for import in &imports {
        assert_eq!((import.inserted, import.skipped), (5, 0), "{imports:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_intent_takes_effect_once_through_a_lossy_proxy_on_sqlite() {
    every_intent_takes_effect_once_through_a_lossy_proxy(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_intent_takes_effect_once_through_a_lossy_proxy_on_postgres() {
    every_intent_takes_effect_once_through_a_lossy_proxy(Backend::PgRedis).await;
}
