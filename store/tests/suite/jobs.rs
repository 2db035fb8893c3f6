//! Reads and lists of jobs.

use crate::{harness::TestDb, on_both_databases};

on_both_databases!(an_unknown_job_reads_as_none);

async fn an_unknown_job_reads_as_none(db: &TestDb) {
    let found = db.store.get_job("acme", "job_unknown").await.unwrap();
    assert!(found.is_none());
    let listed = db
        .store
        .list_jobs(
            "acme",
            &store::JobFilter {
                limit: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(listed.is_empty());
}
