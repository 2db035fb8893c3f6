//! Concurrency caps and priorities at the claim: jobs over a cap are
//! parked out of the outbox, a running job's end wakes the first parked
//! job of its tenant, and the waker wakes what a cap has room for.

use serde_json::json;
use shared::{
    ids::new_job_id,
    model::{AttemptOutcome, Cap, JobErrorObject, Priority, ResultBody, WaitReason},
    settings::Caps,
    time::now_ms,
};
use store::{Claim, NewJob, QueuedJob, Submission, SuccessWrite};

use crate::{harness::TestDb, on_both_databases};

on_both_databases!(
    jobs_over_the_tenant_cap_are_parked_in_rank_order_and_woken_one_by_one,
    the_cap_of_a_kind_parks_only_that_kind,
    ends_written_together_wake_one_parked_job_each,
);

fn job(tenant: &str, kind: &str, priority: Priority) -> Submission {
    Submission::at_once(
        NewJob {
            job_id: new_job_id(),
            tenant_id: tenant.into(),
            kind: kind.into(),
            params: json!({"ms": 1}).to_string(),
            max_attempts: 2,
            priority,
            external: false,
        },
        now_ms(),
    )
}

fn ids(jobs: &[&Submission]) -> Vec<String> {
    jobs.iter().map(|s| s.job.job_id.clone()).collect()
}

/// The ids `take_due_outbox` publishes now.
async fn publish_due(db: &TestDb) -> Vec<String> {
    db.store
        .take_due_outbox(100, 60_000, async |_| true)
        .await
        .unwrap()
        .into_iter()
        .map(|job: QueuedJob| job.job_id)
        .collect()
}

async fn claim(db: &TestDb, jobs: &[&Submission], caps: &Caps) -> Vec<Option<Claim>> {
    db.store
        .claim_attempts(&ids(jobs), "w1", now_ms() + 60_000, caps)
        .await
        .unwrap()
}

/// Which of `jobs` the claim started.
async fn claimed(db: &TestDb, jobs: &[&Submission], caps: &Caps) -> Vec<bool> {
    claim(db, jobs, caps)
        .await
        .iter()
        .map(Option::is_some)
        .collect()
}

async fn fail(db: &TestDb, claim: &Claim) {
    let failed = AttemptOutcome::Failed {
        error: JobErrorObject {
            error_type: "test".into(),
            message: "ends the attempt".into(),
            details: None,
        },
    };
    assert!(
        db.store
            .finish_attempt(&claim.job_id, claim.attempt, &failed, None)
            .await
            .unwrap()
    );
}

