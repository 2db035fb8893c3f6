//! Secrets at rest: webhook and filing endpoint secrets are stored sealed
//! (`crate::keyring`), sealed as they are written and opened as they are
//! read, so that callers only ever hold them in clear in memory. A secret
//! a release before stored in clear stays readable until it is sealed: by
//! an api at its start ([`Store::seal_clear_secrets`]) or by
//! `api secrets rotate` ([`Store::rotate_secrets`]).

use shared::time::now_ms;

use serde_json::json;

use crate::{
    Actor, AuditAction, AuditChange, Error, Result, Store, WriteTx,
    keyring::DataKey,
    on_pool, on_tx, postgres,
    rows::secrets::{NewDataKey, SealedSecret, SecretToSeal, StoredSecret},
    sql::Millis,
    sqlite,
};

/// What sealing secrets anew did: counts, for the operator and for the
/// record of the change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecretsReport {
    /// The master key everything is now sealed under (its fingerprint).
    pub master_fingerprint: String,
    /// Secrets that were in clear, now sealed.
    pub sealed: u64,
    /// Secrets sealed under an older master key, now sealed under this one.
    pub resealed: u64,
    /// Secrets changed by another process while being sealed (a new
    /// secret, sealed as it was written): left as that process wrote them.
    pub changed_meanwhile: u64,
    /// Data keys of older master keys that no secret uses any more,
    /// deleted.
    pub data_keys_retired: u64,
    /// Data keys of older master keys still used after the run (by
    /// secrets a process sealed meanwhile under an older first key).
    pub data_keys_left: u64,
    /// Batches committed.
    pub batches: u64,
}

impl SecretsReport {
    /// Whether it changed nothing.
    pub fn is_empty(&self) -> bool {
        self.sealed == 0 && self.resealed == 0 && self.data_keys_retired == 0
    }
}

/// Which secrets to seal anew.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    /// Those in clear.
    Clear,
    /// Those in clear, and those sealed under another master key than the
    /// first.
    NotUnderPrimary,
}

/// The two tables that hold secrets.
#[derive(Debug, Clone, Copy)]
enum Holder {
    Webhooks,
    FilingEndpoints,
}

/// What binds a webhook's sealed secret to its row.
pub(crate) fn webhook_context(webhook_id: &str) -> String {
    format!("webhook:{webhook_id}")
}

/// What binds a filing endpoint's sealed secret to its row.
pub(crate) fn filing_context(tenant_id: &str) -> String {
    format!("filing:{tenant_id}")
}

impl Holder {
    fn context(self, row_key: &str) -> String {
        match self {
            Holder::Webhooks => webhook_context(row_key),
            Holder::FilingEndpoints => filing_context(row_key),
        }
    }
}

impl Store {
    /// Checks, at the start of a process that handles secrets, that its
    /// master keys open every stored data key; an error names
    /// `RECEIPT_MASTER_KEYS` (or the key file). Keeps the keys opened, and
    /// seals from then on with the newest data key under the first master
    /// key, if there is one.
    pub async fn check_keyring(&self) -> Result<()> {
        self.keyring.require()?;
        let rows = on_pool!(self,
            pool => postgres::secrets::data_keys(pool).await?,
            pool => sqlite::secrets::data_keys(pool).await?,
        );
        let mut current = None;
        for row in rows {
            let key =
                self.keyring
                    .unwrap(&row.key_id, &row.master_fingerprint, &row.wrapped_key)?;
            if current.is_none() && self.keyring.is_primary(&key.master_fingerprint) {
                current = Some(key);
            }
        }
        if let Some(key) = current {
            self.keyring.use_for_sealing(key);
        }
        Ok(())
    }

    /// The fingerprints of the master keys, the sealing one first.
    pub fn master_fingerprints(&self) -> Vec<String> {
        self.keyring.fingerprints()
    }

