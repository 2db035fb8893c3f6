//! `api keys create | list | revoke`: managing the stored API keys from the
//! command line, and the keys a starting server makes or matches to
//! `API_KEYS`. Only `create` and the first start ever show a key, once;
//! nothing shows a key's hash.

use crate::{api_keys::KEY_REFRESH, error::BoxError};
use chrono::{DateTime, SecondsFormat, Utc};
use shared::settings::{Settings, check_tenant};
use store::{Actor, ApiKeyRecord, KeyScope, KeySync, Revocation, RevokeOutcome, Scope, Store};
use tracing::info;

async fn store(settings: &Settings) -> Result<Store, BoxError> {
    let store = Store::open(settings).await?;
    store.migrate().await?;
    Ok(store)
}

/// The rights `--scope` and `--kinds` give a new key: without `--scope`,
/// full rights.
pub fn scope_of(scopes: Option<&str>, kinds: Option<Vec<String>>) -> Result<KeyScope, BoxError> {
    let Some(list) = scopes else {
        return Ok(KeyScope::full());
    };
    let scopes = KeyScope::parse_list(list).map_err(|e| format!("--scope: {e}"))?;
    if kinds.is_some() && !scopes.contains(&Scope::Work) {
        return Err("--kinds narrows the work scope: add work to --scope".into());
    }
    Ok(KeyScope::of(&scopes, kinds))
}

/// Makes a key of `scope` for the tenant and prints it, with its id.
pub async fn create(settings: &Settings, tenant: &str, scope: &KeyScope) -> Result<(), BoxError> {
    check_tenant(tenant)?;
    if let Some(kinds) = scope.kinds() {
        for kind in kinds {
            reports::registered::check_name(kind)
                .map_err(|e| format!("--kinds: {kind:?}: {}", e.message))?;
        }
    }
    let store = store(settings).await?;
    let created = store
        .create_scoped_api_key(tenant, scope, &Actor::Command("api keys create"))
        .await?;
    store.close().await;
    println!("API key: {}", created.key);
    println!(
        "Key id: {} (tenant {tenant}, scopes {}, shown as {}…). The key is not shown again.",
        created.key_id,
        scope_text(scope),
        created.key_prefix
    );
    if scope.is_full()
        && settings
            .api_keys
            .as_deref()
            .is_some_and(|t| !t.trim().is_empty())
    {
        eprintln!(
            "note: API_KEYS is set here; an api started with API_KEYS revokes every key it does \
             not list, this one included"
        );
    }
    Ok(())
}

/// Makes the stored keys match `API_KEYS` when it is set (the complete
/// list: every other key is revoked); with it unset and no key stored at
/// all, makes a key for tenant `default` and prints it, once.
pub async fn ensure_api_keys(
    store: &Store,
    configured: &[(String, String)],
    public_addr: &str,
) -> Result<(), BoxError> {
    if !configured.is_empty() {
        let sync = store.sync_configured_api_keys(configured).await?;
        if sync != KeySync::default() {
            info!(
                added = sync.added,
                moved = sync.moved,
                restored = sync.restored,
                revoked = sync.revoked,
                "stored API keys now match API_KEYS"
            );
        }
        return Ok(());
    }
    // Revoked keys count: revoking every key must not mint a new one.
    if store.count_api_keys().await? == 0 {
        let first_start = Actor::Command("api first start");
        let key = store.create_api_key("default", &first_start).await?.key;
        println!("API key: {key}");
        println!(
            "Try: curl -s -H 'Authorization: Bearer {key}' -H 'content-type: application/json' -d '{{\"month\":\"2026-10\"}}' http://{public_addr}/v1/reports/gst-summary"
        );
    } else if store.valid_api_keys().await?.1.is_empty() {
        println!(
            "API key: none is valid (all are revoked); `api keys create --tenant T` makes one"
        );
    } else {
        println!(
            "API key: (made at first start and printed then; `api keys create --tenant T` makes another)"
        );
    }
    Ok(())
}

/// Prints every stored key as a table, oldest first.
pub async fn list(settings: &Settings) -> Result<(), BoxError> {
    let store = store(settings).await?;
    let keys = store.list_api_keys().await?;
    store.close().await;
    print!("{}", key_table(&keys));
    Ok(())
}

/// Revokes a key by its id.
pub async fn revoke(settings: &Settings, key_id: &str) -> Result<(), BoxError> {
    let store = store(settings).await?;
    let outcome = store
        .revoke_api_key(None, key_id, &Actor::Command("api keys revoke"))
        .await;
    store.close().await;
    match outcome? {
        RevokeOutcome::Revoked { tenant_id } => println!(
            "Revoked {key_id} (tenant {tenant_id}). Every running api refuses it within {} s.",
            KEY_REFRESH.as_secs() + 1
        ),
        RevokeOutcome::AlreadyRevoked { revoked_at } => println!(
            "{key_id} was already revoked at {}; it stays revoked, even if API_KEYS lists it.",
            timestamp(revoked_at)
        ),
        RevokeOutcome::UnknownKeyId => {
            return Err(
                format!("no API key has the id {key_id:?}; `api keys list` shows the ids").into(),
            );
        }
    }
    Ok(())
}

/// A key's scopes as the commands print them: `full` for a key of full
/// rights (stored without scopes), else the list.
pub fn scope_text(scope: &KeyScope) -> String {
    if scope.is_full() {
        "full".to_owned()
    } else {
        scope.describe()
    }
}

fn timestamp(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// The table `api keys list` prints: one key a line, columns aligned,
/// the reason of a revocation last (it has spaces).
fn key_table(keys: &[ApiKeyRecord]) -> String {
    if keys.is_empty() {
        return "No API keys are stored.\n".to_owned();
    }
    let header = [
        "KEY ID",
        "TENANT",
        "SCOPE",
        "PREFIX",
        "CREATED",
        "LAST USED",
        "REVOKED",
    ];
    let rows: Vec<[String; 7]> = keys
        .iter()
        .map(|key| {
            [
                key.key_id.clone(),
                key.tenant_id.clone(),
                key.scope
                    .as_ref()
                    .map_or_else(|| "unknown".to_owned(), scope_text),
                key.key_prefix
                    .as_ref()
                    .map_or_else(|| "unknown".to_owned(), |prefix| format!("{prefix}…")),
                timestamp(key.created_at),
                key.last_used_at
                    .map_or_else(|| "never".to_owned(), timestamp),
                match key.revoked {
                    None => "-".to_owned(),
                    Some((at, Revocation::Command)) => {
                        format!("{} (api keys revoke)", timestamp(at))
                    }
                    Some((at, Revocation::NotInApiKeys)) => {
                        format!("{} (not in API_KEYS)", timestamp(at))
                    }
                },
            ]
        })
        .collect();
    let mut widths = header.map(|h| h.chars().count());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 7]| {
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                text.push_str(cell);
            } else {
                let pad = widths[i] - cell.chars().count() + 2;
                text.push_str(cell);
                text.push_str(&" ".repeat(pad));
            }
        }
        text.push('\n');
        text
    };
    let mut table = line(header);
    for row in &rows {
        table.push_str(&line(row.each_ref().map(String::as_str)));
    }
    table
}
