//! Webhooks: registration within the caps, reads and changes, the events
//! of final statuses, their leases and the delivery log.

use std::collections::HashSet;

use shared::{model::ResultBody, time::now_ms};
use store::{
    DeliveryRecord, DueEvent, NewWebhook, Registration, SuccessWrite, Webhook, WebhookCaps,
};

use crate::{
    harness::TestDb,
    on_both_databases,
    rows::{TestJob, execute, insert_job, scalar, set_status, strings, wait_for_lock_waits},
};

on_both_databases!(
    webhooks_are_registered_read_listed_changed_and_deleted,
    registration_keeps_within_the_caps,
    events_are_made_for_matching_enabled_webhooks_only,
    a_per_job_webhook_of_a_finished_job_gets_its_event_at_registration,
    claims_lease_each_due_event_to_one_dispatcher,
    concurrent_claims_never_share_an_event,
    a_delivery_is_logged_and_moves_its_event_on,
    successes_make_the_events_of_the_webhooks_that_watch_them,
    only_committed_writes_of_events_move_the_count,
);

const CAPS: WebhookCaps = WebhookCaps {
    per_tenant: 100,
    per_job: 100,
};

pub async fn register(
    db: &TestDb,
    tenant_id: &str,
    events: &[&str],
    job_id: Option<&str>,
    caps: WebhookCaps,
) -> Registration {
    let new = NewWebhook {
        tenant_id: tenant_id.to_owned(),
        url: "https://receiver.example/hook".to_owned(),
        events: events.iter().map(|e| (*e).to_owned()).collect(),
        job_id: job_id.map(str::to_owned),
    };
    let mut tx = db.store.begin_write().await.unwrap();
    let registration = db
        .store
        .register_webhook(&mut tx, &new, caps)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    registration
}

pub async fn registered(
    db: &TestDb,
    tenant_id: &str,
    events: &[&str],
    job_id: Option<&str>,
) -> Webhook {
    match register(db, tenant_id, events, job_id, CAPS).await {
        Registration::Registered(webhook) => webhook,
        other => panic!("not registered: {other:?}"),
    }
}

/// What a final-status transaction does for these jobs' webhooks.
pub async fn announce(db: &TestDb, job_ids: &[&str]) {
    let job_ids: Vec<String> = job_ids.iter().map(|id| (*id).to_owned()).collect();
    db.store.announce_final_now(&job_ids).await.unwrap();
}

/// A job of `tenant_id` that ended now in `status`.
pub async fn finished_job(db: &TestDb, tenant_id: &str, status: &'static str) -> TestJob {
    let job = TestJob::queued(tenant_id).finished(status, now_ms());
    insert_job(db, &job).await;
    job
}

/// Every event, as `webhook_id job_id event_type`, sorted.
async fn events(db: &TestDb) -> Vec<String> {
    strings(
        db,
        "SELECT webhook_id || ' ' || job_id || ' ' || event_type FROM webhook_events
         ORDER BY 1",
    )
    .await
}

pub async fn event_state(db: &TestDb, event_id: &str) -> String {
    let states = strings(
        db,
        &format!("SELECT state FROM webhook_events WHERE event_id = '{event_id}'"),
    )
    .await;
    states.into_iter().next().expect("the event")
}

pub fn record(status: u16, next_attempt_at: Option<i64>) -> DeliveryRecord {
    DeliveryRecord {
        response_status: Some(status),
        error: None,
        duration_ms: 12,
        next_attempt_at,
        delivered: (200..300).contains(&status),
        gone: status == 410,
    }
}

/// A job of `tenant_id` claimed by a worker: running its first attempt.
async fn running_job(db: &TestDb, tenant_id: &str) -> String {
    let job = TestJob::queued(tenant_id);
    insert_job(db, &job).await;
    let claimed = db
        .store
        .claim_attempts(
            std::slice::from_ref(&job.job_id),
            "w1",
            now_ms() + 60_000,
            &Default::default(),
        )
        .await
        .unwrap();
    assert!(claimed[0].is_some(), "the job is claimed");
    job.job_id
}

