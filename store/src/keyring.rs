//! The master keys that seal secrets at rest, and the AES-256-GCM of
//! RustCrypto's `aes-gcm` under them: a secret is sealed under a data key
//! (DEK), and each data key is stored wrapped (sealed) under a master key.
//! Nothing here is cryptography of Receipt's own: keys and nonces come
//! from the crate's `OsRng`, and each 12-byte nonce is stored in front of
//! its ciphertext.
//!
//! Every sealed text is `v1:` + base64 (nonce, ciphertext and tag), and is
//! bound by AES-GCM's associated data to what it belongs to (a data key to
//! its id, a secret to its row and data key), so that no sealed text can
//! be moved to another row and still open.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use aes_gcm::{
    Aes256Gcm, Key, KeyInit, Nonce,
    aead::{Aead, AeadCore, OsRng, Payload},
};
use base64::{Engine, engine::general_purpose::STANDARD as BASE64};
use sha2::{Digest, Sha256};

use crate::{Error, Result};

/// The setting that holds the master keys, named by every error about them.
pub const MASTER_KEYS_SETTING: &str = "RECEIPT_MASTER_KEYS";

const VERSION: &str = "v1:";
const NONCE_LEN: usize = 12;
const KEY_LEN: usize = 32;

/// One master key: its cipher, and its fingerprint (the first 16 hex of
/// the SHA-256 of the key), which is stored beside each data key it wraps
/// so the right master key is found without trying each.
#[derive(Clone)]
struct MasterKey {
    fingerprint: String,
    cipher: Aes256Gcm,
}

/// Where the master keys came from, for messages.
#[derive(Debug, Clone)]
pub enum KeySource {
    /// `RECEIPT_MASTER_KEYS`.
    Setting,
    /// The key file beside an embedded database.
    File(PathBuf),
    /// Made for an in-memory database, which dies with the process.
    Memory,
    /// None: `RECEIPT_MASTER_KEYS` is unset and the database is Postgres.
    Missing,
}

/// A data key, unwrapped: what seals and opens secrets.
#[derive(Clone)]
pub(crate) struct DataKey {
    pub(crate) key_id: String,
    pub(crate) master_fingerprint: String,
    /// As stored in `data_keys.wrapped_key`.
    pub(crate) wrapped_key: String,
    cipher: Aes256Gcm,
}

/// Never the key itself.
impl std::fmt::Debug for DataKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataKey")
            .field("key_id", &self.key_id)
            .field("master_fingerprint", &self.master_fingerprint)
            .finish_non_exhaustive()
    }
}

/// The master keys (the first seals), and the data keys this process has
/// unwrapped, by id.
#[derive(Clone)]
pub struct Keyring {
    masters: Vec<MasterKey>,
    source: KeySource,
    data_keys: Arc<Mutex<HashMap<String, DataKey>>>,
    /// The data key this process seals with: one under the first master key.
    current: Arc<Mutex<Option<DataKey>>>,
}

