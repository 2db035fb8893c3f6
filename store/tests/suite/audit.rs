//! The audit log: an entry commits with its change or not at all, each
//! tenant reads its own and the deployment's, filters and retention; and
//! keys keep the scopes they were made with.

use serde_json::json;
use shared::time::now_ms;
use store::{Actor, AuditAction, AuditChange, AuditFilter, KeyScope, Scope};

use crate::{harness::TestDb, on_both_databases};

on_both_databases!(
    an_entry_commits_with_its_change_or_not_at_all,
    each_tenant_reads_its_own_entries_and_the_deployments,
    retention_deletes_entries_older_than_it_and_no_others,
    a_key_keeps_the_scopes_it_was_made_with,
);

fn change<'a>(tenant_id: Option<&'a str>, action: AuditAction, target: &'a str) -> AuditChange<'a> {
    AuditChange {
        tenant_id,
        action,
        target: Some(target),
        details: json!({"n": 1}),
    }
}

const BY_KEY: fn() -> Actor = || Actor::Key {
    key_id: "key_0123456789abcdef".into(),
    request_id: "req_1".into(),
};

fn all() -> AuditFilter {
    AuditFilter {
        limit: 100,
        ..AuditFilter::default()
    }
}

async fn an_entry_commits_with_its_change_or_not_at_all(db: &TestDb) {
    let mut tx = db.store.begin_write().await.unwrap();
    let rolled_back = change(Some("acme"), AuditAction::WebhookDeleted, "wh_1");
    db.store
        .audit(&mut tx, &BY_KEY(), &rolled_back)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert!(
        db.store
            .list_audit("acme", &all())
            .await
            .unwrap()
            .is_empty()
    );

    let mut tx = db.store.begin_write().await.unwrap();
    let kept = change(Some("acme"), AuditAction::WebhookDeleted, "wh_2");
    db.store.audit(&mut tx, &BY_KEY(), &kept).await.unwrap();
    tx.commit().await.unwrap();
    let entries = db.store.list_audit("acme", &all()).await.unwrap();
    assert_eq!(entries.len(), 1, "{entries:?}");
    let entry = &entries[0];
    assert_eq!(entry.action, "webhook.deleted");
    assert_eq!(entry.target.as_deref(), Some("wh_2"));
    assert_eq!(entry.actor, "key");
    assert_eq!(entry.key_id.as_deref(), Some("key_0123456789abcdef"));
    assert_eq!(entry.request_id.as_deref(), Some("req_1"));
    assert_eq!(entry.details, json!({"n": 1}));
    assert!((now_ms() - entry.at).abs() < 60_000, "{}", entry.at);
}

async fn each_tenant_reads_its_own_entries_and_the_deployments(db: &TestDb) {
    let mut tx = db.store.begin_write().await.unwrap();
    for (tenant, action, target) in [
        (Some("acme"), AuditAction::KindRegistered, "a"),
        (Some("globex"), AuditAction::KindRegistered, "b"),
        (None, AuditAction::SecretsRotated, "c"),
        (Some("acme"), AuditAction::KindDeleted, "d"),
    ] {
        let entry = change(tenant, action, target);
        db.store
            .audit(&mut tx, &Actor::Command("test"), &entry)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    let targets = |entries: Vec<store::AuditEntry>| -> Vec<String> {
        entries.into_iter().filter_map(|e| e.target).collect()
    };
    let acme = db.store.list_audit("acme", &all()).await.unwrap();
    assert_eq!(targets(acme), ["d", "c", "a"], "newest first");
    let globex = db.store.list_audit("globex", &all()).await.unwrap();
    assert_eq!(targets(globex), ["c", "b"]);
    let filter = AuditFilter {
        action: Some(AuditAction::KindRegistered),
        ..all()
    };
    let registered = db.store.list_audit("acme", &filter).await.unwrap();
    assert_eq!(targets(registered), ["a"]);
    // One more than the limit tells that a next page exists; the cursor
    // goes on from the last one shown.
    let first = AuditFilter { limit: 1, ..all() };
    let page = db.store.list_audit("acme", &first).await.unwrap();
    assert_eq!(page.len(), 2);
    let next = AuditFilter {
        before: Some(page[0].entry_id.clone()),
        ..all()
    };
    assert_eq!(
        targets(db.store.list_audit("acme", &next).await.unwrap()),
        ["c", "a"]
    );
    let future = AuditFilter {
        since: Some(now_ms() + 60_000),
        ..all()
    };
    assert!(
        db.store
            .list_audit("acme", &future)
            .await
            .unwrap()
            .is_empty()
    );
    let past = AuditFilter {
        until: Some(now_ms() - 60_000),
        ..all()
    };
    assert!(db.store.list_audit("acme", &past).await.unwrap().is_empty());
}

async fn retention_deletes_entries_older_than_it_and_no_others(db: &TestDb) {
    for n in 0..3 {
        db.store
            .create_api_key(&format!("tenant-{n}"), &Actor::Command("test"))
            .await
            .unwrap();
    }
    let count = async || {
        let mut n = 0;
        for tenant in ["tenant-0", "tenant-1", "tenant-2"] {
            n += db.store.list_audit(tenant, &all()).await.unwrap().len();
        }
        n
    };
    assert_eq!(count().await, 3);
    let four_hundred_days = 400 * 24 * 60 * 60 * 1000;
    let pruned = db
        .store
        .prune_audit(now_ms() - four_hundred_days)
        .await
        .unwrap();
    assert_eq!(pruned, 0);
    assert_eq!(count().await, 3, "nothing young is deleted");
    let pruned = db.store.prune_audit(now_ms() + 1).await.unwrap();
    assert_eq!(pruned, 3);
    assert_eq!(count().await, 0);
}

async fn a_key_keeps_the_scopes_it_was_made_with(db: &TestDb) {
    let reader = KeyScope::of(&[Scope::Submit, Scope::Read], None);
    let worker = KeyScope::of(
        &[Scope::Work, Scope::Read],
        Some(vec!["sales-export".into()]),
    );
    for scope in [&reader, &worker, &KeyScope::full()] {
        db.store
            .create_scoped_api_key("acme", scope, &Actor::Command("test"))
            .await
            .unwrap();
    }
    let (_, valid) = db.store.valid_api_keys().await.unwrap();
    let scopes: Vec<KeyScope> = valid.iter().map(|k| k.scope().expect("known")).collect();
    assert!(
        scopes.contains(&reader) && scopes.contains(&worker),
        "{scopes:?}"
    );
    assert!(scopes.contains(&KeyScope::full()));
    assert_eq!(reader.describe(), "read,submit");
    assert_eq!(worker.describe(), "read,work(sales-export)");
    assert!(worker.may_work_on("sales-export") && !worker.may_work_on("other"));
    assert!(!reader.may_work_on("sales-export"));
    let full = KeyScope::full();
    assert!(
        Scope::ALL
            .iter()
            .all(|s| full.allows(*s) == (*s != Scope::Work))
    );
    let made = db.store.tenant_api_keys("acme").await.unwrap();
    assert_eq!(made.len(), 3);
    let entries = db.store.list_audit("acme", &all()).await.unwrap();
    let described: Vec<&str> = entries
        .iter()
        .map(|e| e.details["scopes"].as_str().expect("scopes"))
        .collect();
    assert_eq!(
        described,
        [
            "read,submit,manage,close,admin",
            "read,work(sales-export)",
            "read,submit"
        ]
    );
}