fn success(job_id: &str) -> SuccessWrite {
    SuccessWrite::new(job_id, 1, ResultBody::Document("{}".into()))
}

fn ids(events: &[DueEvent]) -> HashSet<String> {
    events.iter().map(|e| e.event_id.clone()).collect()
}

async fn webhooks_are_registered_read_listed_changed_and_deleted(db: &TestDb) {
    let first = registered(db, "acme", &["job.succeeded"], None).await;
    assert!(first.webhook_id.starts_with("wh_"), "{}", first.webhook_id);
    assert_eq!(first.tenant_id, "acme");
    assert_eq!(first.events, ["job.succeeded"]);
    assert!(first.enabled);
    let secret = first.secret.as_deref().expect("made with its secret");
    assert!(secret.starts_with("whsec_"), "{secret}");
    assert_eq!(first.job_id, None);
    assert!((now_ms() - first.created_at).abs() < 60_000);
    let second = registered(db, "acme", &["job.failed", "job.cancelled"], None).await;
    registered(db, "other", &["job.failed"], None).await;

    let read = db
        .store
        .get_webhook("acme", &second.webhook_id)
        .await
        .unwrap();
    let read = read.expect("the webhook");
    assert_eq!(read.events, ["job.failed", "job.cancelled"]);
    assert_eq!(read.created_at, second.created_at);
    assert_eq!(read.secret, None, "a read does not open the secret");
    assert_eq!(read.url, "https://receiver.example/hook");
    let elsewhere = db
        .store
        .get_webhook("other", &second.webhook_id)
        .await
        .unwrap();
    assert!(elsewhere.is_none(), "another tenant's webhook");

    // Newest first, one more than the limit.
    let page = db.store.list_webhooks("acme", None, 1).await.unwrap();
    let page: Vec<_> = page.iter().map(|w| w.webhook_id.as_str()).collect();
    assert_eq!(
        page,
        [second.webhook_id.as_str(), first.webhook_id.as_str()]
    );
    let rest = db
        .store
        .list_webhooks("acme", Some(&second.webhook_id), 10)
        .await
        .unwrap();
    let rest: Vec<_> = rest.iter().map(|w| w.webhook_id.as_str()).collect();
    assert_eq!(rest, [first.webhook_id.as_str()]);
    assert_eq!(
        db.store
            .list_webhooks("other", None, 10)
            .await
            .unwrap()
            .len(),
        1
    );

    let mut tx = db.store.begin_write().await.unwrap();
    let rotated = db
        .store
        .rotate_webhook_secret(&mut tx, "acme", &first.webhook_id)
        .await
        .unwrap()
        .expect("rotated");
    let not_theirs = db
        .store
        .rotate_webhook_secret(&mut tx, "other", &first.webhook_id)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(rotated.secret.is_some(), "made with its secret");
    assert_ne!(rotated.secret, first.secret);
    assert!(not_theirs.is_none());

    execute(
        db,
        &format!(
            "UPDATE webhooks SET enabled = false WHERE webhook_id = '{}'",
            first.webhook_id
        ),
    )
    .await;
    let read = db
        .store
        .get_webhook("acme", &first.webhook_id)
        .await
        .unwrap();
    assert!(!read.expect("the webhook").enabled);
    let mut tx = db.store.begin_write().await.unwrap();
    let enabled = db
        .store
        .enable_webhook(&mut tx, "acme", &first.webhook_id)
        .await
        .unwrap();
    let not_theirs = db
        .store
        .enable_webhook(&mut tx, "other", &first.webhook_id)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(enabled.expect("enabled").enabled);
    assert!(not_theirs.is_none());

    assert!(
        !db.store
            .delete_webhook("other", &first.webhook_id, &store::Actor::Command("test"))
            .await
            .unwrap()
    );
    assert!(
        db.store
            .delete_webhook("acme", &first.webhook_id, &store::Actor::Command("test"))
            .await
            .unwrap()
    );
    assert!(
        db.store
            .get_webhook("acme", &first.webhook_id)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        !db.store
            .delete_webhook("acme", &first.webhook_id, &store::Actor::Command("test"))
            .await
            .unwrap()
    );
    assert!(
        db.store
            .get_webhook("acme", &second.webhook_id)
            .await
            .unwrap()
            .is_some()
    );
}