    /// Seals, in the caller's transaction, `secret` for what `context`
    /// names, with this process's data key (stored in the same
    /// transaction if it is not yet).
    pub(crate) async fn seal_in(
        &self,
        tx: &mut WriteTx,
        context: &str,
        secret: &str,
    ) -> Result<SealedSecret<'static>> {
        let key = self.sealing_key()?;
        let row = new_data_key_row(&key);
        let cleared = on_tx!(tx,
            conn => {
                postgres::secrets::insert_data_key(conn, &row).await?;
                postgres::secrets::CLEARED_SECRET
            },
            conn => {
                sqlite::secrets::insert_data_key(conn, &row).await?;
                sqlite::secrets::CLEARED_SECRET
            },
        );
        sealed_with(&key, context, secret, cleared)
    }

    /// This process's data key under the first master key, made on first
    /// use.
    fn sealing_key(&self) -> Result<DataKey> {
        if let Some(key) = self.keyring.current() {
            return Ok(key);
        }
        let key = self.keyring.new_data_key()?;
        self.keyring.use_for_sealing(key.clone());
        Ok(key)
    }

    /// A stored secret in clear: opened with its data key, or as a
    /// release before stored it. An error names `RECEIPT_MASTER_KEYS`
    /// when its master key is not held.
    pub(crate) async fn open_secret(&self, context: &str, stored: &StoredSecret) -> Result<String> {
        match (&stored.sealed_secret, &stored.secret_key_id) {
            (Some(sealed), Some(key_id)) => self.data_key(key_id).await?.open(context, sealed),
            _ => stored
                .secret
                .clone()
                .ok_or_else(|| Error::Corrupt(format!("the secret of {context} is missing"))),
        }
    }

    async fn data_key(&self, key_id: &str) -> Result<DataKey> {
        if let Some(key) = self.keyring.cached(key_id) {
            return Ok(key);
        }
        let row = on_pool!(self,
            pool => postgres::secrets::data_key(pool, key_id).await?,
            pool => sqlite::secrets::data_key(pool, key_id).await?,
        )
        .ok_or_else(|| Error::Corrupt(format!("data key {key_id} is missing")))?;
        self.keyring
            .unwrap(&row.key_id, &row.master_fingerprint, &row.wrapped_key)
            .map_err(|error| match error {
                Error::Config(why) => Error::KeyNotHeld(why),
                other => other,
            })
    }

    /// Seals every secret still in clear (written by a release before),
    /// in batches of `batch`, each committed.
    pub async fn seal_clear_secrets(&self, batch: usize) -> Result<SecretsReport> {
        self.seal_anew(Reach::Clear, batch, &Actor::Command("api start"))
            .await
    }

    /// Seals every secret under the first master key: those in clear, and
    /// those sealed under an older one (with a data key of the first), in
    /// batches of `batch`, each committed, so that a run stopped midway
    /// leaves every secret readable and the next run goes on where it
    /// stopped. Then deletes the data keys of older master keys that no
    /// secret uses any more. Safe beside running processes: a secret
    /// changed meanwhile is left as its writer sealed it. A second run
    /// changes nothing.
    pub async fn rotate_secrets(&self, batch: usize, actor: &Actor) -> Result<SecretsReport> {
        let mut report = self.seal_anew(Reach::NotUnderPrimary, batch, actor).await?;
        let primary = self.keyring.primary_fingerprint()?.to_owned();
        let mut tx = self.begin_write().await?;
        report.data_keys_retired = on_tx!(tx,
            conn => postgres::secrets::retire_data_keys(conn, &primary).await?,
            conn => sqlite::secrets::retire_data_keys(conn, &primary).await?,
        );
        if report.data_keys_retired > 0 {
            let details = json!({
                "master_key": primary,
                "data_keys_retired": report.data_keys_retired,
            });
            self.audit(&mut tx, actor, &rotated(details)).await?;
        }
        let left = on_tx!(tx,
            conn => postgres::secrets::count_other_data_keys(conn, &primary).await?,
            conn => sqlite::secrets::count_other_data_keys(conn, &primary).await?,
        );
        tx.commit().await?;
        report.data_keys_left = u64::try_from(left).unwrap_or_default();
        Ok(report)
    }

    async fn seal_anew(&self, reach: Reach, batch: usize, actor: &Actor) -> Result<SecretsReport> {
        let primary = self.keyring.primary_fingerprint()?.to_owned();
        let mut report = SecretsReport {
            master_fingerprint: primary.clone(),
            ..SecretsReport::default()
        };
        let limit = i64::try_from(batch.max(1)).unwrap_or(i64::MAX);
        let all = reach == Reach::NotUnderPrimary;
        for holder in [Holder::Webhooks, Holder::FilingEndpoints] {
            let mut after = String::new();
            loop {
                let mut tx = self.begin_write().await?;
                let rows = on_tx!(tx,
                    conn => match holder {
                        Holder::Webhooks => postgres::secrets::webhooks_to_seal(
                            conn, &after, &primary, all, limit,
                        ).await?,
                        Holder::FilingEndpoints => postgres::secrets::filing_endpoints_to_seal(
                            conn, &after, &primary, all, limit,
                        ).await?,
                    },
                    conn => match holder {
                        Holder::Webhooks => sqlite::secrets::webhooks_to_seal(
                            conn, &after, &primary, all, limit,
                        ).await?,
                        Holder::FilingEndpoints => sqlite::secrets::filing_endpoints_to_seal(
                            conn, &after, &primary, all, limit,
                        ).await?,
                    },
                );
                let Some(last) = rows.last() else {
                    tx.rollback().await?;
                    break;
                };
                after = last.row_key.clone();
                let before = report.clone();
                for row in &rows {
                    self.reseal(&mut tx, holder, row, &mut report).await?;
                }
                // Each batch is a change of its own, committed with its
                // entry.
                let details = json!({
                    "master_key": primary,
                    "sealed": report.sealed - before.sealed,
                    "resealed": report.resealed - before.resealed,
                });
                self.audit(&mut tx, actor, &rotated(details)).await?;
                tx.commit().await?;
                report.batches += 1;
                // A run stopped here leaves the batches before committed
                // and every other secret as it was: all readable.
                shared::failpoints::crash_if_armed("store::secrets_batch_committed");
            }
        }
        Ok(report)
    }

    async fn reseal(
        &self,
        tx: &mut WriteTx,
        holder: Holder,
        row: &SecretToSeal,
        report: &mut SecretsReport,
    ) -> Result<()> {
        let context = holder.context(&row.row_key);
        let stored = row.stored();
        let clear = self.open_secret(&context, &stored).await?;
        let was = stored
            .sealed_secret
            .clone()
            .or(stored.secret.clone())
            .unwrap_or_default();
        let sealed = self.seal_in(tx, &context, &clear).await?;
        let key = row.row_key.as_str();
        let changed = on_tx!(tx,
            conn => match holder {
                Holder::Webhooks => postgres::secrets::reseal_webhook(conn, key, &was, &sealed)
                    .await?,
                Holder::FilingEndpoints => {
                    postgres::secrets::reseal_filing_endpoint(conn, key, &was, &sealed).await?
                }
            },
            conn => match holder {
                Holder::Webhooks => sqlite::secrets::reseal_webhook(conn, key, &was, &sealed)
                    .await?,
                Holder::FilingEndpoints => {
                    sqlite::secrets::reseal_filing_endpoint(conn, key, &was, &sealed).await?
                }
            },
        );
        if changed == 0 {
            report.changed_meanwhile += 1;
        } else if stored.sealed_secret.is_none() {
            report.sealed += 1;
        } else {
            report.resealed += 1;
        }
        Ok(())
    }
}

/// The audit log's entry of secrets sealed anew: the whole deployment's.
fn rotated(details: serde_json::Value) -> AuditChange<'static> {
    AuditChange {
        tenant_id: None,
        action: AuditAction::SecretsRotated,
        target: None,
        details,
    }
}

fn new_data_key_row(key: &DataKey) -> NewDataKey<'_> {
    NewDataKey {
        key_id: &key.key_id,
        master_fingerprint: &key.master_fingerprint,
        wrapped_key: &key.wrapped_key,
        created_at: Millis(now_ms()),
    }
}

fn sealed_with(
    key: &DataKey,
    context: &str,
    secret: &str,
    cleared: Option<&'static str>,
) -> Result<SealedSecret<'static>> {
    Ok(SealedSecret {
        sealed_secret: key.seal(context, secret)?,
        secret_key_id: key.key_id.clone(),
        cleared,
    })
}
