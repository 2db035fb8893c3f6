//! Checking, in a receiver, that a webhook (or a filing) came from
//! Receipt: the Standard Webhooks signature over `{id}.{timestamp}.{body}`,
//! a timestamp within a tolerance of now (so a captured request cannot be
//! replayed later), and, while a secret is being rotated, either secret.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::HeaderMap;

use crate::{Error, Result};

/// Why a webhook was refused; [`Error::WebhookRejected`] carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rejection {
    /// A `webhook-id`, `webhook-timestamp` or `webhook-signature` header
    /// is missing or not text.
    MissingHeader(&'static str),
    /// `webhook-timestamp` is not whole unix seconds.
    BadTimestamp,
    /// The timestamp is further from now than the tolerance: a replay, or
    /// a clock far off.
    OutsideTolerance,
    /// No signature in `webhook-signature` matches any of the secrets.
    NoMatchingSignature,
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rejection::MissingHeader(name) => write!(f, "the {name} header is missing"),
            Rejection::BadTimestamp => write!(f, "webhook-timestamp is not unix seconds"),
            Rejection::OutsideTolerance => {
                write!(f, "webhook-timestamp is too far from now")
            }
            Rejection::NoMatchingSignature => {
                write!(f, "no signature matches the webhook's secret")
            }
        }
    }
}

/// Checks the signatures of the webhooks (or filings) one secret signs.
///
/// ```
/// use receipt_client::WebhookVerifier;
/// use std::time::Duration;
///
/// # fn main() -> receipt_client::Result<()> {
/// // While a rotation is under way, accept the new secret and the old one.
/// let verifier = WebhookVerifier::new("whsec_bmV3IHNlY3JldCBvZiAzMiBieXRlcyBmb3IgaG1hYw==")?
///     .also_accept("whsec_b2xkIHNlY3JldCBvZiAzMiBieXRlcyBmb3IgaG1hYw==")?
///     .tolerance(Duration::from_secs(300));
/// // In the receiver, with the request's headers and its raw body:
/// // verifier.verify(&headers, &body)?;
/// # let _ = verifier;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct WebhookVerifier {
    secrets: Vec<String>,
    tolerance: Duration,
}

impl WebhookVerifier {
    /// The tolerance of [`WebhookVerifier::new`], as the Standard Webhooks
    /// libraries have it.
    pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

    /// A verifier of webhooks signed with `secret` (`whsec_` + base64, as
    /// a registration or a rotation answered).
    pub fn new(secret: &str) -> Result<Self> {
        Ok(WebhookVerifier {
            secrets: vec![checked(secret)?],
            tolerance: Self::DEFAULT_TOLERANCE,
        })
    }

    /// Accepts this secret too: the old one while a rotation's new secret
    /// reaches every receiver (Receipt signs with the new one at once,
    /// retries of pending events included).
    pub fn also_accept(mut self, secret: &str) -> Result<Self> {
        self.secrets.push(checked(secret)?);
        Ok(self)
    }

    /// How far a webhook's timestamp may be from now, either way.
    pub fn tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// Checks a request from its headers and its body exactly as received
    /// (before any JSON parsing: a re-serialized body would not match).
    pub fn verify(&self, headers: &HeaderMap, body: &[u8]) -> Result<()> {
        let header = |name: &'static str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .ok_or(Error::WebhookRejected(Rejection::MissingHeader(name)))
        };
        self.verify_parts(
            header("webhook-id")?,
            header("webhook-timestamp")?,
            header("webhook-signature")?,
            body,
            SystemTime::now(),
        )
    }

    /// [`WebhookVerifier::verify`] from the three headers' values, at `now`.
    pub fn verify_parts(
        &self,
        id: &str,
        timestamp: &str,
        signatures: &str,
        body: &[u8],
        now: SystemTime,
    ) -> Result<()> {
        let reject = |why| Err(Error::WebhookRejected(why));
        let Ok(sent_at) = timestamp.trim().parse::<i64>() else {
            return reject(Rejection::BadTimestamp);
        };
        let now = now
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let tolerance = i64::try_from(self.tolerance.as_secs()).unwrap_or(i64::MAX);
        if now.abs_diff(sent_at) > tolerance.unsigned_abs() {
            return reject(Rejection::OutsideTolerance);
        }
        let Ok(body) = std::str::from_utf8(body) else {
            return reject(Rejection::NoMatchingSignature);
        };
        for secret in &self.secrets {
            let expected = outbound::sign(secret, id, sent_at, body).map_err(Error::Invalid)?;
            // The header may carry several signatures (`v1,a v1,b`).
            if signatures
                .split_whitespace()
                .any(|given| same_in_constant_time(given.as_bytes(), expected.as_bytes()))
            {
                return Ok(());
            }
        }
        reject(Rejection::NoMatchingSignature)
    }
}

/// A secret that signs: refused at construction rather than at the first
/// webhook.
fn checked(secret: &str) -> Result<String> {
    outbound::sign(secret, "", 0, "")
        .map(|_| secret.to_owned())
        .map_err(Error::Invalid)
}

/// Compares without stopping at the first difference, so the time taken
/// says nothing about how much of a forged signature was right.
fn same_in_constant_time(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