async fn registration_keeps_within_the_caps(db: &TestDb) {
    let caps = WebhookCaps {
        per_tenant: 2,
        per_job: 1,
    };
    for _ in 0..2 {
        let registration = register(db, "acme", &["job.failed"], None, caps).await;
        assert!(
            matches!(registration, Registration::Registered(_)),
            "{registration:?}"
        );
    }
    let full = register(db, "acme", &["job.failed"], None, caps).await;
    assert!(matches!(full, Registration::TenantFull(2)), "{full:?}");
    let elsewhere = register(db, "other", &["job.failed"], None, caps).await;
    assert!(
        matches!(elsewhere, Registration::Registered(_)),
        "{elsewhere:?}"
    );

    let no_job = register(db, "acme", &["job.failed"], Some("job_unknown"), caps).await;
    assert!(matches!(no_job, Registration::NoJob), "{no_job:?}");
    let job = TestJob::queued("acme");
    insert_job(db, &job).await;
    let not_theirs = register(db, "other", &["job.failed"], Some(&job.job_id), caps).await;
    assert!(matches!(not_theirs, Registration::NoJob), "{not_theirs:?}");
    // A per-job webhook does not count against the tenant's cap.
    let for_job = register(db, "acme", &["job.failed"], Some(&job.job_id), caps).await;
    let Registration::Registered(for_job) = for_job else {
        panic!("not registered: {for_job:?}");
    };
    assert_eq!(for_job.job_id.as_deref(), Some(job.job_id.as_str()));
    let job_full = register(db, "acme", &["job.failed"], Some(&job.job_id), caps).await;
    assert!(matches!(job_full, Registration::JobFull(1)), "{job_full:?}");
    assert_eq!(scalar(db, "SELECT COUNT(*) FROM webhooks").await, 4);
}

async fn events_are_made_for_matching_enabled_webhooks_only(db: &TestDb) {
    let [a, b, queued] = [(); 3].map(|()| TestJob::queued("acme"));
    let elsewhere = TestJob::queued("other");
    for job in [&a, &b, &queued, &elsewhere] {
        insert_job(db, job).await;
    }
    let on_success = registered(db, "acme", &["job.succeeded"], None).await;
    let on_failure = registered(db, "acme", &["job.failed", "job.cancelled"], None).await;
    let for_b = registered(
        db,
        "acme",
        &["job.succeeded", "job.failed"],
        Some(&b.job_id),
    )
    .await;
    let disabled = registered(db, "acme", &["job.succeeded"], Some(&a.job_id)).await;
    execute(
        db,
        &format!(
            "UPDATE webhooks SET enabled = false WHERE webhook_id = '{}'",
            disabled.webhook_id
        ),
    )
    .await;
    let other = registered(db, "other", &["job.succeeded", "job.failed"], None).await;
    set_status(db, &a.job_id, "SUCCEEDED", Some(now_ms())).await;
    set_status(db, &b.job_id, "FAILED", Some(now_ms())).await;
    set_status(db, &elsewhere.job_id, "SUCCEEDED", Some(now_ms())).await;

    announce(db, &[]).await;
    assert!(events(db).await.is_empty());
    announce(
        db,
        &[&a.job_id, &b.job_id, &queued.job_id, &elsewhere.job_id],
    )
    .await;

    let mut expected = vec![
        format!("{} {} job.succeeded", on_success.webhook_id, a.job_id),
        format!("{} {} job.failed", on_failure.webhook_id, b.job_id),
        format!("{} {} job.failed", for_b.webhook_id, b.job_id),
        format!("{} {} job.succeeded", other.webhook_id, elsewhere.job_id),
    ];
    expected.sort();
    assert_eq!(events(db).await, expected);

    let bodies = strings(
        db,
        &format!(
            "SELECT body FROM webhook_events WHERE webhook_id = '{}'",
            for_b.webhook_id
        ),
    )
    .await;
    let body: serde_json::Value = serde_json::from_str(&bodies[0]).expect("a JSON body");
    assert_eq!(body["type"], "job.failed");
    assert_eq!(body["data"]["job_id"], b.job_id.as_str());
    assert_eq!(body["data"]["status"], "FAILED");
    assert!(body["timestamp"].is_string());
    let due = scalar(
        db,
        "SELECT COUNT(*) FROM webhook_events WHERE state = 'pending' AND attempts = 0",
    )
    .await;
    assert_eq!(due, 4);
}

