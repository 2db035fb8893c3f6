//! Named points where a test can stop a process or make a step fail, so
//! that a crash window (a process dying between two steps, an answer lost
//! after a commit) is reached every time rather than by luck. Built only
//! with the `failpoints` feature, which the integration tests turn on; a
//! release build has none, and every point compiles to nothing.
//!
//! A test arms points through the `FAILPOINTS` variable of the process it
//! starts (the `fail` crate's syntax: `name=action;name=action`, where
//! `return` takes the point's action below and `1*return` takes it once).
//! Each point names its action where it stands: [`crash_if_armed`], or a
//! step that fails when [`armed`] says so.

/// Arms the points named by `FAILPOINTS`, for the life of the process.
/// A no-op without the `failpoints` feature.
pub fn arm() {
    #[cfg(feature = "failpoints")]
    std::mem::forget(fail::FailScenario::setup());
}

/// Whether the point is armed (and, for a point armed `N*return`, takes
/// one of its N).
#[cfg_attr(not(feature = "failpoints"), allow(unused_variables))]
pub fn armed(point: &str) -> bool {
    fail::fail_point!(point, |_| true);
    false
}

/// The argument a point is armed with (`name=return(argument)`), when it
/// is armed; `None` when it is not, or armed without one.
#[cfg_attr(not(feature = "failpoints"), allow(unused_variables))]
pub fn argument(point: &str) -> Option<String> {
    fail::fail_point!(point, |argument| argument);
    None
}

/// When the point is armed with a path (`name=return(path)`), holds the
/// caller until a file exists there: a test sees the process stand at that
/// step for as long as it needs, and lets it go on when it is ready. On
/// reaching the step it writes `<path>.held`, so that a test can wait for
/// the step itself when nothing else shows it. `check` runs at every look,
/// and its error ends the hold.
pub async fn hold_until_file_exists<E>(
    point: &str,
    mut check: impl FnMut() -> Result<(), E>,
) -> Result<(), E> {
    if let Some(gate) = argument(point) {
        let _ = std::fs::write(format!("{gate}.held"), b"");
        while !std::path::Path::new(&gate).exists() {
            check()?;
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
    Ok(())
}

/// Ends the process at once when the point is armed, as a `SIGKILL` would:
/// no destructor, no flush, no answer sent.
pub fn crash_if_armed(point: &str) {
    if armed(point) {
        eprintln!("failpoint {point}: crashing");
        std::process::abort();
    }
}
