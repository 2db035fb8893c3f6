//! The client's webhook check against the official `standardwebhooks`
//! crate: what one signs the other accepts, and what one refuses (a
//! changed body, an old timestamp, a secret it does not hold) the other
//! refuses too; and both against the service's own deliveries, across a
//! rotation of the secret.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use receipt_client::{Client, Error, NewWebhook, Rejection, Sleep, WebhookVerifier};
use reqwest::header::{HeaderMap, HeaderValue};
use testkit::{Backend, KEY_A, Record, TestEnv, headers_of, serve_on_loopback};

const NEW_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const OLD_SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("time")
        .as_secs() as i64
}

/// The headers the official library's signature goes out with.
fn signed_by_official(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> HeaderMap {
    let signature = standardwebhooks::Webhook::new(secret)
        .expect("secret")
        .sign(id, timestamp, body)
        .expect("sign");
    let mut headers = HeaderMap::new();
    headers.insert("webhook-id", HeaderValue::from_str(id).expect("id"));
    headers.insert("webhook-timestamp", HeaderValue::from(timestamp));
    headers.insert(
        "webhook-signature",
        HeaderValue::from_str(&signature).expect("signature"),
    );
    headers
}

fn official_accepts(secret: &str, headers: &HeaderMap, body: &[u8]) -> bool {
    standardwebhooks::Webhook::new(secret)
        .expect("secret")
        .verify(body, headers)
        .is_ok()
}

fn rejection(result: receipt_client::Result<()>) -> Option<Rejection> {
    match result {
        Ok(()) => None,
        Err(Error::WebhookRejected(why)) => Some(why),
        Err(other) => panic!("not a rejection: {other}"),
    }
}

#[test]
fn what_the_official_library_signs_verifies_and_changes_to_it_do_not() {
    let verifier = WebhookVerifier::new(NEW_SECRET).expect("verifier");
    let body = br#"{"type":"job.succeeded","timestamp":"2026-10-03T09:15:00.123Z","data":{"job_id":"job_1"}}"#;
    let headers = signed_by_official(NEW_SECRET, "evt_1", now(), body);

    let accepted = verifier.verify(&headers, body);
    let mut changed = body.to_vec();
    changed[10] = b'x';
    let changed_body = verifier.verify(&headers, &changed);

    assert!(official_accepts(NEW_SECRET, &headers, body));
    assert!(accepted.is_ok(), "{accepted:?}");
    assert!(!official_accepts(NEW_SECRET, &headers, &changed));
    assert_eq!(
        rejection(changed_body),
        Some(Rejection::NoMatchingSignature)
    );
}

#[test]
fn a_timestamp_outside_the_tolerance_is_refused_as_the_official_library_refuses_it() {
    let verifier = WebhookVerifier::new(NEW_SECRET)
        .expect("verifier")
        .tolerance(Duration::from_secs(300));
    let body = b"{}";
    let stale = signed_by_official(NEW_SECRET, "evt_2", now() - 600, body);
    let ahead = signed_by_official(NEW_SECRET, "evt_3", now() + 600, body);
    let recent = signed_by_official(NEW_SECRET, "evt_4", now() - 60, body);

    assert!(!official_accepts(NEW_SECRET, &stale, body));
    assert!(!official_accepts(NEW_SECRET, &ahead, body));
    assert!(official_accepts(NEW_SECRET, &recent, body));
    assert_eq!(
        rejection(verifier.verify(&stale, body)),
        Some(Rejection::OutsideTolerance)
    );
    assert_eq!(
        rejection(verifier.verify(&ahead, body)),
        Some(Rejection::OutsideTolerance)
    );
    assert_eq!(rejection(verifier.verify(&recent, body)), None);
}

#[test]
fn during_a_rotation_both_secrets_verify_and_afterwards_only_the_new_one() {
    let rotating = WebhookVerifier::new(NEW_SECRET)
        .expect("verifier")
        .also_accept(OLD_SECRET)
        .expect("old secret");
    let rotated = WebhookVerifier::new(NEW_SECRET).expect("verifier");
    let body = br#"{"type":"job.failed"}"#;
    let by_old = signed_by_official(OLD_SECRET, "evt_5", now(), body);
    let by_new = signed_by_official(NEW_SECRET, "evt_6", now(), body);

    assert_eq!(rejection(rotating.verify(&by_old, body)), None);
    assert_eq!(rejection(rotating.verify(&by_new, body)), None);
    assert_eq!(
        rejection(rotated.verify(&by_old, body)),
        Some(Rejection::NoMatchingSignature)
    );
    assert_eq!(rejection(rotated.verify(&by_new, body)), None);
}

#[test]
fn a_header_with_several_signatures_verifies_when_one_matches() {
    let verifier = WebhookVerifier::new(NEW_SECRET).expect("verifier");
    let body = b"{\"n\":1}";
    let mut headers = signed_by_official(NEW_SECRET, "evt_7", now(), body);
    let good = headers["webhook-signature"]
        .to_str()
        .expect("text")
        .to_owned();
    let forged = "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    headers.insert(
        "webhook-signature",
        HeaderValue::from_str(&format!("{forged} {good}")).expect("header"),
    );

    assert!(official_accepts(NEW_SECRET, &headers, body));
    assert_eq!(rejection(verifier.verify(&headers, body)), None);
    headers.insert("webhook-signature", HeaderValue::from_static(forged));
    assert!(!official_accepts(NEW_SECRET, &headers, body));
    assert_eq!(
        rejection(verifier.verify(&headers, body)),
        Some(Rejection::NoMatchingSignature)
    );
}

