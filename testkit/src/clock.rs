//! A process whose clock is wrong: Debian's `libfaketime`, preloaded into
//! one spawned binary, moves its wall clock by a fixed offset and leaves
//! its monotonic clock alone, as on a host whose clock is off or was
//! stepped. `scripts/test` installs the package when it is missing.

use std::path::PathBuf;

/// Where Debian's `libfaketime` package puts the library, for the
/// machine's architecture.
fn library() -> PathBuf {
    let path = PathBuf::from(format!(
        "/usr/lib/{}-linux-gnu/faketime/libfaketime.so.1",
        std::env::consts::ARCH
    ));
    assert!(
        path.exists(),
        "{} is missing: install Debian's libfaketime (scripts/test does)",
        path.display()
    );
    path
}

/// The settings that give a process a wall clock `offset_s` seconds ahead
/// (negative: behind) of the host's.
pub fn skewed_by(offset_s: i64) -> Vec<(String, String)> {
    vec![
        ("LD_PRELOAD".into(), library().display().to_string()),
        ("FAKETIME".into(), format!("{offset_s:+}")),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
    ]
}
