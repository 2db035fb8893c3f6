//! Registered kinds and the worker protocol's store: a registered kind's
//! jobs are leased only by its tenant's workers over HTTP, never claimed
//! by the built-in ones (nor the other way round); leases count attempts,
//! respect caps and deadlines, and every write is fenced by the attempt.

use std::time::Duration;

use serde_json::json;
use shared::{
    ids::new_job_id,
    model::{AttemptOutcome, JobErrorObject, JobStatus, Priority, ResultBody},
    settings::Caps,
    time::now_ms,
};
use store::{
    LeaseAsk, LeasedAttempt, LeasedKind, NewJob, Publishing, PutKind, RegisteredKind, Submission,
    SuccessWrite,
};

use crate::{harness::TestDb, lifecycle::new_job, on_both_databases};

on_both_databases!(
    a_lease_never_taken_up_is_handed_back_uncounted_three_times_at_most,
    the_built_in_claims_never_take_external_jobs_and_leases_take_nothing_else,
    a_lease_takes_the_tenants_jobs_of_the_kinds_named_by_priority,
    a_heartbeat_extends_the_lease_up_to_the_deadline_and_only_for_the_held_attempt,
    a_lapsed_lease_counts_as_an_attempt_and_the_late_success_is_refused,
    the_cap_of_a_registered_kind_parks_its_jobs_until_one_ends,
    a_kind_registered_again_unchanged_writes_nothing_and_a_delete_keeps_its_jobs,
);

fn no_caps() -> Caps {
    Caps {
        per_tenant: 0,
        per_kind: Vec::new(),
    }
}

fn external_job(tenant: &str, kind: &str, priority: Priority) -> NewJob {
    NewJob {
        job_id: new_job_id(),
        tenant_id: tenant.into(),
        kind: kind.into(),
        params: json!({"month": "2026-10"}).to_string(),
        max_attempts: 3,
        priority,
        external: true,
    }
}

async fn submit(db: &TestDb, jobs: Vec<NewJob>) -> Vec<String> {
    let submissions: Vec<Submission> = jobs
        .into_iter()
        .map(|job| Submission::at_once(job, now_ms()))
        .collect();
    db.store
        .submit_batch(
            &submissions,
            Publishing::WithTheJob {
                queue: "test:jobs".into(),
            },
        )
        .await
        .unwrap();
    submissions.into_iter().map(|s| s.job.job_id).collect()
}

fn kind(name: &str, timeout_ms: i64, max_running: Option<i64>) -> LeasedKind {
    LeasedKind {
        name: name.into(),
        timeout_ms,
        max_running,
    }
}

async fn lease(
    db: &TestDb,
    tenant: &str,
    kinds: &[LeasedKind],
    most: usize,
    lease: Duration,
) -> Vec<LeasedAttempt> {
    db.store
        .lease_external(&LeaseAsk {
            tenant_id: tenant,
            kinds,
            most,
            worker: "w1",
            note_seen: true,
            lease,
            caps: &no_caps(),
        })
        .await
        .unwrap()
}

fn ids(leased: &[LeasedAttempt]) -> Vec<String> {
    leased.iter().map(|l| l.claim.job_id.clone()).collect()
}

