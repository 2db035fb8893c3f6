//! Every id and secret Receipt mints, in one place: ids are a prefix and
//! a time-ordered UUID (v7) in hex, so they sort by creation; secrets are
//! OS randomness.

use base64::{Engine, engine::general_purpose::STANDARD as BASE64};
use sha2::{Digest, Sha256};

/// `prefix` + a UUID v7 in simple (hex) form: `job_`, `wh_`, `evt_`, ...
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}{}", uuid::Uuid::now_v7().simple())
}

/// A new job id: `job_` + UUID v7, so ids sort by time.
pub fn new_job_id() -> String {
    new_id("job_")
}

/// `bytes` bytes of OS randomness, as lowercase hex.
pub fn random_hex(bytes: usize) -> String {
    let mut buffer = vec![0u8; bytes];
    rand::fill(buffer.as_mut_slice());
    hex::encode(buffer)
}

/// A new API key: `rk_` + 64 hex characters of OS randomness.
pub fn new_api_key() -> String {
    format!("rk_{}", random_hex(32))
}

/// A new API key id: `key_` + 16 hex characters. Not a secret: it names a
/// key in `api keys list` and `api keys revoke`.
pub fn new_api_key_id() -> String {
    format!("key_{}", random_hex(8))
}

/// The SHA-256 of `text`, as lowercase hex: how an API key is stored and
/// looked up (one hash, one allocation per request, good key or bad).
pub fn sha256_hex(text: &[u8]) -> String {
    hex::encode(Sha256::digest(text))
}

/// A new webhook signing secret: `whsec_` + base64 of 32 random bytes.
pub fn new_webhook_secret() -> String {
    let bytes: [u8; 32] = rand::random();
    format!("whsec_{}", BASE64.encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_carry_their_prefix_and_sort_by_time() {
        let first = new_id("evt_");
        let second = new_id("evt_");
        assert!(first.starts_with("evt_") && first.len() == 4 + 32);
        assert!(first < second);
    }

    #[test]
    fn keys_and_secrets_have_their_documented_shape() {
        let key = new_api_key();
        assert!(key.starts_with("rk_") && key.len() == 3 + 64);
        assert!(key[3..].bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(new_api_key_id().len(), 4 + 16);
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let secret = new_webhook_secret();
        assert_eq!(BASE64.decode(&secret[6..]).unwrap().len(), 32);
    }
}
