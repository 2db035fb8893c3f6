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
    process::Command,
};

use testkit::{
    Api, Backend, KEY_A, TestEnv,
    tools::{self, run},
};

const PACKAGE: &str = include_str!("typescript/package.json");
const LOCK: &str = include_str!("typescript/package-lock.json");
const SOURCES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/typescript");

/// The directory with the pinned packages installed, made on first use.
fn tools() -> PathBuf {
    tools::installed("typescript-client", LOCK, |dir| {
        fs::write(dir.join("package.json"), PACKAGE).expect("package.json");
        fs::write(dir.join("package-lock.json"), LOCK).expect("package-lock.json");
        run(
            "installing openapi-typescript, openapi-fetch and typescript with npm ci (this test needs node and npm)",
            Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
                .current_dir(dir),
        );
    })
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
