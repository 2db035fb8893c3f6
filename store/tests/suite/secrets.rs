//! Secrets at rest: webhook and filing endpoint secrets stored sealed,
//! opened to sign, sealed anew under a new master key in batches, and
//! refused (never used in clear by mistake) when their key is not held.

use shared::time::now_ms;
use store::{Keyring, MASTER_KEYS_SETTING, SecretsReport};

use crate::{
    harness::TestDb,
    on_both_databases,
    rows::{execute, scalar, strings},
    webhooks::{announce, event_state, finished_job, registered},
};

on_both_databases!(
    secrets_are_stored_sealed_and_opened_to_sign,
    a_secret_stored_in_clear_is_read_and_then_sealed,
    rotation_moves_every_secret_to_the_first_master_key_in_batches,
    a_data_key_whose_master_key_is_not_held_stops_the_start_naming_the_setting,
    an_event_whose_secret_cannot_be_opened_waits_unsent_for_a_process_with_the_key,
    a_sealed_secret_moved_to_another_row_does_not_open,
);

/// Every stored secret column, clear and sealed, of both tables.
async fn stored_text(db: &TestDb) -> Vec<String> {
    strings(
        db,
        "SELECT COALESCE(secret, '') || ' ' || COALESCE(sealed_secret, '') FROM webhooks
         UNION ALL
         SELECT COALESCE(secret, '') || ' ' || COALESCE(sealed_secret, '') FROM filing_endpoints",
    )
    .await
}

/// Rows whose secret is stored in clear.
async fn in_clear(db: &TestDb) -> i64 {
    scalar(
        db,
        "SELECT (SELECT COUNT(*) FROM webhooks WHERE sealed_secret IS NULL)
              + (SELECT COUNT(*) FROM filing_endpoints WHERE sealed_secret IS NULL)",
    )
    .await
}

/// A webhook of `acme` for successes, with an event of a job that
/// succeeded; its secret, and the event's id.
async fn webhook_with_an_event(db: &TestDb) -> (String, String) {
    let webhook = registered(db, "acme", &["job.succeeded"], None).await;
    let job = finished_job(db, "acme", "SUCCEEDED").await;
    announce(db, &[&job.job_id]).await;
    let event_id = strings(db, "SELECT event_id FROM webhook_events").await;
    (
        webhook.secret.expect("made with its secret"),
        event_id.into_iter().next().expect("the event"),
    )
}

async fn secrets_are_stored_sealed_and_opened_to_sign(db: &TestDb) {
    let (secret, _) = webhook_with_an_event(db).await;
    let endpoint = db
        .store
        .put_filing_endpoint(
            "acme",
            "https://filing.example/returns",
            &store::Actor::Command("test"),
        )
        .await
        .unwrap();

    for stored in stored_text(db).await {
        assert!(
            !stored.contains(&secret),
            "a webhook secret in clear: {stored}"
        );
        assert!(
            !stored.contains(&endpoint.secret),
            "a filing secret in clear: {stored}"
        );
        assert!(!stored.contains("whsec_"), "a secret in clear: {stored}");
    }
    assert_eq!(in_clear(db).await, 0);

    let due = db
        .store
        .claim_due_events(10, now_ms() + 60_000)
        .await
        .unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(
        due[0].secret, secret,
        "the event is signed with the webhook's secret"
    );
    let read = db.store.get_filing_endpoint("acme").await.unwrap();
    assert_eq!(read.expect("the endpoint").secret, endpoint.secret);
    let moved = db
        .store
        .put_filing_endpoint(
            "acme",
            "https://filing.example/v2",
            &store::Actor::Command("test"),
        )
        .await
        .unwrap();
    assert_eq!(
        moved.secret, endpoint.secret,
        "a moved endpoint keeps its secret"
    );
}

async fn a_secret_stored_in_clear_is_read_and_then_sealed(db: &TestDb) {
    let (_, _) = webhook_with_an_event(db).await;
    db.store
        .put_filing_endpoint(
            "acme",
            "https://filing.example/returns",
            &store::Actor::Command("test"),
        )
        .await
        .unwrap();
    // As the release before stores them.
    let clear = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    execute(
        db,
        &format!(
            "UPDATE webhooks SET secret = '{clear}', sealed_secret = NULL, secret_key_id = NULL"
        ),
    )
    .await;
    execute(
        db,
        &format!(
            "UPDATE filing_endpoints SET secret = '{clear}', sealed_secret = NULL,
                 secret_key_id = NULL"
        ),
    )
    .await;
    assert_eq!(in_clear(db).await, 2);

    let due = db
        .store
        .claim_due_events(10, now_ms() + 60_000)
        .await
        .unwrap();
    assert_eq!(due[0].secret, clear);
    let endpoint = db.store.get_filing_endpoint("acme").await.unwrap();
    assert_eq!(endpoint.expect("the endpoint").secret, clear);

    let report = db.store.seal_clear_secrets(1).await.unwrap();
    assert_eq!((report.sealed, report.resealed, report.batches), (2, 0, 2));
    assert_eq!(in_clear(db).await, 0);
    assert!(stored_text(db).await.iter().all(|s| !s.contains(clear)));
    let endpoint = db.store.get_filing_endpoint("acme").await.unwrap();
    assert_eq!(endpoint.expect("the endpoint").secret, clear);
    let again = db.store.seal_clear_secrets(1).await.unwrap();
    assert!(again.is_empty(), "{again:?}");
}