/// Never the keys themselves.
impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyring")
            .field("fingerprints", &self.fingerprints())
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl Keyring {
    /// The keyring of `RECEIPT_MASTER_KEYS` (`text`), or, unset, of the
    /// database at `database_url`: a SQLite file's key file (made on first
    /// use), a key of its own for an in-memory SQLite database, and none
    /// for Postgres (see [`Keyring::require`]).
    pub fn from_setting(text: Option<&str>, database_url: &str) -> Result<Keyring> {
        if let Some(text) = text.filter(|t| !t.trim().is_empty()) {
            return Keyring::parse(text);
        }
        if !database_url.starts_with("sqlite:") {
            return Ok(Keyring::none());
        }
        match sqlite_key_file(database_url) {
            Some(path) => Keyring::of_file(&path),
            None => Ok(Keyring::with(
                vec![master(&Aes256Gcm::generate_key(OsRng))],
                KeySource::Memory,
            )),
        }
    }

    /// `RECEIPT_MASTER_KEYS`'s text: base64 32-byte keys, comma-separated.
    /// No message quotes a key.
    pub fn parse(text: &str) -> Result<Keyring> {
        let mut masters: Vec<MasterKey> = Vec::new();
        for (index, entry) in text.split(',').enumerate() {
            let key = decode_key(entry.trim()).map_err(|why| {
                Error::Config(format!(
                    "{MASTER_KEYS_SETTING} entry {}: {why}; each key is 32 random bytes in \
                     base64 (`openssl rand -base64 32`), comma-separated",
                    index + 1
                ))
            })?;
            let key = master(&key);
            if !masters.iter().any(|m| m.fingerprint == key.fingerprint) {
                masters.push(key);
            }
        }
        Ok(Keyring::with(masters, KeySource::Setting))
    }

    /// A new random master key, as base64: what a key file holds and what
    /// `RECEIPT_MASTER_KEYS` lists.
    pub fn new_master_key() -> String {
        BASE64.encode(Aes256Gcm::generate_key(OsRng))
    }

    fn of_file(path: &Path) -> Result<Keyring> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                make_key_file(path)?;
                std::fs::read_to_string(path).map_err(|e| file_error(path, &e))?
            }
            Err(error) => return Err(file_error(path, &error)),
        };
        let key = decode_key(text.trim()).map_err(|why| {
            Error::Config(format!(
                "the master key file {} is not a master key ({why}); restore it, or set \
                 {MASTER_KEYS_SETTING}",
                path.display()
            ))
        })?;
        Ok(Keyring::with(
            vec![master(&key)],
            KeySource::File(path.to_owned()),
        ))
    }

    /// No master key (until one is given).
    pub(crate) fn none() -> Keyring {
        Keyring::with(Vec::new(), KeySource::Missing)
    }

    fn with(masters: Vec<MasterKey>, source: KeySource) -> Keyring {
        Keyring {
            masters,
            source,
            data_keys: Arc::default(),
            current: Arc::default(),
        }
    }

    /// Where the keys came from.
    pub fn source(&self) -> &KeySource {
        &self.source
    }

    /// The fingerprints of the master keys, the sealing one first.
    pub fn fingerprints(&self) -> Vec<String> {
        self.masters.iter().map(|m| m.fingerprint.clone()).collect()
    }

    /// The fingerprint of the master key that seals.
    pub fn primary_fingerprint(&self) -> Result<&str> {
        self.require()?;
        Ok(&self.masters[0].fingerprint)
    }

    /// An error naming the setting when there is no master key.
    pub fn require(&self) -> Result<()> {
        if self.masters.is_empty() {
            return Err(Error::Config(format!(
                "{MASTER_KEYS_SETTING} is not set: on Postgres it is required, to seal webhook \
                 and filing endpoint secrets at rest. Set it to a base64 32-byte key \
                 (`openssl rand -base64 32`) and keep that key with the database's backups \
                 (docs/operations.md, Secrets at rest)"
            )));
        }
        Ok(())
    }

    /// Words that say where the keys come from, for errors.
    fn holder(&self) -> String {
        match &self.source {
            KeySource::File(path) => format!(
                "the master key file {} ({MASTER_KEYS_SETTING} is unset)",
                path.display()
            ),
            _ => MASTER_KEYS_SETTING.to_owned(),
        }
    }

    /// A new data key, wrapped under the first master key.
    pub(crate) fn new_data_key(&self) -> Result<DataKey> {
        self.require()?;
        let master = &self.masters[0];
        let key_id = shared::ids::new_id("dk_");
        let key = Aes256Gcm::generate_key(OsRng);
        let wrapped_key = seal(&master.cipher, &data_key_context(&key_id), &key)?;
        Ok(DataKey {
            key_id,
            master_fingerprint: master.fingerprint.clone(),
            wrapped_key,
            cipher: Aes256Gcm::new(&key),
        })
    }

    /// Unwraps a stored data key with the master key its fingerprint
    /// names, and keeps it. An error names the setting when that master
    /// key is not held, or does not open it.
    pub(crate) fn unwrap(
        &self,
        key_id: &str,
        master_fingerprint: &str,
        wrapped_key: &str,
    ) -> Result<DataKey> {
        if let Some(key) = self.cached(key_id) {
            return Ok(key);
        }
        let Some(master) = self
            .masters
            .iter()
            .find(|m| m.fingerprint == master_fingerprint)
        else {
            return Err(Error::Config(format!(
                "data key {key_id} is sealed under the master key of fingerprint \
                 {master_fingerprint}, which {} does not hold (it holds {}): list that key \
                 again until `api secrets rotate` has moved every secret off it",
                self.holder(),
                self.held()
            )));
        };
        let key = open(&master.cipher, &data_key_context(key_id), wrapped_key).map_err(|_| {
            Error::Config(format!(
                "data key {key_id} does not open with the master key of fingerprint \
                 {master_fingerprint} in {}: the stored key is damaged",
                self.holder()
            ))
        })?;
        let key = <[u8; KEY_LEN]>::try_from(key.as_slice())
            .map_err(|_| Error::Corrupt(format!("data key {key_id} is not 32 bytes")))?;
        let key = DataKey {
            key_id: key_id.to_owned(),
            master_fingerprint: master_fingerprint.to_owned(),
            wrapped_key: wrapped_key.to_owned(),
            cipher: Aes256Gcm::new(&Key::<Aes256Gcm>::from(key)),
        };
        self.keep(key.clone());
        Ok(key)
    }

    fn held(&self) -> String {
        if self.masters.is_empty() {
            "none".to_owned()
        } else {
            self.fingerprints().join(", ")
        }
    }

    pub(crate) fn cached(&self, key_id: &str) -> Option<DataKey> {
        lock(&self.data_keys).get(key_id).cloned()
    }

    fn keep(&self, key: DataKey) {
        lock(&self.data_keys).insert(key.key_id.clone(), key);
    }

    /// The data key this process seals with, if it has one under the
    /// first master key.
    pub(crate) fn current(&self) -> Option<DataKey> {
        let primary = self.masters.first()?;
        lock(&self.current)
            .clone()
            .filter(|key| key.master_fingerprint == primary.fingerprint)
    }

    /// Makes `key` (under the first master key) the one to seal with.
    pub(crate) fn use_for_sealing(&self, key: DataKey) {
        self.keep(key.clone());
        *lock(&self.current) = Some(key);
    }

    /// Whether `fingerprint` is the sealing master key's.
    pub(crate) fn is_primary(&self, fingerprint: &str) -> bool {
        self.masters
            .first()
            .is_some_and(|m| m.fingerprint == fingerprint)
    }
}

