//! The workspace's crates depend on each other only downward, along the
//! edges `docs/architecture.md` draws: a crate that gains an edge it must
//! not have (a cycle, an upward import, the vocabulary reaching for the
//! store) fails here, before review.

use std::{
    collections::{BTreeMap, BTreeSet},
    process::Command,
};

use serde_json::Value;

/// Each crate's layer and the workspace crates it may depend on (normal,
/// dev and build dependencies alike). A dependency must also sit in a
/// lower layer, so the table itself cannot hide a cycle.
const ALLOWED: &[(&str, u8, &[&str])] = &[
    ("shared", 0, &[]),
    ("telemetry", 1, &["shared"]),
    ("outbound", 1, &["shared"]),
    ("store", 1, &["shared"]),
    ("reports", 2, &["shared", "store", "outbound"]),
    ("queue", 2, &["shared", "store"]),
    (
        "worker",
        3,
        &[
            "shared",
            "store",
            "reports",
            "outbound",
            "queue",
            "telemetry",
            "testkit",
        ],
    ),
    (
        "api",
        4,
        &[
            "shared",
            "store",
            "reports",
            "outbound",
            "queue",
            "worker",
            "telemetry",
            "testkit",
        ],
    ),
    // Tools that drive the binaries from outside: they talk HTTP and SQL,
    // and share no code with the service.
    ("testkit", 0, &[]),
    // The client speaks the API's vocabulary and checks signatures with
    // the service's own signing; its tests drive the binaries through
    // testkit.
    ("client", 2, &["shared", "outbound", "testkit"]),
    // The bench and the soak drive the service through the client, as
    // its users do.
    ("bench", 3, &["testkit", "client"]),
];

fn workspace_dependencies() -> BTreeMap<String, BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value = serde_json::from_slice(&output.stdout).expect("metadata is JSON");
    let packages = metadata["packages"].as_array().expect("packages");
    let members: BTreeSet<String> = packages
        .iter()
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect();
    packages
        .iter()
        .map(|package| {
            let name = package["name"].as_str().expect("name");
            let deps = package["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .filter_map(|d| d["name"].as_str())
                .filter(|d| members.contains(*d) && *d != name)
                .map(str::to_owned)
                .collect();
            (name.to_owned(), deps)
        })
        .collect()
}

#[test]
fn crates_depend_only_downward_along_the_allowed_edges() {
    let layers: BTreeMap<&str, (u8, &[&str])> = ALLOWED
        .iter()
        .map(|(name, layer, allowed)| (*name, (*layer, *allowed)))
        .collect();
    let mut wrong = Vec::new();
    for (name, deps) in workspace_dependencies() {
        let Some((layer, allowed)) = layers.get(name.as_str()) else {
            wrong.push(format!("{name}: a crate with no place in the table"));
            continue;
        };
        for dep in deps {
            let below = layers.get(dep.as_str()).is_some_and(|(l, _)| l < layer);
            if !allowed.contains(&dep.as_str()) || !below {
                wrong.push(format!("{name} -> {dep}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "edges the house does not allow: {wrong:?}"
    );
}

#[test]
fn the_table_allows_only_edges_to_lower_layers() {
    for (name, layer, allowed) in ALLOWED {
        for dep in *allowed {
            let (_, dep_layer, _) = ALLOWED
                .iter()
                .find(|(n, _, _)| n == dep)
                .unwrap_or_else(|| panic!("{dep} is not in the table"));
            assert!(dep_layer < layer, "{name} -> {dep} goes up or sideways");
        }
    }
}
