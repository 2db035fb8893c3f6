//! A small filesystem of a test's own (a tmpfs of a few MiB to a few
//! hundred), which the test fills to the last byte and frees again: a
//! database's volume running out of space. Mounting needs root, as the
//! test runs in CI; elsewhere the test fails saying so.

use std::{
    fs::File,
    io::{ErrorKind, Write},
    path::{Path, PathBuf},
    process::Command,
};

/// A tmpfs mounted on a temporary directory; unmounted when dropped.
pub struct SmallVolume {
    dir: tempfile::TempDir,
}

impl SmallVolume {
    /// A tmpfs of `mib` MiB, writable by every user (the `postgres` user
    /// among them).
    pub fn mount(mib: u64) -> SmallVolume {
        let dir = tempfile::tempdir().expect("temp dir");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={mib}m,mode=1777"))
            .arg("tmpfs")
            .arg(dir.path())
            .status()
            .expect("mount");
        assert!(
            status.success(),
            "mounting a tmpfs of {mib} MiB failed: this test needs root (CI runs as root)"
        );
        SmallVolume { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    fn filler(&self) -> PathBuf {
        self.path().join("filler")
    }

    /// Writes a file until the volume has no byte left; answers how many
    /// bytes it wrote.
    pub fn fill(&self) -> u64 {
        let mut file = File::create(self.filler()).expect("the filler file");
        let block = vec![0u8; 64 * 1024];
        let mut written = 0u64;
        let mut size = block.len();
        // Large blocks until one does not fit, then smaller, down to a byte.
        while size > 0 {
            match file.write(&block[..size]) {
                Ok(0) => size /= 2,
                Ok(n) => written += n as u64,
                Err(e) if e.kind() == ErrorKind::StorageFull => size /= 2,
                Err(e) => panic!("filling the volume: {e}"),
            }
        }
        written
    }

    /// Frees what [`SmallVolume::fill`] took.
    pub fn free(&self) {
        std::fs::remove_file(self.filler()).expect("the filler file");
    }
}

impl Drop for SmallVolume {
    fn drop(&mut self) {
        // Lazily: a process still holding a file on it (a server being
        // stopped) must not keep it mounted.
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}