#[test]
fn missing_headers_and_bad_secrets_are_named() {
    let verifier = WebhookVerifier::new(NEW_SECRET).expect("verifier");
    let mut headers = signed_by_official(NEW_SECRET, "evt_8", now(), b"{}");
    headers.remove("webhook-timestamp");

    assert_eq!(
        rejection(verifier.verify(&headers, b"{}")),
        Some(Rejection::MissingHeader("webhook-timestamp"))
    );
    assert!(matches!(
        WebhookVerifier::new("whsec_not base64!"),
        Err(Error::Invalid(_))
    ));
}

type Delivered = (HeaderMap, Vec<u8>);

async fn receive(
    record: actix_web::web::Data<Record<Delivered>>,
    request: actix_web::HttpRequest,
    body: actix_web::web::Bytes,
) -> actix_web::HttpResponse {
    record.push((headers_of(&request), body.to_vec()));
    actix_web::HttpResponse::Ok().finish()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_services_deliveries_verify_and_during_a_rotation_both_secrets_do() {
    // Arrange: the service, a receiver on loopback, and a webhook to it.
    let env = TestEnv::new(Backend::Sqlite).await;
    let api = env.start_embedded_with_local_receivers().await;
    let client = Client::new(&api.base, KEY_A).expect("client");
    let record = actix_web::web::Data::new(Record::<Delivered>::default());
    let (addr, _server) = serve_on_loopback(record.clone(), receive);
    let webhook = client
        .register_webhook(&NewWebhook::to(format!("http://{addr}/hooks")))
        .await
        .expect("register");
    let first_secret = webhook.secret.expect("the secret");

    // Act: a job's event before a rotation, and one after it.
    let job = client.submit(Sleep::default()).await.expect("submit");
    let before = record.wait_for(1, Duration::from_secs(30)).await;
    let rotated = client
        .rotate_webhook_secret(&webhook.id)
        .await
        .expect("rotate");
    let second_secret = rotated.secret.expect("the new secret");
    client.submit(Sleep::default()).await.expect("submit");
    let after = record.wait_for(2, Duration::from_secs(30)).await;

    // Assert: each delivery verifies with its secret, as the official
    // library says; during the rotation a verifier holding both accepts
    // both, and one holding only the old secret refuses the new.
    let (headers, body) = &before[0];
    assert!(String::from_utf8_lossy(body).contains(&job.job_id));
    assert!(official_accepts(&first_secret, headers, body));
    let old_only = WebhookVerifier::new(&first_secret).expect("verifier");
    assert_eq!(rejection(old_only.verify(headers, body)), None);
    let (headers, body) = &after[1];
    assert!(official_accepts(&second_secret, headers, body));
    assert_eq!(
        rejection(old_only.verify(headers, body)),
        Some(Rejection::NoMatchingSignature)
    );
    let both = WebhookVerifier::new(&second_secret)
        .expect("verifier")
        .also_accept(&first_secret)
        .expect("old secret");
    for (headers, body) in &after {
        assert_eq!(rejection(both.verify(headers, body)), None);
    }
}
