//! The served OpenAPI document as standard tools see it: a validator
//! (openapi-spec-validator) accepts it, a generator (openapi-python-client)
//! makes a client from it without a warning, and that client does a round
//! trip against the running service (`api/tests/openapi/roundtrip.py`).
//!
//! The tools come from PyPI into a virtualenv under the target dir, made
//! once and reused while `api/tests/openapi/requirements.txt` is unchanged.
//! Without `python3` (3.10 or newer, with `venv`) or PyPI this test fails
//! and says so; it is never skipped.

use std::{fs, path::PathBuf, process::Command};

use reqwest::StatusCode;
use testkit::tools::{self, run};

use crate::common::{Api, Backend, KEY_A, TestEnv};

const REQUIREMENTS: &str = include_str!("../openapi/requirements.txt");
const ROUNDTRIP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/openapi/roundtrip.py");

/// The virtualenv with the tools, made on first use.
fn tools_venv() -> PathBuf {
    tools::installed("openapi-venv", REQUIREMENTS, |venv| {
        run(
            "making a virtualenv (this test needs python3 with venv, 3.10 or newer)",
            Command::new("python3").arg("-m").arg("venv").arg(venv),
        );
        let requirements = venv.join("receipt-requirements.txt");
        fs::write(&requirements, REQUIREMENTS).expect("write the requirements");
        run(
            "installing openapi-spec-validator and openapi-python-client from PyPI",
            Command::new(venv.join("bin/pip"))
                .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
                .arg(&requirements),
        );
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standard_tools_accept_the_openapi_document_and_its_generated_client_round_trips() {
    // Arrange: the tools, and a running service with the diagnostic kind.
    let venv = tools_venv();
    let bin = venv.join("bin");
    let env = TestEnv::new(Backend::Sqlite).await;
    let api = env.start_embedded().await;
    let reply = Api::read(api.client.get(api.url("/openapi.json"))).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let work = tempfile::tempdir().expect("temp dir");
    let keyless = work.path().join("openapi-keyless.json");
    fs::write(&keyless, &reply.text).expect("write the document");
    // A kind the tenant registers, with a reference of its own, joins the
    // document its key reads; the generated client is made from that one.
    let registered = api
        .send(
            reqwest::Method::PUT,
            "/v1/kinds/sales-export",
            Some(&serde_json::json!({
                "about": "The month's sales",
                "params_schema": {
                    "type": "object",
                    "$defs": {"month": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}$"}},
                    "properties": {"month": {"$ref": "#/$defs/month"}},
                    "required": ["month"],
                    "additionalProperties": false
                },
                "timeout_secs": 60,
                "max_attempts": 2,
                "result_media_types": ["text/csv"]
            })),
        )
        .await;
    assert_eq!(
        registered.status,
        StatusCode::CREATED,
        "{}",
        registered.text
    );
    let reply = api.get("/openapi.json").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert!(reply.text.contains("Registered.sales-export"));
    let document = work.path().join("openapi.json");
    fs::write(&document, &reply.text).expect("write the document");
    // The generator formats its output with ruff, installed beside it.
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );

    // Act and assert: the validator accepts both documents ...
    run(
        "openapi-spec-validator on /openapi.json",
        Command::new(bin.join("openapi-spec-validator")).arg(&keyless),
    );
    run(
        "openapi-spec-validator on /openapi.json read with a key",
        Command::new(bin.join("openapi-spec-validator")).arg(&document),
    );

    // ... the generator makes a client from it without a warning ...
    let package = work.path().join("receipt_client");
    run(
        "openapi-python-client generate",
        Command::new(bin.join("openapi-python-client"))
            .args(["generate", "--meta", "none", "--fail-on-warning", "--path"])
            .arg(&document)
            .arg("--output-path")
            .arg(&package)
            .env("PATH", &path),
    );

    // ... and that client submits, long-polls, fetches the result, and
    // reads the 404's and the 422's problems.
    let output = run(
        "the generated client's round trip (api/tests/openapi/roundtrip.py)",
        Command::new(bin.join("python"))
            .arg(ROUNDTRIP)
            .arg(&api.base)
            .arg(KEY_A)
            .env("PYTHONPATH", work.path()),
    );
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(said.contains("round trip ok"), "{said}");
}
