//! `api secrets rotate`: every webhook and filing endpoint secret sealed
//! under the first master key of `RECEIPT_MASTER_KEYS`, and the data keys
//! of older master keys retired, while the api and workers run.

use shared::settings::Settings;
use store::{SecretsReport, Store};

use crate::error::BoxError;

/// Secrets sealed anew per committed transaction.
pub const BATCH: usize = 100;

/// Seals every secret under the first master key, in batches of `batch`,
/// and prints what it did. Stopped midway, every secret stays readable,
/// and the next run finishes; a second run changes nothing.
pub async fn rotate(settings: &Settings, batch: usize) -> Result<(), BoxError> {
    let store = Store::open(settings).await?;
    store.migrate().await?;
    let outcome = rotate_on(&store, batch).await;
    store.close().await;
    print!("{}", report_text(&outcome?, &store.master_fingerprints()));
    Ok(())
}

async fn rotate_on(store: &Store, batch: usize) -> Result<SecretsReport, BoxError> {
    store.check_keyring().await?;
    Ok(store
        .rotate_secrets(batch, &store::Actor::Command("api secrets rotate"))
        .await?)
}

/// What `secrets rotate` prints.
fn report_text(report: &SecretsReport, fingerprints: &[String]) -> String {
    let master = &report.master_fingerprint;
    let mut text = String::new();
    if report.is_empty() {
        text.push_str(&format!(
            "Nothing to do: every secret is sealed under master key {master}, and no data key \
             of another master key is left.\n"
        ));
    } else {
        text.push_str(&format!(
            "Sealed under master key {master}: {} secrets that were in clear, {} re-encrypted \
             from older master keys ({} batches committed).\n",
            report.sealed, report.resealed, report.batches
        ));
        text.push_str(&format!(
            "Retired {} data keys of older master keys.\n",
            report.data_keys_retired
        ));
    }
    if report.changed_meanwhile > 0 {
        text.push_str(&format!(
            "{} secrets were changed by a running process meanwhile and left as it sealed \
             them; run `api secrets rotate` again to check them.\n",
            report.changed_meanwhile
        ));
    }
    let older: Vec<&str> = fingerprints.iter().skip(1).map(String::as_str).collect();
    if report.data_keys_left > 0 {
        text.push_str(&format!(
            "{} data keys of older master keys are still in use (a process still seals with \
             an older key first?): restart every process with the new key first, then run \
             `api secrets rotate` again before removing any key.\n",
            report.data_keys_left
        ));
    } else if !older.is_empty() {
        text.push_str(&format!(
            "No secret needs the other master keys of RECEIPT_MASTER_KEYS ({}) any more: \
             remove them from every process's RECEIPT_MASTER_KEYS.\n",
            older.join(", ")
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_that_changed_nothing_says_so() {
        let report = SecretsReport {
            master_fingerprint: "0123456789abcdef".into(),
            ..SecretsReport::default()
        };
        let text = report_text(&report, &["0123456789abcdef".into()]);
        assert!(text.starts_with("Nothing to do"), "{text}");
        let report = SecretsReport {
            resealed: 3,
            ..report
        };
        let text = report_text(&report, &["0123456789abcdef".into()]);
        assert!(text.contains("3 re-encrypted"), "{text}");
    }
}
