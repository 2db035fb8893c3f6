//! API keys: creation, revocation, the sync with `API_KEYS`, the
//! generation that moves with every change, and the record of uses.

use store::{Error, KeySync, Revocation, RevokeOutcome, hash_key};

use crate::{harness::TestDb, on_both_databases};

on_both_databases!(
    a_created_key_is_valid_until_revoked,
    the_sync_adds_moves_restores_and_revokes_keys,
    a_key_revoked_by_command_stays_revoked,
    a_key_keeps_its_latest_use,
);

async fn valid_tenant_of(db: &TestDb, key: &str) -> Option<String> {
    let (_, keys) = db.store.valid_api_keys().await.unwrap();
    let hash = hash_key(key);
    keys.into_iter()
        .find(|k| k.key_hash == hash)
        .map(|k| k.tenant_id)
}

fn configured(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(tenant, key)| ((*tenant).to_owned(), (*key).to_owned()))
        .collect()
}

async fn a_created_key_is_valid_until_revoked(db: &TestDb) {
    assert_eq!(db.store.count_api_keys().await.unwrap(), 0);
    let start = db.store.api_key_generation().await.unwrap();
    let created = db
        .store
        .create_api_key("acme", &store::Actor::Command("test"))
        .await
        .unwrap();
    assert!(created.key.starts_with("rk_"), "{}", created.key);
    assert_eq!(created.key_prefix, created.key[..7]);
    assert_eq!(db.store.api_key_generation().await.unwrap(), start + 1);
    let (generation, valid) = db.store.valid_api_keys().await.unwrap();
    assert_eq!(generation, start + 1);
    assert_eq!(valid.len(), 1);
    assert_eq!(valid[0].key_id, created.key_id);
    assert_eq!(valid[0].key_hash, hash_key(&created.key));
    assert_eq!(valid[0].tenant_id, "acme");

    let listed = db.store.list_api_keys().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].key_id, created.key_id);
    assert_eq!(
        listed[0].key_prefix.as_deref(),
        Some(created.key_prefix.as_str())
    );
    assert!((shared::time::now_ms() - listed[0].created_at).abs() < 60_000);
    assert_eq!(listed[0].last_used_at, None);
    assert_eq!(listed[0].revoked, None);

    let outcome = db
        .store
        .revoke_api_key(None, &created.key_id, &store::Actor::Command("test"))
        .await
        .unwrap();
    assert_eq!(
        outcome,
        RevokeOutcome::Revoked {
            tenant_id: "acme".to_owned()
        }
    );
    assert_eq!(db.store.api_key_generation().await.unwrap(), start + 2);
    assert_eq!(valid_tenant_of(db, &created.key).await, None);
    let listed = db.store.list_api_keys().await.unwrap();
    let (revoked_at, why) = listed[0].revoked.expect("revoked");
    assert_eq!(why, Revocation::Command);

    let again = db
        .store
        .revoke_api_key(None, &created.key_id, &store::Actor::Command("test"))
        .await
        .unwrap();
    assert_eq!(again, RevokeOutcome::AlreadyRevoked { revoked_at });
    assert_eq!(db.store.api_key_generation().await.unwrap(), start + 2);
    let unknown = db
        .store
        .revoke_api_key(None, "key_0000000000000000", &store::Actor::Command("test"))
        .await
        .unwrap();
    assert_eq!(unknown, RevokeOutcome::UnknownKeyId);
    assert_eq!(db.store.count_api_keys().await.unwrap(), 1);
}

async fn the_sync_adds_moves_restores_and_revokes_keys(db: &TestDb) {
    let (one, two) = ("configured-key-0001", "configured-key-0002");
    let start = db.store.api_key_generation().await.unwrap();
    let sync = db
        .store
        .sync_configured_api_keys(&configured(&[("acme", one), ("beta", two)]))
        .await
        .unwrap();
    assert_eq!(
        sync,
        KeySync {
            added: 2,
            ..KeySync::default()
        }
    );
    assert_eq!(valid_tenant_of(db, one).await.as_deref(), Some("acme"));
    assert_eq!(valid_tenant_of(db, two).await.as_deref(), Some("beta"));
    let listed = db.store.list_api_keys().await.unwrap();
    assert!(
        listed
            .iter()
            .all(|k| k.key_prefix.as_deref() == Some("conf"))
    );
    let after_add = db.store.api_key_generation().await.unwrap();
    assert!(after_add > start);

    // Nothing to change: the generation stays.
    let sync = db
        .store
        .sync_configured_api_keys(&configured(&[("acme", one), ("beta", two)]))
        .await
        .unwrap();
    assert_eq!(sync, KeySync::default());
    assert_eq!(db.store.api_key_generation().await.unwrap(), after_add);

    // `one` moves to another tenant; `two`, left out, is revoked.
    let sync = db
        .store
        .sync_configured_api_keys(&configured(&[("gamma", one)]))
        .await
        .unwrap();
    assert_eq!(
        sync,
        KeySync {
            moved: 1,
            revoked: 1,
            ..KeySync::default()
        }
    );
    let after_move = db.store.api_key_generation().await.unwrap();
    assert!(after_move > after_add);
    assert_eq!(valid_tenant_of(db, one).await.as_deref(), Some("gamma"));
    assert_eq!(valid_tenant_of(db, two).await, None);
    let listed = db.store.list_api_keys().await.unwrap();
    let revoked: Vec<_> = listed.iter().filter_map(|k| k.revoked).collect();
    assert_eq!(revoked.len(), 1);
    assert_eq!(revoked[0].1, Revocation::NotInApiKeys);

    // Listed again, `two` is restored, for the tenant listed now.
    let sync = db
        .store
        .sync_configured_api_keys(&configured(&[("gamma", one), ("delta", two)]))
        .await
        .unwrap();
    assert_eq!(
        sync,
        KeySync {
            restored: 1,
            ..KeySync::default()
        }
    );
    assert!(db.store.api_key_generation().await.unwrap() > after_move);
    assert_eq!(valid_tenant_of(db, two).await.as_deref(), Some("delta"));
    assert!(
        db.store
            .list_api_keys()
            .await
            .unwrap()
            .iter()
            .all(|k| k.revoked.is_none())
    );
    assert_eq!(db.store.count_api_keys().await.unwrap(), 2);
}

