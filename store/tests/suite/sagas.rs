//! Saga runs and steps: recorded as the engine writes them, and every
//! write fenced by the job's attempt.

use std::time::Duration;

use serde_json::json;
use shared::{model::JobStatus, time::now_ms};
use sqlx::{Connection, PgConnection, SqliteConnection};
use store::{CancelOutcome, Dialect, Fence, LockOutcome, SagaPhase, SagaRun, TurnBack};

use crate::{harness::TestDb, on_both_databases};

on_both_databases!(
    a_saga_runs_turns_back_and_compensates_as_recorded,
    a_stale_attempt_writes_nothing,
    turning_back_compensates_the_steps_done_and_those_left_running,
    a_local_step_and_its_record_commit_together,
    a_current_attempt_holds_its_job_until_its_writes_commit,
    a_cancel_of_a_queued_saga_with_steps_left_asks_it_to_stop,
);

/// Test-only SQL: a job row in `status` at attempt `attempts`, as the
/// submit and the claim would leave it.
async fn insert_job(db: &TestDb, job_id: &str, status: JobStatus, attempts: i64) {
    match db.store.dialect() {
        Dialect::Postgres => {
            let mut conn = PgConnection::connect(db.store.url()).await.unwrap();
            sqlx::query(
                "INSERT INTO jobs (job_id, tenant_id, kind, params, status, attempts,
                     max_attempts, created_at, run_after)
                 VALUES ($1, 'acme', 'period-close', '{}', $2, $3, 5, now(), now())",
            )
            .bind(job_id)
            .bind(status.as_str())
            .bind(attempts)
            .execute(&mut conn)
            .await
            .unwrap();
            conn.close().await.unwrap();
        }
        Dialect::Sqlite => {
            let mut conn = SqliteConnection::connect(db.store.url()).await.unwrap();
            sqlx::query(
                "INSERT INTO jobs (job_id, tenant_id, kind, params, status, attempts,
                     max_attempts, created_at, run_after)
                 VALUES ($1, 'acme', 'period-close', '{}', $2, $3, 5, $4, $4)",
            )
            .bind(job_id)
            .bind(status.as_str())
            .bind(attempts)
            .bind(now_ms())
            .execute(&mut conn)
            .await
            .unwrap();
            conn.close().await.unwrap();
        }
    }
}

/// Test-only SQL: moves a job to `status` at attempt `attempts` (a lapsed
/// lease requeued, a new attempt claimed), from a connection of its own.
async fn set_job(db: &TestDb, job_id: &str, status: JobStatus, attempts: i64) {
    let statement = "UPDATE jobs SET status = $2, attempts = $3 WHERE job_id = $1";
    match db.store.dialect() {
        Dialect::Postgres => {
            let mut conn = PgConnection::connect(db.store.url()).await.unwrap();
            sqlx::query(statement)
                .bind(job_id)
                .bind(status.as_str())
                .bind(attempts)
                .execute(&mut conn)
                .await
                .unwrap();
            conn.close().await.unwrap();
        }
        Dialect::Sqlite => {
            let mut conn = SqliteConnection::connect(db.store.url()).await.unwrap();
            sqlx::query(statement)
                .bind(job_id)
                .bind(status.as_str())
                .bind(attempts)
                .execute(&mut conn)
                .await
                .unwrap();
            conn.close().await.unwrap();
        }
    }
}

fn fence(job_id: &str, attempt: i64) -> Fence<'_> {
    Fence { job_id, attempt }
}

