//! Migration versions are numbered `YYYYMMDDNNNNNN`, by the day a migration
//! is written, and only grow: a migration added later never sorts before
//! one added earlier, and none is numbered by a day still to come. (A
//! migration numbered by a later day would make the next one, written
//! today with a true date, sort before migrations already applied.)
//!
//! The order migrations were added in is git's: each file's commit, with
//! renames counted as adds.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    process::Command,
};

use chrono::{NaiveDate, Utc};

const DIALECTS: [&str; 2] = ["postgres", "sqlite"];

fn migrations_dir(dialect: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../migrations")
        .join(dialect)
}

/// Each migration file of a dialect's folder: its name and version.
fn migrations(dialect: &str) -> Vec<(String, i64)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(migrations_dir(dialect)).expect("the migrations folder") {
        let name = entry
            .expect("an entry")
            .file_name()
            .into_string()
            .expect("a UTF-8 name");
        let (version, rest) = name
            .split_once('_')
            .unwrap_or_else(|| panic!("{dialect}/{name}: not VERSION_description.sql"));
        assert!(
            version.len() == 14 && version.bytes().all(|b| b.is_ascii_digit()),
            "{dialect}/{name}: a version is 14 digits, YYYYMMDD then a sequence number"
        );
        assert!(
            rest.ends_with(".sql"),
            "{dialect}/{name}: a migration is a .sql file"
        );
        found.push((name.clone(), version.parse().expect("digits")));
    }
    found.sort_by_key(|(_, version)| *version);
    found
}

fn day_of(version: i64) -> Option<NaiveDate> {
    NaiveDate::parse_from_str(&(version / 1_000_000).to_string(), "%Y%m%d").ok()
}

#[test]
fn no_migration_is_numbered_by_a_day_still_to_come() {
    let today = Utc::now().date_naive();
    for dialect in DIALECTS {
        for (name, version) in migrations(dialect) {
            let day = day_of(version).unwrap_or_else(|| {
                panic!("{dialect}/{name}: its version does not start with a date")
            });
            assert!(
                day <= today,
                "{dialect}/{name} is numbered by {day}, after today ({today})"
            );
        }
    }
}

#[test]
fn versions_are_unique_and_a_migration_of_both_databases_has_one_number() {
    let mut numbered: HashMap<String, i64> = HashMap::new();
    for dialect in DIALECTS {
        let found = migrations(dialect);
        for pair in found.windows(2) {
            assert_ne!(
                pair[0].1, pair[1].1,
                "{dialect}: {} and {} share a version",
                pair[0].0, pair[1].0
            );
        }
        for (name, version) in found {
            let description = name.split_once('_').expect("checked").1.to_owned();
            if let Some(other) = numbered.insert(description.clone(), version) {
                assert_eq!(
                    other, version,
                    "{description} is numbered differently on each database"
                );
            }
        }
    }
}

/// Each migration file in the tree, by the index of the commit that last
/// added it (oldest first).
fn added_in_order(dialect: &str) -> HashMap<String, usize> {
    let folder = format!("migrations/{dialect}/");
    let output = Command::new("git")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "log",
            "--reverse",
            "--no-renames",
            "--diff-filter=A",
            "--format=tformat:@@commit",
            "--name-only",
            "--",
        ])
        .arg(format!("../{folder}"))
        .output()
        .expect("git runs (the tests run in a clone of the repository)");
    assert!(
        output.status.success(),
        "git log: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut added = HashMap::new();
    let mut commit = 0;
    for line in String::from_utf8(output.stdout).expect("UTF-8").lines() {
        if line == "@@commit" {
            commit += 1;
        } else if let Some(name) = line.strip_prefix(&folder) {
            added.insert(name.to_owned(), commit);
        }
    }
    added
}

/// Added after a migration numbered after them, before this check
/// existed; numbered as they are since, so they stay.
const ADDED_OUT_OF_ORDER_BEFORE_THE_CHECK: [&str; 2] = [
    "20261201000001_api_key_lifecycle.sql",
    "20261201000002_retention.sql",
];

#[test]
fn a_migration_added_later_is_numbered_after_every_one_added_before() {
    for dialect in DIALECTS {
        let added = added_in_order(dialect);
        // Files not yet committed were added last.
        let last = added.values().max().copied().unwrap_or(0) + 1;
        let found: Vec<(usize, i64, String)> = migrations(dialect)
            .into_iter()
            .map(|(name, version)| (added.get(&name).copied().unwrap_or(last), version, name))
            .collect();
        for (commit, version, name) in &found {
            if ADDED_OUT_OF_ORDER_BEFORE_THE_CHECK.contains(&name.as_str()) {
                continue;
            }
            let before = found
                .iter()
                .filter(|(other_commit, _, _)| other_commit < commit)
                .max_by_key(|(_, other_version, _)| *other_version);
            if let Some((_, other_version, other_name)) = before {
                assert!(
                    version > other_version,
                    "{dialect}/{name} was added after {dialect}/{other_name} but sorts before it"
                );
            }
        }
    }
}

/// The numbers nine migrations once had, before they were renumbered: the
/// store moves a record of any of them to the new number when it migrates
/// (`store/src/postgres/mod.rs`, `store/src/sqlite/mod.rs`), so a migration
/// numbered so now would have its record moved away, and run again.
const NUMBERS_RENUMBERED_AWAY: [i64; 9] = [
    20261206000090,
    20261207000100,
    20261208000110,
    20261208000120,
    20261208000130,
    20261208000140,
    20261209000150,
    20261210000160,
    20261211000170,
];

#[test]
fn no_migration_takes_a_number_that_was_renumbered_away() {
    for dialect in DIALECTS {
        for (name, version) in migrations(dialect) {
            assert!(
                !NUMBERS_RENUMBERED_AWAY.contains(&version),
                "{dialect}/{name}: {version} was a migration's number before the renumbering, \
                 and a record of it is moved to another number at every migrate"
            );
        }
    }
}