impl DataKey {
    /// Seals `secret` for what `context` names (`webhook:<id>`).
    pub(crate) fn seal(&self, context: &str, secret: &str) -> Result<String> {
        seal(
            &self.cipher,
            &secret_context(&self.key_id, context),
            secret.as_bytes(),
        )
    }

    /// Opens a secret sealed for `context`.
    pub(crate) fn open(&self, context: &str, sealed: &str) -> Result<String> {
        let clear =
            open(&self.cipher, &secret_context(&self.key_id, context), sealed).map_err(|why| {
                Error::Corrupt(format!(
                    "the secret of {context} does not open with data key {}: {why}",
                    self.key_id
                ))
            })?;
        String::from_utf8(clear)
            .map_err(|_| Error::Corrupt(format!("the secret of {context} is not text")))
    }
}

fn data_key_context(key_id: &str) -> String {
    format!("receipt/data-key/v1/{key_id}")
}

fn secret_context(key_id: &str, context: &str) -> String {
    format!("receipt/secret/v1/{context}/{key_id}")
}

fn master(key: &Key<Aes256Gcm>) -> MasterKey {
    let digest = Sha256::digest(&key[..]);
    MasterKey {
        fingerprint: hex::encode(&digest[..8]),
        cipher: Aes256Gcm::new(key),
    }
}

fn decode_key(text: &str) -> std::result::Result<Key<Aes256Gcm>, String> {
    if text.is_empty() {
        return Err("is empty".to_owned());
    }
    let bytes = BASE64
        .decode(text)
        .map_err(|_| "is not base64".to_owned())?;
    let bytes = <[u8; KEY_LEN]>::try_from(bytes.as_slice())
        .map_err(|_| format!("is {} bytes, not {KEY_LEN}", bytes.len()))?;
    Ok(Key::<Aes256Gcm>::from(bytes))
}

fn seal(cipher: &Aes256Gcm, aad: &str, clear: &[u8]) -> Result<String> {
    let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
    let sealed = cipher
        .encrypt(
            &nonce,
            Payload {
                msg: clear,
                aad: aad.as_bytes(),
            },
        )
        .map_err(|_| Error::Corrupt("AES-GCM refused to seal".to_owned()))?;
    let mut bytes = nonce.to_vec();
    bytes.extend_from_slice(&sealed);
    Ok(format!("{VERSION}{}", BASE64.encode(bytes)))
}