async fn a_saga_runs_turns_back_and_compensates_as_recorded(db: &TestDb) {
    insert_job(db, "job_1", JobStatus::Running, 1).await;
    let current = fence("job_1", 1);
    assert_eq!(
        db.store.saga_state("job_1").await.unwrap(),
        (None, Vec::new())
    );

    assert!(
        db.store
            .set_saga_phase(current, SagaPhase::Forward, None)
            .await
            .unwrap()
    );
    let before = now_ms();
    assert!(db.store.begin_saga_step(current, 0, "lock").await.unwrap());
    let (run, steps) = db.store.saga_state("job_1").await.unwrap();
    assert_eq!(
        run,
        Some(SagaRun {
            phase: SagaPhase::Forward,
            turned_back: None
        })
    );
    let lock = &steps[0];
    assert_eq!(
        (lock.index, lock.name.as_str(), lock.outcome.as_str()),
        (0, "lock", "running")
    );
    assert_eq!((lock.attempts, lock.finished_at), (1, None));
    assert!((before..=now_ms()).contains(&lock.started_at));

    assert!(
        db.store
            .record_saga_step(current, 0, r#"{"month": "2024-02", "n": [1, 2]}"#)
            .await
            .unwrap()
    );
    let (_, steps) = db.store.saga_state("job_1").await.unwrap();
    let lock = &steps[0];
    assert_eq!(lock.outcome, "done");
    assert!(lock.finished_at.is_some_and(|t| t >= lock.started_at));
    let output: serde_json::Value =
        serde_json::from_str(lock.output.as_deref().expect("an output")).unwrap();
    assert_eq!(output, json!({"month": "2024-02", "n": [1, 2]}));
    assert_eq!(lock.compensation, "none");

    // Step 1, tried twice: one row, two attempts, its first start kept.
    assert!(db.store.begin_saga_step(current, 1, "file").await.unwrap());
    let (_, steps) = db.store.saga_state("job_1").await.unwrap();
    let first_start = steps[1].started_at;
    assert!(
        db.store
            .note_saga_step_error(current, 1, "timeout", "no answer in 60 s", None)
            .await
            .unwrap()
    );
    let (_, steps) = db.store.saga_state("job_1").await.unwrap();
    let file = &steps[1];
    assert_eq!(
        (
            file.outcome.as_str(),
            file.error_type.as_deref(),
            file.finished_at
        ),
        ("running", Some("timeout"), None)
    );
    assert!(db.store.begin_saga_step(current, 1, "file").await.unwrap());
    assert!(
        db.store
            .note_saga_step_error(current, 1, "refused", "the receiver said no", Some(true))
            .await
            .unwrap()
    );
    let (_, steps) = db.store.saga_state("job_1").await.unwrap();
    let file = &steps[1];
    assert_eq!(steps.len(), 2);
    assert_eq!((file.attempts, file.started_at), (2, first_start));
    assert_eq!(
        (
            file.outcome.as_str(),
            file.error_message.as_deref(),
            file.compensation.as_str()
        ),
        ("failed", Some("the receiver said no"), "pending")
    );
    assert!(file.finished_at.is_some());
    assert_eq!(file.output, None);

    let why = TurnBack::Failed {
        error_type: "refused".into(),
        message: "the receiver said no".into(),
    };
    assert!(db.store.turn_saga_back(current, &why).await.unwrap());
    let (run, steps) = db.store.saga_state("job_1").await.unwrap();
    assert_eq!(
        run,
        Some(SagaRun {
            phase: SagaPhase::Compensating,
            turned_back: Some(why.clone())
        })
    );
    assert_eq!(steps[0].compensation, "pending");
    assert_eq!(steps[0].outcome, "done");

    // The compensation of step 1, tried twice: its first start kept, its
    // error noted, then cleared when done.
    assert!(db.store.begin_saga_compensation(current, 1).await.unwrap());
    let (_, steps) = db.store.saga_state("job_1").await.unwrap();
    let compensation_start = steps[1].compensation_started_at.expect("started");
    assert!(
        db.store
            .note_saga_compensation_error(current, 1, "unavailable", "503")
            .await
            .unwrap()
    );
    assert!(db.store.begin_saga_compensation(current, 1).await.unwrap());
    let (_, steps) = db.store.saga_state("job_1").await.unwrap();
    let file = &steps[1];
    assert_eq!(
        (
            file.compensation.as_str(),
            file.compensation_attempts,
            file.compensation_started_at,
            file.compensation_error_type.as_deref(),
            file.compensation_error_message.as_deref(),
        ),
        (
            "running",
            2,
            Some(compensation_start),
            Some("unavailable"),
            Some("503")
        )
    );
    assert!(db.store.record_saga_compensation(current, 1).await.unwrap());
    let (_, steps) = db.store.saga_state("job_1").await.unwrap();
    let file = &steps[1];
    assert_eq!(
        (
            file.compensation.as_str(),
            file.compensation_error_type.as_deref(),
            file.compensation_error_message.as_deref(),
        ),
        ("done", None, None)
    );
    assert!(
        file.compensation_finished_at
            .is_some_and(|t| t >= compensation_start)
    );
    // Step 0 is untouched by step 1's compensation.
    assert_eq!(steps[0].compensation, "pending");

    // The phases after turning back keep why it turned back.
    assert!(
        db.store
            .set_saga_phase(current, SagaPhase::Compensated, None)
            .await
            .unwrap()
    );
    let (run, _) = db.store.saga_state("job_1").await.unwrap();
    assert_eq!(
        run,
        Some(SagaRun {
            phase: SagaPhase::Compensated,
            turned_back: Some(why)
        })
    );
}

async fn a_stale_attempt_writes_nothing(db: &TestDb) {
    insert_job(db, "job_1", JobStatus::Running, 2).await;
    let current = fence("job_1", 2);
    assert!(
        db.store
            .set_saga_phase(current, SagaPhase::Forward, None)
            .await
            .unwrap()
    );
    assert!(db.store.begin_saga_step(current, 0, "lock").await.unwrap());
    assert!(
        db.store
            .begin_saga_step(current, 1, "summarise")
            .await
            .unwrap()
    );
    assert!(db.store.record_saga_step(current, 0, "{}").await.unwrap());
    let before = db.store.saga_state("job_1").await.unwrap();

    // An earlier attempt, one not yet claimed, and, once the job is queued
    // again (its lease lapsed), the attempt that was current.
    let stale = fence("job_1", 1);
    let future = fence("job_1", 3);
    for (fence, queued) in [(stale, false), (future, false), (current, true)] {
        if queued {
            set_job(db, "job_1", JobStatus::Queued, 2).await;
        }
        let store = &db.store;
        assert!(
            !store
                .set_saga_phase(fence, SagaPhase::Completed, None)
                .await
                .unwrap()
        );
        assert!(!store.begin_saga_step(fence, 2, "file").await.unwrap());
        assert!(!store.begin_saga_step(fence, 0, "lock").await.unwrap());
        assert!(
            !store
                .record_saga_step(fence, 1, r#"{"stale": true}"#)
                .await
                .unwrap()
        );
        assert!(
            !store
                .note_saga_step_error(fence, 1, "stale", "stale", Some(true))
                .await
                .unwrap()
        );
        assert!(
            !store
                .turn_saga_back(fence, &TurnBack::Cancelled)
                .await
                .unwrap()
        );
        assert!(!store.begin_saga_compensation(fence, 0).await.unwrap());
        assert!(
            !store
                .note_saga_compensation_error(fence, 0, "stale", "stale")
                .await
                .unwrap()
        );
        assert!(!store.record_saga_compensation(fence, 0).await.unwrap());
        assert_eq!(
            store.saga_state("job_1").await.unwrap(),
            before,
            "attempt {} (queued: {queued})",
            fence.attempt
        );

        let mut tx = store.begin_write().await.unwrap();
        assert!(!store.attempt_is_current(&mut tx, fence).await.unwrap());
        tx.rollback().await.unwrap();
    }

    // Claimed again as attempt 3, that attempt writes.
    set_job(db, "job_1", JobStatus::Running, 3).await;
    assert!(db.store.begin_saga_step(future, 2, "file").await.unwrap());
    assert_eq!(db.store.saga_state("job_1").await.unwrap().1.len(), 3);
}

async fn turning_back_compensates_the_steps_done_and_those_left_running(db: &TestDb) {
    insert_job(db, "job_1", JobStatus::Running, 1).await;
    let first = fence("job_1", 1);
    db.store
        .set_saga_phase(first, SagaPhase::Forward, None)
        .await
        .unwrap();
    db.store.begin_saga_step(first, 0, "lock").await.unwrap();
    db.store.record_saga_step(first, 0, "{}").await.unwrap();
    // Refused outright: nothing happened, nothing to undo.
    db.store.begin_saga_step(first, 1, "check").await.unwrap();
    db.store
        .note_saga_step_error(first, 1, "refused", "no", Some(false))
        .await
        .unwrap();
    // Attempt 1 dies while step 2 runs; attempt 2 is cancelled before it
    // runs step 2 again.
    db.store.begin_saga_step(first, 2, "file").await.unwrap();
    set_job(db, "job_1", JobStatus::Running, 2).await;
    let second = fence("job_1", 2);

    let before = now_ms();
    assert!(
        db.store
            .turn_saga_back(second, &TurnBack::Cancelled)
            .await
            .unwrap()
    );
    let (run, steps) = db.store.saga_state("job_1").await.unwrap();
    assert_eq!(
        run,
        Some(SagaRun {
            phase: SagaPhase::Compensating,
            turned_back: Some(TurnBack::Cancelled)
        })
    );
    let summary: Vec<(&str, &str)> = steps
        .iter()
        .map(|s| (s.outcome.as_str(), s.compensation.as_str()))
        .collect();
    assert_eq!(
        summary,
        [
            ("done", "pending"),
            ("failed", "none"),
            ("failed", "pending")
        ]
    );
    let file = &steps[2];
    assert_eq!(file.error_type.as_deref(), Some("interrupted"));
    assert!(file.finished_at.is_some_and(|t| t >= before));
    assert_eq!(steps[1].error_type.as_deref(), Some("refused"));

    // A compensation done is not made pending again by a second turn back.
    db.store.begin_saga_compensation(second, 0).await.unwrap();
    db.store.record_saga_compensation(second, 0).await.unwrap();
    assert!(
        db.store
            .turn_saga_back(second, &TurnBack::Cancelled)
            .await
            .unwrap()
    );
    let (_, steps) = db.store.saga_state("job_1").await.unwrap();
    assert_eq!(steps[0].compensation, "done");
    assert_eq!(steps[2].compensation, "pending");
}

async fn a_local_step_and_its_record_commit_together(db: &TestDb) {
    insert_job(db, "job_1", JobStatus::Running, 1).await;
    let current = fence("job_1", 1);
    db.store
        .set_saga_phase(current, SagaPhase::Forward, None)
        .await
        .unwrap();
    db.store.begin_saga_step(current, 0, "lock").await.unwrap();

    for commit in [false, true] {
        let mut tx = db.store.begin_write().await.unwrap();
        assert!(db.store.attempt_is_current(&mut tx, current).await.unwrap());
        assert_eq!(
            db.store
                .lock_period(&mut tx, "acme", "2024-02", "job_1")
                .await
                .unwrap(),
            LockOutcome::Locked
        );
        db.store
            .record_saga_step_in(&mut tx, "job_1", 0, r#"{"month": "2024-02"}"#)
            .await
            .unwrap();
        if commit {
            tx.commit().await.unwrap();
        } else {
            tx.rollback().await.unwrap();
        }
        let period = db.store.get_period("acme", "2024-02").await.unwrap();
        let (_, steps) = db.store.saga_state("job_1").await.unwrap();
        assert_eq!(period.is_some(), commit);
        assert_eq!(steps[0].outcome, if commit { "done" } else { "running" });
    }

    // Its compensation, the same way.
    let mut tx = db.store.begin_write().await.unwrap();
    db.store
        .unlock_period(&mut tx, "acme", "2024-02", "job_1")
        .await
        .unwrap();
    db.store
        .record_saga_compensation_in(&mut tx, "job_1", 0)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let (_, steps) = db.store.saga_state("job_1").await.unwrap();
    assert_eq!(db.store.get_period("acme", "2024-02").await.unwrap(), None);
    assert_eq!(steps[0].compensation, "done");
}

/// Between the fence's check and the commit, no other writer can take the
/// job (on Postgres the check locks its row; on SQLite the transaction
/// holds the database's one write lock).
async fn a_current_attempt_holds_its_job_until_its_writes_commit(db: &TestDb) {
    insert_job(db, "job_1", JobStatus::Running, 1).await;
    let mut tx = db.store.begin_write().await.unwrap();
    assert!(
        db.store
            .attempt_is_current(&mut tx, fence("job_1", 1))
            .await
            .unwrap()
    );

    let requeue = {
        let db_url = db.store.url().to_owned();
        let dialect = db.store.dialect();
        tokio::spawn(async move {
            let statement = "UPDATE jobs SET status = 'QUEUED' WHERE job_id = 'job_1'";
            match dialect {
                Dialect::Postgres => {
                    let mut conn = PgConnection::connect(&db_url).await.unwrap();
                    sqlx::query(statement).execute(&mut conn).await.unwrap();
                }
                Dialect::Sqlite => {
                    let mut conn = SqliteConnection::connect(&db_url).await.unwrap();
                    sqlx::query(statement).execute(&mut conn).await.unwrap();
                }
            }
        })
    };
    let mut requeue = std::pin::pin!(requeue);
    assert!(
        tokio::time::timeout(Duration::from_millis(500), &mut requeue)
            .await
            .is_err(),
        "another writer changed the job while its attempt's transaction was open"
    );
    db.store
        .record_saga_step_in(&mut tx, "job_1", 0, "{}")
        .await
        .unwrap();
    tx.commit().await.unwrap();
    requeue.await.unwrap();
    assert!(
        !db.store
            .begin_saga_step(fence("job_1", 1), 0, "lock")
            .await
            .unwrap()
    );
}

async fn a_cancel_of_a_queued_saga_with_steps_left_asks_it_to_stop(db: &TestDb) {
    for (job_id, turn_back) in [("job_forward", false), ("job_compensating", true)] {
        insert_job(db, job_id, JobStatus::Running, 1).await;
        let current = fence(job_id, 1);
        db.store
            .set_saga_phase(current, SagaPhase::Forward, None)
            .await
            .unwrap();
        db.store.begin_saga_step(current, 0, "lock").await.unwrap();
        db.store.record_saga_step(current, 0, "{}").await.unwrap();
        if turn_back {
            db.store
                .turn_saga_back(current, &TurnBack::Cancelled)
                .await
                .unwrap();
        }
        // Its lease lapsed: queued again for its next attempt.
        set_job(db, job_id, JobStatus::Queued, 1).await;

        let mut tx = db.store.begin_write().await.unwrap();
        let outcome = db.store.cancel_job(&mut tx, "acme", job_id).await.unwrap();
        tx.commit().await.unwrap();
        let CancelOutcome::Done(job) = outcome else {
            panic!("{job_id}: {outcome:?}");
        };
        assert_eq!(job.status, JobStatus::Queued, "{job_id}");
        assert!(job.cancel_requested, "{job_id}");
        let stored = db.store.get_job("acme", job_id).await.unwrap().unwrap();
        assert_eq!(
            (stored.status, stored.cancel_requested),
            (JobStatus::Queued, true)
        );
    }
}
