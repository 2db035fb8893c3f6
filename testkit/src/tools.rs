//! Tools a test installs from a package registry (PyPI, npm) and runs:
//! installed once into the target dir from a pinned list, again only when
//! the list changes, and run with their output shown when they fail.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Output},
};

/// Runs a tool to its end; panics with `what` and everything it printed
/// if it cannot start or fails.
pub fn run(what: &str, command: &mut Command) -> Output {
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

/// The directory `target/<name>`, made by `install` (given the directory,
/// empty) on first use and again whenever `pinned` (the list of what it
/// installs: a requirements file, a package lock) differs from the one it
/// was made from. A marker holding `pinned` is written last, so a
/// half-made directory (an interrupted install) is made again.
pub fn installed(name: &str, pinned: &str, install: impl FnOnce(&Path)) -> PathBuf {
    // target/debug/api -> target
    let target = crate::binary("api")
        .unwrap_or_else(|e| panic!("{e}"))
        .parent()
        .and_then(Path::parent)
        .expect("the target dir")
        .to_owned();
    let dir = target.join(name);
    let marker = dir.join("receipt-installed-from");
    // One installer at a time, should two test processes get here together.
    let lock = fs::File::create(target.join(format!("{name}.lock"))).expect("the lock file");
    lock.lock().expect("lock the tools dir");
    if fs::read_to_string(&marker).is_ok_and(|made_from| made_from == pinned) {
        return dir;
    }
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("the tools dir");
    install(&dir);
    fs::write(&marker, pinned).expect("the marker");
    dir
}
