//! What the integration tests, the bench and the soak share to exercise
//! Receipt from outside: Postgres, PgBouncer, Redis and Sentinel servers
//! of a run's own on free ports, finding the workspace's binaries, and
//! reading a process's memory.

pub mod servers;

use std::path::PathBuf;

/// A binary of this workspace, built beside the running one; `script` is
/// the script that builds them, named in the error when one is missing.
pub fn sibling_binary(name: &str, script: &str) -> std::io::Result<PathBuf> {
    let path = std::env::current_exe()?.with_file_name(name);
    if !path.exists() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!(
                "{} is missing: run {script} (it builds the release binaries)",
                path.display()
            ),
        ));
    }
    Ok(path)
}

/// Peak resident memory of a process (`VmHWM`), in MiB.
pub fn peak_rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}
