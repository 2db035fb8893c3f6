//! The dashboard: sessions and their tokens, the job counters and the
//! chart of the last hour, and webhook health.

use std::collections::BTreeMap;

use shared::{model::JobStatus, time::now_ms};
use store::{Dialect, TokenCheck, check_session_token, hash_key};

use crate::{
    harness::TestDb,
    on_both_databases,
    rows::{
        TestJob, execute, finished_by_minute, insert_job, jobs_by_kind_and_status, scalar,
        set_status,
    },
    webhooks::{announce, finished_job, record, registered},
};

on_both_databases!(
    sessions_open_read_expire_and_close,
    the_counters_equal_the_jobs_table_after_changes_and_folds,
    webhook_health_counts_recent_attempts_and_the_last_failure,
);

const STATUSES: [JobStatus; 5] = [
    JobStatus::Queued,
    JobStatus::Running,
    JobStatus::Succeeded,
    JobStatus::Failed,
    JobStatus::Cancelled,
];

/// The tenant's overview (counts by kind and status, and the last hour's
/// chart) equals a `COUNT(*) GROUP BY` of its jobs.
pub async fn assert_counters_exact(db: &TestDb, tenant_id: &str, when: &str) {
    let counts = db.store.job_counts(tenant_id).await.unwrap();
    let expected = jobs_by_kind_and_status(db, tenant_id).await;
    let mut shown = BTreeMap::new();
    for (kind, by_status) in &counts.by_kind {
        for (status, n) in by_status {
            shown.insert((kind.clone(), status.as_str().to_owned()), *n);
        }
    }
    assert_eq!(shown, expected, "counts by kind and status {when}");
    let kinds: Vec<_> = counts
        .by_kind
        .iter()
        .map(|(kind, _)| kind.clone())
        .collect();
    let mut sorted = kinds.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(kinds, sorted, "kinds in name order, once each {when}");
    for status in STATUSES {
        let expected: i64 = expected
            .iter()
            .filter(|((_, s), _)| s == status.as_str())
            .map(|(_, n)| n)
            .sum();
        let shown = counts.by_status.get(&status).copied().unwrap_or(0);
        assert_eq!(shown, expected, "{} jobs {when}", status.as_str());
    }

    let series = db.store.throughput(tenant_id, 60).await.unwrap();
    assert_eq!(series.len(), 60);
    let since = series[0].start;
    assert_eq!(since % 60_000, 0);
    assert!(series.windows(2).all(|w| w[1].start == w[0].start + 60_000));
    let last = series[59].start;
    assert!(
        (last..last + 60_000).contains(&now_ms()),
        "the chart ends now"
    );
    let expected: BTreeMap<(i64, String), i64> = finished_by_minute(db, tenant_id)
        .await
        .into_iter()
        .filter(|((start, _), _)| *start >= since)
        .collect();
    let mut shown = BTreeMap::new();
    for minute in &series {
        for (status, n) in [
            ("SUCCEEDED", minute.succeeded),
            ("FAILED", minute.failed),
            ("CANCELLED", minute.cancelled),
        ] {
            if n != 0 {
                shown.insert((minute.start, status.to_owned()), n);
            }
        }
    }
    assert_eq!(shown, expected, "final jobs per minute {when}");
}