async fn a_per_job_webhook_of_a_finished_job_gets_its_event_at_registration(db: &TestDb) {
    let job = finished_job(db, "acme", "CANCELLED").await;
    let hears = registered(db, "acme", &["job.cancelled"], Some(&job.job_id)).await;
    registered(db, "acme", &["job.succeeded"], Some(&job.job_id)).await;
    assert_eq!(
        events(db).await,
        [format!("{} {} job.cancelled", hears.webhook_id, job.job_id)]
    );
}

async fn claims_lease_each_due_event_to_one_dispatcher(db: &TestDb) {
    let webhook = registered(db, "acme", &["job.succeeded"], None).await;
    let mut jobs = Vec::new();
    for _ in 0..3 {
        jobs.push(finished_job(db, "acme", "SUCCEEDED").await.job_id);
    }
    announce(db, &jobs.iter().map(String::as_str).collect::<Vec<_>>()).await;

    // A lease that has already lapsed: its events are due again at once.
    let lapsed = db
        .store
        .claim_due_events(2, now_ms() - 1_000)
        .await
        .unwrap();
    assert_eq!(lapsed.len(), 2);
    let leased = db
        .store
        .claim_due_events(10, now_ms() + 60_000)
        .await
        .unwrap();
    assert_eq!(leased.len(), 3);
    assert!(ids(&lapsed).is_subset(&ids(&leased)));
    let none = db
        .store
        .claim_due_events(10, now_ms() + 60_000)
        .await
        .unwrap();
    assert!(none.is_empty(), "leased events claimed again: {none:?}");

    for event in &leased {
        assert_eq!(event.webhook_id, webhook.webhook_id);
        assert_eq!(event.event_type, "job.succeeded");
        assert_eq!(event.attempts, 0);
        assert_eq!(event.url, webhook.url);
        assert_eq!(Some(&event.secret), webhook.secret.as_ref());
        assert!(event.enabled);
        let body: serde_json::Value = serde_json::from_str(&event.body).expect("JSON");
        assert!(jobs.iter().any(|id| body["data"]["job_id"] == id.as_str()));
    }
}

async fn concurrent_claims_never_share_an_event(db: &TestDb) {
    registered(db, "acme", &["job.failed"], None).await;
    let mut jobs = Vec::new();
    for _ in 0..20 {
        jobs.push(finished_job(db, "acme", "FAILED").await.job_id);
    }
    announce(db, &jobs.iter().map(String::as_str).collect::<Vec<_>>()).await;
    let lease = now_ms() + 60_000;
    let (one, two) = tokio::join!(
        db.store.claim_due_events(15, lease),
        db.store.claim_due_events(15, lease)
    );
    let (one, two) = (ids(&one.unwrap()), ids(&two.unwrap()));
    assert!(one.is_disjoint(&two), "an event leased twice");
    assert_eq!(one.len() + two.len(), 20);
}