async fn jobs_over_the_tenant_cap_are_parked_in_rank_order_and_woken_one_by_one(db: &TestDb) {
    let (n1, n2, n3) = (
        job("acme", "sleep", Priority::Normal),
        job("acme", "sleep", Priority::Normal),
        job("acme", "sleep", Priority::Normal),
    );
    // Submitted last, ranked first.
    let high = job("acme", "sleep", Priority::High);
    let other = job("other", "sleep", Priority::Low);
    let all = [&n1, &n2, &n3, &high, &other];
    db.store
        .submit_batch(&all.map(|s| s.clone()), store::Publishing::Relay)
        .await
        .unwrap();
    let caps = Caps {
        per_tenant: 2,
        per_kind: Vec::new(),
    };

    let claims = claim(db, &all, &caps).await;
    let claimed: Vec<bool> = claims.iter().map(Option::is_some).collect();
    assert_eq!(
        claimed,
        [true, false, false, true, true],
        "acme's high job and its first normal one run; the other tenant is not capped by acme"
    );
    let parked = db
        .store
        .get_job("acme", &n2.job.job_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(parked.capped, Some(Cap::Tenant));
    assert_eq!(
        parked.waiting_at(now_ms()).map(|(reason, _)| reason),
        Some(WaitReason::TenantConcurrencyLimit)
    );
    assert_eq!(
        db.store.running_counts("acme", "sleep").await.unwrap(),
        (2, 2)
    );
    assert_eq!(
        publish_due(db).await,
        Vec::<String>::new(),
        "parked jobs are out of the outbox"
    );

    // A running job's end wakes the first parked job, and only it.
    fail(db, claims[0].as_ref().unwrap()).await;
    assert_eq!(publish_due(db).await, ids(&[&n2]));
    let woken = db
        .store
        .get_job("acme", &n2.job.job_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(woken.capped, None);
    assert!(
        claim(db, &[&n2], &caps).await[0].is_some(),
        "the woken job runs"
    );
    assert_eq!(
        db.store.wake_parked(&caps).await.unwrap(),
        0,
        "acme runs its cap: nothing to wake"
    );
    let n3_parked = db
        .store
        .get_job("acme", &n3.job.job_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(n3_parked.capped, Some(Cap::Tenant));
    // The cap raised: the waker wakes what it has room for.
    let raised = Caps {
        per_tenant: 3,
        per_kind: Vec::new(),
    };
    assert_eq!(db.store.wake_parked(&raised).await.unwrap(), 1);
    assert_eq!(publish_due(db).await, ids(&[&n3]));
}

async fn the_cap_of_a_kind_parks_only_that_kind(db: &TestDb) {
    let (s1, s2) = (
        job("acme", "sleep", Priority::Normal),
        job("acme", "sleep", Priority::Normal),
    );
    let flaky = job("acme", "flaky", Priority::Normal);
    let all = [&s1, &s2, &flaky];
    db.store
        .submit_batch(&all.map(|s| s.clone()), store::Publishing::Relay)
        .await
        .unwrap();
    let caps = Caps {
        per_tenant: 0,
        per_kind: vec![("sleep".into(), 1)],
    };
    assert_eq!(claimed(db, &all, &caps).await, [true, false, true]);
    let parked = db
        .store
        .get_job("acme", &s2.job.job_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(parked.capped, Some(Cap::Kind));

    // A cap removed: the waker wakes what it parked.
    assert_eq!(db.store.wake_parked(&Caps::default()).await.unwrap(), 1);
    assert_eq!(publish_due(db).await, ids(&[&s2]));
}

/// Successes written in one statement (a worker's group commit) wake one
/// parked job per job they end, at the tenant's cap and at the kind's, in
/// rank order: as many as if each had ended alone, and no more.
async fn ends_written_together_wake_one_parked_job_each(db: &TestDb) {
    let running: Vec<Submission> = (0..3)
        .map(|_| job("acme", "sleep", Priority::Normal))
        .collect();
    let parked: Vec<Submission> = (0..4)
        .map(|_| job("acme", "sleep", Priority::Normal))
        .collect();
    let report_running = job("acme", "report", Priority::Normal);
    let reports_parked = [
        job("acme", "report", Priority::Normal),
        job("acme", "report", Priority::Normal),
    ];
    let all: Vec<&Submission> = running
        .iter()
        .chain(&parked)
        .chain([&report_running])
        .chain(&reports_parked)
        .collect();
    db.store
        .submit_batch(
            &all.iter().map(|s| (*s).clone()).collect::<Vec<_>>(),
            store::Publishing::Relay,
        )
        .await
        .unwrap();
    let tenant_cap = Caps {
        per_tenant: 3,
        per_kind: Vec::new(),
    };
    let sleeps: Vec<&Submission> = running.iter().chain(&parked).collect();
    assert_eq!(
        claimed(db, &sleeps, &tenant_cap).await,
        [true, true, true, false, false, false, false]
    );
    let kind_cap = Caps {
        per_tenant: 0,
        per_kind: vec![("report".into(), 1)],
    };
    let reports: Vec<&Submission> = [&report_running]
        .into_iter()
        .chain(&reports_parked)
        .collect();
    assert_eq!(claimed(db, &reports, &kind_cap).await, [true, false, false]);
    assert_eq!(publish_due(db).await, Vec::<String>::new());

    // Two sleeps and the report end in one write: acme's two ends of sleep
    // and one of report wake three jobs at the tenant's cap (the first
    // three parked sleeps), and the report's end the first parked report.
    let ends: Vec<SuccessWrite> = [&running[0], &running[1], &report_running]
        .iter()
        .map(|s| SuccessWrite::new(s.job.job_id.clone(), 1, ResultBody::Document("{}".into())))
        .collect();
    assert_eq!(
        db.store.finish_succeeded(&ends).await.unwrap(),
        [true, true, true]
    );
    let mut woken = publish_due(db).await;
    woken.sort();
    let mut expected = ids(&[&parked[0], &parked[1], &parked[2], &reports_parked[0]]);
    expected.sort();
    assert_eq!(
        woken, expected,
        "one parked job woken per job ended, in rank order"
    );
    for still in [&parked[3], &reports_parked[1]] {
        let job = db
            .store
            .get_job("acme", &still.job.job_id)
            .await
            .unwrap()
            .unwrap();
        assert!(job.capped.is_some(), "{} stays parked", job.job_id);
    }
}