async fn the_built_in_claims_never_take_external_jobs_and_leases_take_nothing_else(db: &TestDb) {
    let built_in = new_job("acme");
    let built_in_id = built_in.job_id.clone();
    let external = submit(
        db,
        vec![
            built_in,
            external_job("acme", "sales-export", Priority::Normal),
        ],
    )
    .await
    .pop()
    .unwrap();

    let claimed = db
        .store
        .claim_due("w1", 10, "", now_ms() + 60_000, &no_caps())
        .await
        .unwrap();
    assert_eq!(
        claimed
            .iter()
            .map(|c| c.job_id.as_str())
            .collect::<Vec<_>>(),
        [built_in_id.as_str()],
        "the built-in claim took an external job, or missed its own"
    );
    let by_id = db
        .store
        .claim_attempts(
            std::slice::from_ref(&external),
            "w1",
            now_ms() + 60_000,
            &no_caps(),
        )
        .await
        .unwrap();
    assert!(by_id[0].is_none(), "a claim by id took an external job");

    let named_built_in = lease(
        db,
        "acme",
        &[kind("sleep", 60_000, None)],
        10,
        Duration::from_secs(30),
    )
    .await;
    assert!(
        named_built_in.is_empty(),
        "a lease took a built-in kind's job"
    );
    let leased = lease(
        db,
        "acme",
        &[kind("sales-export", 60_000, None)],
        10,
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(ids(&leased), [external.as_str()]);
    assert_eq!(leased[0].claim.attempt, 1);
    assert_eq!(leased[0].claim.kind, "sales-export");
    let job = db.store.get_job("acme", &external).await.unwrap().unwrap();
    assert_eq!(job.status, JobStatus::Running);
    let held = db.store.attempts_held_by("http:w1").await.unwrap();
    assert_eq!(
        held.iter().map(|c| c.job_id.as_str()).collect::<Vec<_>>(),
        [external.as_str()]
    );
}

async fn a_lease_takes_the_tenants_jobs_of_the_kinds_named_by_priority(db: &TestDb) {
    let low = external_job("acme", "sales-export", Priority::Low);
    let high = external_job("acme", "invoices", Priority::High);
    let normal = external_job("acme", "sales-export", Priority::Normal);
    let other_kind = external_job("acme", "reconcile", Priority::High);
    let other_tenant = external_job("globex", "sales-export", Priority::High);
    let want = vec![
        high.job_id.clone(),
        normal.job_id.clone(),
        low.job_id.clone(),
    ];
    submit(db, vec![low, high, normal, other_kind, other_tenant]).await;

    let kinds = [
        kind("sales-export", 60_000, None),
        kind("invoices", 60_000, None),
    ];
    let first = lease(db, "acme", &kinds, 2, Duration::from_secs(30)).await;
    let rest = lease(db, "acme", &kinds, 10, Duration::from_secs(30)).await;
    let mut taken = ids(&first);
    taken.extend(ids(&rest));
    assert_eq!(first.len(), 2, "a lease took more than it asked for");
    assert_eq!(
        taken, want,
        "not the tenant's jobs of those kinds, by priority"
    );
    assert!(
        lease(db, "acme", &kinds, 10, Duration::from_secs(30))
            .await
            .is_empty()
    );
}

async fn a_heartbeat_extends_the_lease_up_to_the_deadline_and_only_for_the_held_attempt(
    db: &TestDb,
) {
    let job_id = submit(
        db,
        vec![external_job("acme", "sales-export", Priority::Normal)],
    )
    .await
    .pop()
    .unwrap();
    let before = now_ms();
    let leased = lease(
        db,
        "acme",
        &[kind("sales-export", 5_000, None)],
        1,
        Duration::from_secs(2),
    )
    .await;
    let leased = &leased[0];
    assert!(leased.deadline >= before + 5_000 && leased.deadline <= now_ms() + 5_000);
    assert!(leased.lease_expires_at <= leased.deadline);

    let beat = db
        .store
        .heartbeat_external("acme", &job_id, 1, Duration::from_secs(600), Some(0.5))
        .await
        .unwrap()
        .expect("the held attempt's heartbeat");
    assert_eq!(
        beat.lease_expires_at, leased.deadline,
        "a heartbeat extended the lease past the deadline"
    );
    assert!(!beat.cancel_requested);
    let job = db.store.get_job("acme", &job_id).await.unwrap().unwrap();
    assert_eq!(job.progress, Some(0.5));

    for (tenant, attempt) in [("acme", 2), ("globex", 1)] {
        assert!(
            db.store
                .heartbeat_external(tenant, &job_id, attempt, Duration::from_secs(60), None)
                .await
                .unwrap()
                .is_none(),
            "a heartbeat of attempt {attempt} of tenant {tenant} was taken"
        );
    }
    let mut tx = db.store.begin_write().await.unwrap();
    db.store.cancel_job(&mut tx, "acme", &job_id).await.unwrap();
    tx.commit().await.unwrap();
    let beat = db
        .store
        .heartbeat_external("acme", &job_id, 1, Duration::from_secs(60), None)
        .await
        .unwrap()
        .expect("the attempt is still held while it stops");
    assert!(
        beat.cancel_requested,
        "the heartbeat did not carry the cancel"
    );
    assert!(
        db.store
            .finish_attempt(&job_id, 1, &AttemptOutcome::Cancelled, None)
            .await
            .unwrap()
    );
    assert!(
        db.store
            .heartbeat_external("acme", &job_id, 1, Duration::from_secs(60), None)
            .await
            .unwrap()
            .is_none(),
        "a heartbeat of an ended attempt was taken"
    );
    let state = db
        .store
        .external_job("acme", &job_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(state.status, JobStatus::Cancelled);
}

async fn a_lapsed_lease_counts_as_an_attempt_and_the_late_success_is_refused(db: &TestDb) {
    let job_id = submit(
        db,
        vec![external_job("acme", "sales-export", Priority::Normal)],
    )
    .await
    .pop()
    .unwrap();
    let kinds = [kind("sales-export", 60_000, None)];
    let first = lease(db, "acme", &kinds, 1, Duration::ZERO).await;
    assert_eq!(first[0].claim.attempt, 1);
    // Taken up by a heartbeat, then left to lapse.
    db.store
        .heartbeat_external("acme", &job_id, 1, Duration::ZERO, None)
        .await
        .unwrap()
        .expect("the lease taken up");
    // Lapsed for certain, not only within the same millisecond.
    db.store.expire_lease_now(&job_id).await.unwrap();
    let (requeued, _) = db.store.requeue_lapsed_leases(100).await.unwrap();
    assert_eq!(requeued, 1, "the lapsed lease was not swept");

    let second = lease(db, "acme", &kinds, 1, Duration::from_secs(30)).await;
    assert_eq!(
        second[0].claim.attempt, 2,
        "the lapsed lease was not counted"
    );
    assert_eq!(second[0].claim.counted_attempt, 2);
    let late = db
        .store
        .finish_succeeded(&[SuccessWrite::new(
            job_id.clone(),
            1,
            ResultBody::Document("{\"late\":true}".into()),
        )])
        .await
        .unwrap();
    assert_eq!(late, [false], "the superseded attempt's success was taken");
    let state = db
        .store
        .external_job("acme", &job_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((state.status, state.attempt), (JobStatus::Running, 2));
    let done = db
        .store
        .finish_succeeded(&[SuccessWrite::new(
            job_id.clone(),
            2,
            ResultBody::Document("{\"rows\":3}".into()),
        )])
        .await
        .unwrap();
    assert_eq!(done, [true]);
    let Some(store::StoredResult::Document(stored)) =
        db.store.stored_result("acme", &job_id).await.unwrap()
    else {
        panic!("no result stored");
    };
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&stored).unwrap(),
        json!({"rows": 3})
    );
}

async fn the_cap_of_a_registered_kind_parks_its_jobs_until_one_ends(db: &TestDb) {
    let first = external_job("acme", "sales-export", Priority::High);
    let second = external_job("acme", "sales-export", Priority::Normal);
    let (first_id, second_id) = (first.job_id.clone(), second.job_id.clone());
    submit(db, vec![first, second]).await;
    let kinds = [kind("sales-export", 60_000, Some(1))];

    let leased = lease(db, "acme", &kinds, 2, Duration::from_secs(30)).await;
    assert_eq!(
        ids(&leased),
        [first_id.as_str()],
        "the kind's cap of 1 let two run"
    );
    assert!(
        lease(db, "acme", &kinds, 2, Duration::from_secs(30))
            .await
            .is_empty()
    );
    let parked = db.store.get_job("acme", &second_id).await.unwrap().unwrap();
    assert_eq!(parked.status, JobStatus::Queued);

    let failed = AttemptOutcome::Failed {
        error: JobErrorObject {
            error_type: "test".into(),
            message: "ends the attempt".into(),
            details: None,
        },
    };
    assert!(
        db.store
            .finish_attempt(&first_id, 1, &failed, None)
            .await
            .unwrap()
    );
    let leased = lease(db, "acme", &kinds, 2, Duration::from_secs(30)).await;
    assert_eq!(
        ids(&leased),
        [second_id],
        "the end of a job did not wake the parked one"
    );
}

async fn a_kind_registered_again_unchanged_writes_nothing_and_a_delete_keeps_its_jobs(db: &TestDb) {
    let declared = RegisteredKind {
        tenant_id: "acme".into(),
        name: "sales-export".into(),
        about: "Sales as CSV".into(),
        params_schema: json!({"type": "object"}).to_string(),
        timeout_ms: 60_000,
        max_attempts: 3,
        result_media_types: vec!["text/csv".into()],
        max_running: None,
        priority: Priority::Normal,
        created_at: 0,
        updated_at: 0,
        deleted_at: None,
    };
    let PutKind::Created(created) = db
        .store
        .put_kind(&declared, &store::Actor::Command("test"))
        .await
        .unwrap()
    else {
        panic!("a new kind was not created");
    };
    let PutKind::Unchanged(again) = db
        .store
        .put_kind(&declared, &store::Actor::Command("test"))
        .await
        .unwrap()
    else {
        panic!("the same declaration again was a change");
    };
    assert!(again.declares_the_same(&created));
    assert_eq!(
        (again.created_at, again.updated_at),
        (created.created_at, created.updated_at)
    );
    let changed = RegisteredKind {
        max_attempts: 5,
        ..declared.clone()
    };
    let PutKind::Updated(updated) = db
        .store
        .put_kind(&changed, &store::Actor::Command("test"))
        .await
        .unwrap()
    else {
        panic!("a change was not an update");
    };
    assert_eq!(
        (updated.max_attempts, updated.created_at),
        (5, created.created_at)
    );

    submit(
        db,
        vec![external_job("acme", "sales-export", Priority::Normal)],
    )
    .await;
    assert_eq!(
        db.store
            .delete_kind("acme", "sales-export", &store::Actor::Command("test"))
            .await
            .unwrap(),
        Some(1)
    );
    assert_eq!(
        db.store
            .delete_kind("acme", "sales-export", &store::Actor::Command("test"))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        db.store
            .delete_kind("globex", "sales-export", &store::Actor::Command("test"))
            .await
            .unwrap(),
        None
    );
    let gone = db
        .store
        .registered_kind("acme", "sales-export")
        .await
        .unwrap()
        .unwrap();
    assert!(
        gone.deleted_at.is_some(),
        "a deleted kind lost its row, which its jobs' leases need"
    );
    let leased = lease(
        db,
        "acme",
        &[kind("sales-export", 60_000, None)],
        5,
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(
        leased.len(),
        1,
        "a deleted kind's queued job could no longer be leased"
    );
    let PutKind::Created(_) = db
        .store
        .put_kind(&declared, &store::Actor::Command("test"))
        .await
        .unwrap()
    else {
        panic!("registering a deleted kind again is a new registration");
    };
    assert_eq!(db.store.registered_kinds("acme").await.unwrap().len(), 1);
    assert!(
        db.store
            .registered_kinds("globex")
            .await
            .unwrap()
            .is_empty()
    );
}

async fn a_lease_never_taken_up_is_handed_back_uncounted_three_times_at_most(db: &TestDb) {
    let job_id = submit(
        db,
        vec![external_job("acme", "sales-export", Priority::Normal)],
    )
    .await
    .pop()
    .unwrap();
    let kinds = [kind("sales-export", 60_000, None)];
    for handed_back in 0..3 {
        let leased = lease(db, "acme", &kinds, 1, Duration::ZERO).await;
        assert_eq!(
            leased[0].claim.counted_attempt, 1,
            "an untaken lease was counted"
        );
        assert_eq!(leased[0].claim.handbacks(), handed_back);
        db.store.expire_lease_now(&job_id).await.unwrap();
        let (requeued, _) = db.store.requeue_lapsed_leases(100).await.unwrap();
        assert_eq!(requeued, 1);
        let job = db.store.get_job("acme", &job_id).await.unwrap().unwrap();
        assert_eq!((job.status, job.attempts), (JobStatus::Queued, 0));
        assert_eq!(job.error_type.as_deref(), Some("lease_not_taken_up"));
    }
    // The fourth lapse counts: a worker that always dies before its first
    // heartbeat cannot keep the job forever.
    let leased = lease(db, "acme", &kinds, 1, Duration::ZERO).await;
    assert_eq!(leased[0].claim.handbacks(), 3);
    db.store.expire_lease_now(&job_id).await.unwrap();
    db.store.requeue_lapsed_leases(100).await.unwrap();
    let job = db.store.get_job("acme", &job_id).await.unwrap().unwrap();
    assert_eq!((job.status, job.attempts), (JobStatus::Queued, 1));
    assert_eq!(job.error_type.as_deref(), Some("lease_expired"));
}