async fn a_delivery_is_logged_and_moves_its_event_on(db: &TestDb) {
    let hook = registered(db, "acme", &["job.succeeded"], None).await;
    let spare = registered(db, "acme", &["job.succeeded"], None).await;
    let mut jobs = Vec::new();
    for _ in 0..4 {
        jobs.push(finished_job(db, "acme", "SUCCEEDED").await.job_id);
    }
    announce(db, &jobs.iter().map(String::as_str).collect::<Vec<_>>()).await;
    let claimed = db
        .store
        .claim_due_events(100, now_ms() + 60_000)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 8);
    let (mut hooks, spares): (Vec<DueEvent>, Vec<DueEvent>) = claimed
        .into_iter()
        .partition(|e| e.webhook_id == hook.webhook_id);
    hooks.sort_by(|x, y| x.event_id.cmp(&y.event_id));
    let [delivered, retried, given_up, waiting] = <[DueEvent; 4]>::try_from(hooks).unwrap();

    db.store
        .record_delivery(&delivered, &record(204, None))
        .await
        .unwrap();
    db.store
        .record_delivery(&retried, &record(503, Some(now_ms() - 1)))
        .await
        .unwrap();
    let failure = DeliveryRecord {
        response_status: None,
        error: Some("timed out".to_owned()),
        ..record(0, None)
    };
    db.store.record_delivery(&given_up, &failure).await.unwrap();
    assert_eq!(event_state(db, &delivered.event_id).await, "delivered");
    assert_eq!(event_state(db, &retried.event_id).await, "pending");
    assert_eq!(event_state(db, &given_up.event_id).await, "failed");

    // The log, newest first, one more than the limit.
    let log = db
        .store
        .list_deliveries(&hook.webhook_id, None, 2)
        .await
        .unwrap();
    let logged: Vec<_> = log.iter().map(|d| d.event_id.as_str()).collect();
    assert_eq!(
        logged,
        [&given_up.event_id, &retried.event_id, &delivered.event_id]
    );
    assert_eq!(log[0].error.as_deref(), Some("timed out"));
    assert_eq!(log[0].response_status, None);
    assert_eq!(log[0].next_attempt_at, None);
    assert_eq!(log[1].response_status, Some(503));
    assert!(log[1].next_attempt_at.is_some());
    assert_eq!(log[2].response_status, Some(204));
    assert!(log.iter().all(|d| d.attempt == 1 && d.duration_ms == 12));
    assert!(log.iter().all(|d| d.event_type == "job.succeeded"));
    assert!(
        log.iter()
            .all(|d| (now_ms() - d.attempted_at).abs() < 60_000)
    );
    let older = db
        .store
        .list_deliveries(&hook.webhook_id, Some(&log[1].delivery_id), 10)
        .await
        .unwrap();
    assert_eq!(older.len(), 1);
    assert_eq!(older[0].delivery_id, log[2].delivery_id);

    // The retry is due again, one attempt made.
    let again = db
        .store
        .claim_due_events(100, now_ms() + 60_000)
        .await
        .unwrap();
    assert_eq!(ids(&again), HashSet::from([retried.event_id.clone()]));
    assert_eq!(again[0].attempts, 1);

    // A 410 disables the webhook and ends its other pending events, and no
    // other webhook's.
    db.store
        .record_delivery(&again[0], &record(410, None))
        .await
        .unwrap();
    let read = db
        .store
        .get_webhook("acme", &hook.webhook_id)
        .await
        .unwrap();
    assert!(!read.expect("the webhook").enabled);
    assert_eq!(event_state(db, &retried.event_id).await, "failed");
    assert_eq!(event_state(db, &waiting.event_id).await, "failed");
    assert_eq!(event_state(db, &delivered.event_id).await, "delivered");
    for event in &spares {
        assert_eq!(event_state(db, &event.event_id).await, "pending");
    }
    let log = db
        .store
        .list_deliveries(&hook.webhook_id, None, 10)
        .await
        .unwrap();
    assert_eq!(log.len(), 4);
    assert_eq!((log[0].attempt, log[0].response_status), (2, Some(410)));

    // A dropped event ends failed; a delivered one stays delivered.
    db.store.drop_event(&spares[0].event_id).await.unwrap();
    db.store.drop_event(&delivered.event_id).await.unwrap();
    assert_eq!(event_state(db, &spares[0].event_id).await, "failed");
    assert_eq!(event_state(db, &delivered.event_id).await, "delivered");

    // A delivery of a deleted webhook's event is not logged.
    assert!(
        db.store
            .delete_webhook("acme", &spare.webhook_id, &store::Actor::Command("test"))
            .await
            .unwrap()
    );
    db.store
        .record_delivery(&spares[1], &record(200, None))
        .await
        .unwrap();
    let logged = scalar(
        db,
        &format!(
            "SELECT COUNT(*) FROM webhook_deliveries WHERE event_id = '{}'",
            spares[1].event_id
        ),
    )
    .await;
    assert_eq!(logged, 0);
}