async fn rotation_moves_every_secret_to_the_first_master_key_in_batches(db: &TestDb) {
    let mut secrets = Vec::new();
    for _ in 0..5 {
        let webhook = registered(db, "acme", &["job.succeeded"], None).await;
        secrets.push(webhook.secret.expect("its secret"));
    }
    let filing = db
        .store
        .put_filing_endpoint(
            "acme",
            "https://filing.example/returns",
            &store::Actor::Command("test"),
        )
        .await
        .unwrap();
    let old = db.master_key();
    let new = Keyring::new_master_key();

    let rotating = db.store_with_keys(&format!("{new},{old}")).await;
    rotating.check_keyring().await.expect("both keys held");
    let report = rotating
        .rotate_secrets(2, &store::Actor::Command("test"))
        .await
        .unwrap();
    assert_eq!(
        (report.sealed, report.resealed, report.changed_meanwhile),
        (0, 6, 0),
        "{report:?}"
    );
    assert_eq!(report.batches, 4, "5 webhooks by 2, then 1 filing endpoint");
    assert_eq!(report.data_keys_retired, 1);
    assert_eq!(report.data_keys_left, 0);
    assert_eq!(
        report.master_fingerprint,
        rotating.master_fingerprints()[0],
        "sealed under the first key"
    );
    let again = rotating
        .rotate_secrets(2, &store::Actor::Command("test"))
        .await
        .unwrap();
    assert_eq!(
        again,
        SecretsReport {
            master_fingerprint: report.master_fingerprint.clone(),
            ..SecretsReport::default()
        },
        "a second run changes nothing"
    );
    rotating.close().await;

    // The old key is no longer needed.
    let new_only = db.store_with_keys(&new).await;
    new_only
        .check_keyring()
        .await
        .expect("only the new key needed");
    let endpoint = new_only.get_filing_endpoint("acme").await.unwrap();
    assert_eq!(endpoint.expect("the endpoint").secret, filing.secret);
    let job = finished_job(db, "acme", "SUCCEEDED").await;
    announce(db, &[&job.job_id]).await;
    let due = new_only
        .claim_due_events(10, now_ms() + 60_000)
        .await
        .unwrap();
    let mut opened: Vec<String> = due.into_iter().map(|event| event.secret).collect();
    opened.sort();
    secrets.sort();
    assert_eq!(
        opened, secrets,
        "every webhook's secret opens with the new key"
    );
    new_only.close().await;
    let old_only = db.store_with_keys(&old).await;
    let refused = old_only
        .check_keyring()
        .await
        .expect_err("the old key alone");
    assert!(
        refused.to_string().contains(MASTER_KEYS_SETTING),
        "{refused}"
    );
    old_only.close().await;
}

async fn a_data_key_whose_master_key_is_not_held_stops_the_start_naming_the_setting(db: &TestDb) {
    registered(db, "acme", &["job.succeeded"], None).await;
    let other = db.store_with_keys(&Keyring::new_master_key()).await;
    let error = other
        .check_keyring()
        .await
        .expect_err("another key")
        .to_string();
    assert!(error.contains(MASTER_KEYS_SETTING), "{error}");
    other.close().await;
    let same = db.store_with_keys(&db.master_key()).await;
    same.check_keyring().await.expect("the key that sealed");
    same.close().await;
}

async fn an_event_whose_secret_cannot_be_opened_waits_unsent_for_a_process_with_the_key(
    db: &TestDb,
) {
    let (secret, event_id) = webhook_with_an_event(db).await;
    // A process started before a data key of a newer master key existed
    // (its start check passed) but which does not hold that key.
    let without = db.store_with_keys(&Keyring::new_master_key()).await;
    // A lease that lapses at once: the event is due again straight away.
    let claimed = without.claim_due_events(10, now_ms() - 1).await.unwrap();
    assert!(claimed.is_empty(), "sent without its key: {claimed:?}");
    without.close().await;
    assert_eq!(event_state(db, &event_id).await, "pending");
    assert_eq!(
        scalar(db, "SELECT COUNT(*) FROM webhook_deliveries").await,
        0,
        "no attempt is counted"
    );

    // Once the lease lapses, a process with the key sends it.
    let due = db
        .store
        .claim_due_events(10, now_ms() + 60_000)
        .await
        .unwrap();
    assert_eq!(due.len(), 1, "the event waited");
    assert_eq!(due[0].event_id, event_id);
    assert_eq!(due[0].secret, secret);
}

async fn a_sealed_secret_moved_to_another_row_does_not_open(db: &TestDb) {
    for tenant in ["acme", "other"] {
        db.store
            .put_filing_endpoint(
                tenant,
                "https://filing.example/returns",
                &store::Actor::Command("test"),
            )
            .await
            .unwrap();
    }
    execute(
        db,
        "UPDATE filing_endpoints SET
             sealed_secret = (SELECT sealed_secret FROM filing_endpoints WHERE tenant_id = 'acme'),
             secret_key_id = (SELECT secret_key_id FROM filing_endpoints WHERE tenant_id = 'acme')
         WHERE tenant_id = 'other'",
    )
    .await;
    db.store
        .get_filing_endpoint("acme")
        .await
        .expect("its own row opens");
    let error = db
        .store
        .get_filing_endpoint("other")
        .await
        .expect_err("another row's sealed secret");
    assert!(error.to_string().contains("filing:other"), "{error}");
}