async fn sessions_open_read_expire_and_close(db: &TestDb) {
    let key = db
        .store
        .create_api_key("acme", &store::Actor::Command("test"))
        .await
        .unwrap();
    let key_hash = hash_key(&key.key);
    let session = db
        .store
        .create_dashboard_session("acme", &key.key_id, &key_hash, 60_000)
        .await
        .unwrap();
    assert!(session.token.starts_with(&format!("{}.", key.key_id)));
    assert!((session.expires_at - now_ms() - 60_000).abs() < 10_000);
    assert_ne!(session.csrf_token, session.token);

    let by_id = |id: &str| (id == key.key_id).then(|| key_hash.clone());
    assert_eq!(
        check_session_token(&session.token, by_id),
        TokenCheck::Issued
    );
    let other_key = |_: &str| Some(hash_key("another key"));
    assert_eq!(
        check_session_token(&session.token, other_key),
        TokenCheck::Invalid
    );
    assert_eq!(
        check_session_token(&session.token, |_| None),
        TokenCheck::NoKey
    );
    assert_eq!(
        check_session_token("not a token", |_| Some(key_hash.clone())),
        TokenCheck::Invalid
    );
    let mut tampered = session.token.clone();
    let last = tampered.pop().expect("a tag");
    tampered.push(if last == '0' { '1' } else { '0' });
    assert_eq!(check_session_token(&tampered, by_id), TokenCheck::Invalid);

    let read = db.store.dashboard_session(&session.token).await.unwrap();
    let read = read.expect("the session");
    assert_eq!(read.tenant_id, "acme");
    assert_eq!(read.key_hash, key_hash);
    assert_eq!(read.csrf_token, session.csrf_token);
    assert_eq!(read.expires_at, session.expires_at);
    assert!(
        db.store
            .dashboard_session(&tampered)
            .await
            .unwrap()
            .is_none()
    );

    let expired = db
        .store
        .create_dashboard_session("acme", &key.key_id, &key_hash, 0)
        .await
        .unwrap();
    assert!(
        db.store
            .dashboard_session(&expired.token)
            .await
            .unwrap()
            .is_none()
    );
    let sessions = "SELECT COUNT(*) FROM dashboard_sessions";
    assert_eq!(scalar(db, sessions).await, 2);
    // A sign-in deletes the sessions that expired.
    let another = db
        .store
        .create_dashboard_session("acme", &key.key_id, &key_hash, 60_000)
        .await
        .unwrap();
    assert_eq!(scalar(db, sessions).await, 2);

    db.store
        .delete_dashboard_session(&session.token)
        .await
        .unwrap();
    assert!(
        db.store
            .dashboard_session(&session.token)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        db.store
            .dashboard_session(&another.token)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(scalar(db, sessions).await, 1);
}

async fn the_counters_equal_the_jobs_table_after_changes_and_folds(db: &TestDb) {
    let now = now_ms();
    let queued = TestJob::queued("acme");
    let queued_gst = TestJob::queued("acme").kind("gst-summary");
    let alone_in_its_minute = TestJob::queued("acme").finished("CANCELLED", now - 30 * 60_000);
    let jobs = [
        TestJob::queued("acme").finished("SUCCEEDED", now - 90_000),
        TestJob::queued("acme")
            .kind("gst-summary")
            .finished("SUCCEEDED", now - 30_000),
        TestJob::queued("acme").finished("FAILED", now - 30_000),
        TestJob::queued("acme").finished("FAILED", now - 3 * 3_600_000),
        TestJob::queued("other").finished("SUCCEEDED", now - 30_000),
        TestJob::queued("other"),
    ];
    for job in [&queued, &queued_gst, &alone_in_its_minute]
        .into_iter()
        .chain(&jobs)
    {
        insert_job(db, job).await;
    }
    assert_counters_exact(db, "acme", "after inserts").await;
    assert_counters_exact(db, "other", "after inserts").await;
    let counts = db.store.job_counts("acme").await.unwrap();
    assert_eq!(counts.oldest_queued_at, Some(queued.created_at));

    set_status(db, &queued.job_id, "RUNNING", None).await;
    assert_counters_exact(db, "acme", "after a claim").await;
    set_status(db, &queued.job_id, "SUCCEEDED", Some(now_ms())).await;
    set_status(db, &queued_gst.job_id, "CANCELLED", Some(now_ms())).await;
    execute(
        db,
        &format!("DELETE FROM jobs WHERE job_id = '{}'", jobs[0].job_id),
    )
    .await;
    let late = TestJob::queued("acme").kind("ledger-export");
    insert_job(db, &late).await;
    assert_counters_exact(db, "acme", "after finishes, a delete and a submit").await;
    let counts = db.store.job_counts("acme").await.unwrap();
    assert_eq!(counts.oldest_queued_at, Some(late.created_at));

    let folded = db.store.fold_job_counts().await.unwrap();
    let deltas = "SELECT COUNT(*) FROM job_count_deltas";
    match db.store.dialect() {
        // Every change above left a delta; the fold took them all.
        Dialect::Postgres => assert!(folded >= 10, "{folded} deltas folded"),
        // The triggers count in place: there is nothing to fold.
        Dialect::Sqlite => assert_eq!(folded, 0),
    }
    assert_eq!(scalar(db, deltas).await, 0);
    assert_counters_exact(db, "acme", "after a fold").await;
    assert_counters_exact(db, "other", "after a fold").await;

    // A minute whose only job is deleted is dropped by the next fold.
    let empty_minutes = "SELECT COUNT(*) FROM job_minutes WHERE n = 0";
    execute(
        db,
        &format!(
            "DELETE FROM jobs WHERE job_id = '{}'",
            alone_in_its_minute.job_id
        ),
    )
    .await;
    assert_counters_exact(db, "acme", "after the minute's delete").await;
    let folded = db.store.fold_job_counts().await.unwrap();
    assert_eq!(folded > 0, db.store.dialect() == Dialect::Postgres);
    assert_eq!(scalar(db, empty_minutes).await, 0);
    assert_counters_exact(db, "acme", "after the second fold").await;
    assert_eq!(
        db.store.fold_job_counts().await.unwrap(),
        0,
        "nothing left to fold"
    );
    assert_eq!(
        scalar(db, "SELECT COUNT(*) FROM job_counts WHERE n < 0").await,
        0
    );
}

async fn webhook_health_counts_recent_attempts_and_the_last_failure(db: &TestDb) {
    let hook = registered(db, "acme", &["job.succeeded"], None).await;
    let quiet = registered(db, "acme", &["job.failed"], None).await;
    let mut jobs = Vec::new();
    for _ in 0..3 {
        jobs.push(finished_job(db, "acme", "SUCCEEDED").await.job_id);
    }
    announce(db, &jobs.iter().map(String::as_str).collect::<Vec<_>>()).await;
    let mut events = db
        .store
        .claim_due_events(10, now_ms() + 60_000)
        .await
        .unwrap();
    events.sort_by(|x, y| x.event_id.cmp(&y.event_id));
    let refused = store::DeliveryRecord {
        response_status: None,
        error: Some("connection refused".to_owned()),
        ..record(0, None)
    };
    db.store
        .record_delivery(&events[0], &record(200, None))
        .await
        .unwrap();
    db.store
        .record_delivery(&events[1], &refused)
        .await
        .unwrap();
    db.store
        .record_delivery(&events[2], &record(500, Some(now_ms() - 1)))
        .await
        .unwrap();
    let retry = db
        .store
        .claim_due_events(10, now_ms() + 60_000)
        .await
        .unwrap();
    assert_eq!(retry.len(), 1);
    db.store
        .record_delivery(&retry[0], &record(204, None))
        .await
        .unwrap();

    let ids = [
        hook.webhook_id.clone(),
        quiet.webhook_id.clone(),
        "wh_unknown".to_owned(),
    ];
    let health = db
        .store
        .webhook_health("acme", &ids, now_ms() - 60_000)
        .await
        .unwrap();
    assert_eq!(health.len(), 3);
    let of_hook = &health[&hook.webhook_id];
    assert_eq!((of_hook.attempts, of_hook.succeeded), (4, 2));
    let (failed_at, why) = of_hook.last_error.clone().expect("a failure");
    assert_eq!(why, "answered 500");
    assert!((now_ms() - failed_at).abs() < 60_000);
    for id in &ids[1..] {
        let none = &health[id];
        assert_eq!((none.attempts, none.succeeded), (0, 0), "{id}");
        assert!(none.last_error.is_none(), "{id}");
    }

    // Attempts count from `since`; the last failure is the last ever.
    let later = db
        .store
        .webhook_health("acme", &ids[..1], now_ms() + 60_000)
        .await
        .unwrap();
    assert_eq!(later[&hook.webhook_id].attempts, 0);
    assert!(later[&hook.webhook_id].last_error.is_some());
    // Another tenant sees nothing of it.
    let elsewhere = db
        .store
        .webhook_health("other", &ids[..1], 0)
        .await
        .unwrap();
    assert_eq!(elsewhere[&hook.webhook_id].attempts, 0);
    assert!(elsewhere[&hook.webhook_id].last_error.is_none());
    assert!(
        db.store
            .webhook_health("acme", &[], 0)
            .await
            .unwrap()
            .is_empty()
    );
}