async fn a_key_revoked_by_command_stays_revoked(db: &TestDb) {
    let (one, two) = ("configured-key-0001", "configured-key-0002");
    db.store
        .sync_configured_api_keys(&configured(&[("acme", one), ("acme", two)]))
        .await
        .unwrap();
    let listed = db.store.list_api_keys().await.unwrap();
    let (_, keys) = db.store.valid_api_keys().await.unwrap();
    let two_id = keys
        .iter()
        .find(|k| k.key_hash == hash_key(two))
        .map(|k| k.key_id.clone())
        .expect("two");
    assert_eq!(listed.len(), 2);
    // Left out at a start, then revoked by command: for good.
    db.store
        .sync_configured_api_keys(&configured(&[("acme", one)]))
        .await
        .unwrap();
    let outcome = db
        .store
        .revoke_api_key(None, &two_id, &store::Actor::Command("test"))
        .await
        .unwrap();
    assert!(
        matches!(outcome, RevokeOutcome::AlreadyRevoked { .. }),
        "{outcome:?}"
    );
    let before = db.store.api_key_generation().await.unwrap();

    let refused = db
        .store
        .sync_configured_api_keys(&configured(&[
            ("acme", one),
            ("acme", two),
            ("beta", "configured-key-0003"),
        ]))
        .await;
    assert!(matches!(refused, Err(Error::Config(_))), "{refused:?}");
    // The refused sync changed nothing.
    assert_eq!(db.store.api_key_generation().await.unwrap(), before);
    assert_eq!(db.store.count_api_keys().await.unwrap(), 2);
    assert_eq!(valid_tenant_of(db, two).await, None);
    let listed = db.store.list_api_keys().await.unwrap();
    let two_record = listed.iter().find(|k| k.key_id == two_id).expect("two");
    assert_eq!(
        two_record.revoked.map(|(_, why)| why),
        Some(Revocation::Command)
    );
}

async fn a_key_keeps_its_latest_use(db: &TestDb) {
    let created = db
        .store
        .create_api_key("acme", &store::Actor::Command("test"))
        .await
        .unwrap();
    let other = db
        .store
        .create_api_key("acme", &store::Actor::Command("test"))
        .await
        .unwrap();
    let last_used = |key_id: String| async move {
        let listed = db.store.list_api_keys().await.unwrap();
        listed
            .into_iter()
            .find(|k| k.key_id == key_id)
            .expect("the key")
            .last_used_at
    };
    let generation = db.store.api_key_generation().await.unwrap();
    db.store.record_api_key_uses(&[]).await.unwrap();
    let id = created.key_id.clone();
    db.store
        .record_api_key_uses(&[
            (id.clone(), 1_700_000_001_000),
            (id.clone(), 1_700_000_003_000),
            (id.clone(), 1_700_000_002_000),
        ])
        .await
        .unwrap();
    assert_eq!(last_used(id.clone()).await, Some(1_700_000_003_000));
    assert_eq!(last_used(other.key_id.clone()).await, None);
    // An older use, from a slower process, changes nothing.
    db.store
        .record_api_key_uses(&[(id.clone(), 1_700_000_002_500)])
        .await
        .unwrap();
    assert_eq!(last_used(id.clone()).await, Some(1_700_000_003_000));
    db.store
        .record_api_key_uses(&[
            (id.clone(), 1_700_000_004_000),
            (other.key_id.clone(), 1_700_000_000_500),
            ("key_unknown".to_owned(), 1_700_000_009_000),
        ])
        .await
        .unwrap();
    assert_eq!(last_used(id).await, Some(1_700_000_004_000));
    assert_eq!(
        last_used(other.key_id.clone()).await,
        Some(1_700_000_000_500)
    );
    // A use leaves the set of valid keys, and so its generation, as it was.
    assert_eq!(db.store.api_key_generation().await.unwrap(), generation);
}
