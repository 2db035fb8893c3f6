//! The TypeScript client a user generates from the served OpenAPI
//! document: `openapi-typescript` makes its types, `tsc --strict` compiles
//! a round trip written with `openapi-fetch` against them
//! (`client/tests/typescript/roundtrip.ts`), and Node runs it against the
//! service.
//!
//! The npm packages, pinned in `client/tests/typescript/package-lock.json`,
//! are installed with `npm ci` into the target dir, once, and again when
//! the lock changes. Without `node` and `npm` (which `scripts/test`
//! installs from Debian's packages) or the npm registry this test fails
//! and says so; it is never skipped.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Output},
};

use testkit::{Api, Backend, KEY_A, TestEnv};

const PACKAGE: &str = include_str!("typescript/package.json");
const LOCK: &str = include_str!("typescript/package-lock.json");
const SOURCES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/typescript");

/// Runs a command to its end; panics with `what` and its output if it
/// cannot start or fails.
fn run(what: &str, command: &mut Command) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("{what}: could not run {command:?}: {error}"));
    assert!(
        output.status.success(),
        "{what} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// The directory with the pinned packages installed, made on first use. A
/// marker holding the lock it was made from is written last, so a half-made
/// install (an interrupted one) is made again.
fn tools() -> PathBuf {
    // target/debug/api -> target/typescript-client
    let target = testkit::binary("api")
        .expect("the api binary")
        .parent()
        .and_then(Path::parent)
        .expect("the target dir")
        .to_owned();
    let dir = target.join("typescript-client");
    let marker = dir.join("receipt-package-lock.json");
    // One installer at a time, should two test processes get here together.
    let lock = fs::File::create(target.join("typescript-client.lock")).expect("the lock file");
    lock.lock().expect("lock the tools dir");
    if fs::read_to_string(&marker).is_ok_and(|made_from| made_from == LOCK) {
        return dir;
    }
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("the tools dir");
    fs::write(dir.join("package.json"), PACKAGE).expect("package.json");
    fs::write(dir.join("package-lock.json"), LOCK).expect("package-lock.json");
    run(
        "installing openapi-typescript, openapi-fetch and typescript with npm ci (this test needs node and npm)",
        Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir),
    );
    fs::write(&marker, LOCK).expect("the marker");
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typescript_client_generated_from_the_openapi_document_round_trips() {
    // Arrange: the tools, a running service, and a work dir that sees the
    // installed packages.
    let tools = tools();
    let bin = tools.join("node_modules/.bin");
    let env = TestEnv::new(Backend::Sqlite).await;
    let api = env.start_embedded().await;
    let document = Api::read(api.client.get(api.url("/openapi.json"))).await;
    assert_eq!(document.status.as_u16(), 200, "{}", document.text);
    let work = env.dir().join("typescript");
    fs::create_dir_all(&work).expect("work dir");
    std::os::unix::fs::symlink(tools.join("node_modules"), work.join("node_modules"))
        .expect("link node_modules");
    fs::write(work.join("openapi.json"), &document.text).expect("the document");
    for file in ["roundtrip.ts", "tsconfig.json", "package.json"] {
        fs::copy(Path::new(SOURCES).join(file), work.join(file)).expect("copy the sources");
    }

    // Act: generate the types, compile against them strictly, run.
    run(
        "openapi-typescript on /openapi.json",
        Command::new(bin.join("openapi-typescript"))
            // A member with a default may be left out of a request: not
            // required in the generated types.
            .args([
                "openapi.json",
                "--default-non-nullable=false",
                "--output",
                "schema.d.ts",
            ])
            .current_dir(&work),
    );
    run(
        "tsc --strict on roundtrip.ts",
        Command::new(bin.join("tsc"))
            .args(["--project", "tsconfig.json"])
            .current_dir(&work),
    );
    let output = run(
        "the generated client's round trip (client/tests/typescript/roundtrip.ts)",
        Command::new("node")
            .arg(work.join("out/roundtrip.js"))
            .arg(&api.base)
            .arg(KEY_A)
            .current_dir(&work),
    );

    // Assert: every check of the round trip passed.
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(said.contains("round trip ok"), "{said}");
}