fn open(cipher: &Aes256Gcm, aad: &str, sealed: &str) -> std::result::Result<Vec<u8>, String> {
    let text = sealed
        .strip_prefix(VERSION)
        .ok_or_else(|| "not a sealed text of version 1".to_owned())?;
    let bytes = BASE64.decode(text).map_err(|_| "not base64".to_owned())?;
    if bytes.len() < NONCE_LEN {
        return Err("too short".to_owned());
    }
    let (nonce, sealed) = bytes.split_at(NONCE_LEN);
    let nonce = <[u8; NONCE_LEN]>::try_from(nonce).map_err(|_| "too short".to_owned())?;
    cipher
        .decrypt(
            &Nonce::from(nonce),
            Payload {
                msg: sealed,
                aad: aad.as_bytes(),
            },
        )
        .map_err(|_| "it does not authenticate".to_owned())
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn file_error(path: &Path, error: &std::io::Error) -> Error {
    Error::Config(format!(
        "cannot read the master key file {}: {error}; restore it, or set {MASTER_KEYS_SETTING}",
        path.display()
    ))
}

/// The key file of a SQLite file database: beside it, its name and
/// `.master-key`. `None` for an in-memory database.
fn sqlite_key_file(database_url: &str) -> Option<PathBuf> {
    let path = database_url
        .trim_start_matches("sqlite://")
        .trim_start_matches("sqlite:")
        .split('?')
        .next()
        .unwrap_or_default();
    if path.is_empty() || path == ":memory:" || database_url.contains("mode=memory") {
        return None;
    }
    Some(PathBuf::from(format!("{path}.master-key")))
}

/// Writes a new key to `path`, readable by its owner only. Written under
/// another name first and linked into place, so that two processes
/// starting at once on one database both end up with the one that won.
fn make_key_file(path: &Path) -> Result<()> {
    use std::io::Write;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| Error::Config(format!("cannot create {}: {e}", parent.display())))?;
    }
    let written = |e: std::io::Error| {
        Error::Config(format!(
            "cannot write the master key file {}: {e}; set {MASTER_KEYS_SETTING} instead",
            path.display()
        ))
    };
    let draft = PathBuf::from(format!(
        "{}.{}.new",
        path.display(),
        shared::ids::new_id("")
    ));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    options.mode(0o600);
    let mut file = options.open(&draft).map_err(written)?;
    let outcome = file
        .write_all(format!("{}\n", Keyring::new_master_key()).as_bytes())
        .and_then(|()| file.sync_all())
        .and_then(|()| std::fs::hard_link(&draft, path));
    let _ = std::fs::remove_file(&draft);
    match outcome {
        Ok(()) => {
            tracing::warn!(
                file = %path.display(),
                "made a master key for secrets at rest in {} (mode 0600): keep it with the \
                 database and its backups, or set {MASTER_KEYS_SETTING} instead",
                path.display()
            );
            Ok(())
        }
        // Another process made it first: its key is the one.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(written(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keyring() -> Keyring {
        Keyring::parse(&Keyring::new_master_key()).expect("a key")
    }

    #[test]
    fn a_secret_opens_only_for_the_row_it_was_sealed_for() {
        let keyring = keyring();
        let key = keyring.new_data_key().expect("a data key");
        let sealed = key.seal("webhook:wh_1", "whsec_abc").expect("sealed");
        assert!(!sealed.contains("whsec_abc"));
        assert_eq!(
            key.open("webhook:wh_1", &sealed).expect("opens"),
            "whsec_abc"
        );
        assert!(key.open("webhook:wh_2", &sealed).is_err());
    }

    #[test]
    fn a_data_key_unwraps_only_under_its_master_key() {
        let keyring = keyring();
        let key = keyring.new_data_key().expect("a data key");
        let fresh = Keyring::parse(&format!(
            "{},{}",
            Keyring::new_master_key(),
            Keyring::new_master_key()
        ))
        .expect("keys");
        let error = fresh
            .unwrap(&key.key_id, &key.master_fingerprint, &key.wrapped_key)
            .expect_err("another master key")
            .to_string();
        assert!(error.contains(MASTER_KEYS_SETTING), "{error}");
        let reopened = keyring
            .unwrap("dk_other", &key.master_fingerprint, &key.wrapped_key)
            .map(|_| ())
            .expect_err("a wrapped key moved to another id");
        assert!(reopened.to_string().contains("dk_other"), "{reopened}");
    }

    #[test]
    fn malformed_master_keys_are_refused_naming_the_setting_and_never_the_key() {
        for (text, says) in [
            ("not base64!", "is not base64"),
            ("c2hvcnQ=", "is 5 bytes, not 32"),
            ("", "is empty"),
        ] {
            let error = Keyring::parse(text).expect_err("refused").to_string();
            assert!(error.contains(MASTER_KEYS_SETTING), "{error}");
            assert!(error.contains(says), "{text:?}: {error}");
            assert!(text.is_empty() || !error.contains(text), "{error}");
        }
    }
}