async fn successes_make_the_events_of_the_webhooks_that_watch_them(db: &TestDb) {
    let tenant_wide = registered(db, "acme", &["job.succeeded"], None).await;
    let of_acme = running_job(db, "acme").await;
    let watched = running_job(db, "globex").await;
    let unwatched = running_job(db, "globex").await;
    let per_job = registered(db, "globex", &["job.succeeded"], Some(&watched)).await;
    let writes = [success(&unwatched), success(&of_acme), success(&watched)];

    let applied = db.store.finish_succeeded(&writes).await.unwrap();

    assert_eq!(applied, [true, true, true]);
    assert_eq!(
        events(db).await,
        sorted(vec![
            format!("{} {of_acme} job.succeeded", tenant_wide.webhook_id),
            format!("{} {watched} job.succeeded", per_job.webhook_id),
        ]),
        "one event per watching webhook, none for the job nothing watches"
    );
    let succeeded = scalar(
        db,
        "SELECT COUNT(*) FROM jobs WHERE status = 'SUCCEEDED' AND finished_at IS NOT NULL",
    )
    .await;
    assert_eq!(succeeded, 3);
}

fn sorted(mut lines: Vec<String>) -> Vec<String> {
    lines.sort();
    lines
}

/// A per-job webhook registered while the job's success waits for the
/// job's row: the registration holds the row (uncommitted) when the
/// success starts, so the success's statement began before the webhook
/// existed, and must still end the job with the webhook's event.
#[tokio::test]
async fn a_success_waiting_for_a_registration_makes_the_new_webhooks_event() {
    let db = TestDb::postgres().await;
    let job_id = running_job(&db, "acme").await;
    let new = NewWebhook {
        tenant_id: "acme".to_owned(),
        url: "https://receiver.example/hook".to_owned(),
        events: vec!["job.succeeded".to_owned()],
        job_id: Some(job_id.clone()),
    };
    let mut registration = db.store.begin_write().await.unwrap();
    let webhook = match db
        .store
        .register_webhook(&mut registration, &new, CAPS)
        .await
        .unwrap()
    {
        Registration::Registered(webhook) => webhook,
        other => panic!("not registered: {other:?}"),
    };
    let store = db.store.clone();
    let write = success(&job_id);
    let finishing = tokio::spawn(async move { store.finish_succeeded(&[write]).await });
    wait_for_lock_waits(&db, 1).await;
    registration.commit().await.unwrap();

    let applied = finishing.await.unwrap().unwrap();

    assert_eq!(applied, [true]);
    assert_eq!(
        events(&db).await,
        [format!("{} {job_id} job.succeeded", webhook.webhook_id)],
        "the webhook registered while the success waited gets its event"
    );
    db.finish().await;
}

/// The count the dispatcher watches (`Store::events_committed`) moves for
/// a commit that wrote events, and for nothing else.
async fn only_committed_writes_of_events_move_the_count(db: &TestDb) {
    let start = db.store.events_committed();
    let unwatched = running_job(db, "acme").await;
    db.store
        .finish_succeeded(&[success(&unwatched)])
        .await
        .unwrap();
    assert_eq!(
        db.store.events_committed(),
        start,
        "a success no webhook watches writes no event"
    );

    let finished = finished_job(db, "acme", "SUCCEEDED").await;
    let new = NewWebhook {
        tenant_id: "acme".to_owned(),
        url: "https://receiver.example/hook".to_owned(),
        events: vec!["job.succeeded".to_owned()],
        job_id: Some(finished.job_id.clone()),
    };
    let mut tx = db.store.begin_write().await.unwrap();
    db.store
        .register_webhook(&mut tx, &new, CAPS)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(events(db).await, Vec::<String>::new());
    assert_eq!(
        db.store.events_committed(),
        start,
        "events rolled back were never there"
    );

    registered(db, "acme", &["job.succeeded"], None).await;
    let watched = running_job(db, "acme").await;
    db.store
        .finish_succeeded(&[success(&watched)])
        .await
        .unwrap();
    assert_eq!(events(db).await.len(), 1);
    assert_eq!(
        db.store.events_committed(),
        start + 1,
        "the success that wrote its event moved the count"
    );
}
