//! The worker SDKs of other languages (`sdk/`), each tested with its own
//! ecosystem's tools against the real `api` binary: their suites start the
//! service themselves (the embedded default, a folder each), so each runs
//! here as one test, beside the rest. Without `python3` (3.10 or newer,
//! with `venv`) and PyPI, or `node` and `npm` and the npm registry, these
//! tests fail and say so; they are never skipped.

use std::{path::Path, process::Command};

use testkit::tools::{self, run};

const SDK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../sdk");

/// The api binary the SDKs' tests start.
fn api_binary() -> String {
    testkit::binary("api")
        .unwrap_or_else(|e| panic!("{e}"))
        .display()
        .to_string()
}

#[test]
fn the_python_sdk_passes_its_tests_against_the_service() {
    let requirements = include_str!("../../sdk/python/requirements-test.txt");
    // A venv of the pinned test tools, made once; the package itself is
    // installed again by each run, from the tree.
    let venv = tools::installed("python-sdk-venv", requirements, |dir| {
        run(
            "making a virtualenv (the Python SDK's tests need python3 with venv, 3.10 or newer)",
            Command::new("python3").arg("-m").arg("venv").arg(dir),
        );
    });
    run(
        "the Python SDK's tests (sdk/python/run-tests.sh)",
        Command::new(Path::new(SDK).join("python/run-tests.sh"))
            .args(["-q", "-p", "no:cacheprovider"])
            .env("RECEIPT_SDK_VENV", &venv)
            .env("RECEIPT_API_BIN", api_binary()),
    );
}

#[test]
fn the_typescript_sdk_passes_its_tests_against_the_service() {
    run(
        "the TypeScript SDK's tests (sdk/typescript/run-tests.sh; it needs node and npm)",
        Command::new(Path::new(SDK).join("typescript/run-tests.sh"))
            .env("RECEIPT_API_BIN", api_binary()),
    );
}
