//! The workspace's binaries as child processes: found beside the running
//! executable, started with a clean environment, their stdout read line by
//! line, and killed when dropped, even when the test panics.

use std::{
    fs::File,
    io::{BufRead, BufReader, Read},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::{Arc, Condvar, Mutex},
    time::{Duration, Instant},
};

use crate::wait::POLL;

/// A binary of this workspace (`api`, `worker`), built beside the running
/// executable: the bench and the soak run from `target/<profile>/`, a test
/// binary from `target/<profile>/deps/`.
pub fn binary(name: &str) -> std::io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    let path = dir.join(name);
    if !path.exists() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!(
                "{} is missing: build the workspace's binaries first \
                 (scripts/test, scripts/bench and scripts/soak do)",
                path.display()
            ),
        ));
    }
    Ok(path)
}

/// The commit of the release before this one, whose binaries the
/// rolling-upgrade test runs beside this build's.
pub const PREVIOUS_RELEASE: &str = include_str!("../../scripts/previous-release.commit");

/// A binary (`api`, `worker`) of [`PREVIOUS_RELEASE`], which
/// `scripts/previous-release` builds (`scripts/test` runs it).
pub fn previous_release_binary(name: &str) -> std::io::Result<PathBuf> {
    let commit = PREVIOUS_RELEASE.trim();
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/previous-release")
        .join(commit)
        .join(name);
    if !path.exists() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!(
                "{} is missing: run scripts/previous-release (scripts/test does)",
                path.display()
            ),
        ));
    }
    Ok(path)
}

/// Peak resident memory of a process (`VmHWM`), in bytes; `None` once it
/// is gone.
pub fn peak_rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?;
    let kib: u64 = line.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

/// Peak resident memory of a process (`VmHWM`), in MiB.
pub fn peak_rss_mib(pid: u32) -> Option<f64> {
    peak_rss_bytes(pid).map(|bytes| bytes as f64 / (1024.0 * 1024.0))
}

/// A command with only `PATH` from this process's environment, then `env`.
fn command(path: &Path, env: &[(String, String)]) -> Command {
    let mut command = Command::new(path);
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .stdin(Stdio::null());
    for (k, v) in env {
        command.env(k, v);
    }
    command
}

/// A process that ran to its exit, and what it printed.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `path` with `args` and `env` to its exit, killing it after `within`.
pub fn run_to_exit(
    path: &Path,
    args: &[&str],
    env: &[(String, String)],
    within: Duration,
) -> Finished {
    let mut child = command(path, env)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", path.display()));
    let read_all = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = read_all(Box::new(child.stdout.take().expect("stdout")));
    let stderr = read_all(Box::new(child.stderr.take().expect("stderr")));
    let status = match wait_for_exit(&mut child, within) {
        Some(status) => status,
        None => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{} {args:?} still running after {within:?}", path.display());
        }
    };
    Finished {
        status,
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    }
}

fn wait_for_exit(child: &mut Child, within: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(POLL);
    }
}

/// Where a process's stderr goes.
#[derive(Debug)]
pub enum Stderr {
    /// Read line by line like its stdout (see [`Process::wait_for_line`])
    /// and echoed to this process's stderr, where a test's output shows it.
    Echo,
    /// A log file.
    File(File),
}

/// Every line a process printed (stdout, and stderr when echoed), kept for
/// the test to wait on.
#[derive(Default)]
struct Lines {
    seen: Mutex<Seen>,
    added: Condvar,
}

#[derive(Default)]
struct Seen {
    lines: Vec<String>,
    /// Readers still open (stdout, and stderr when read).
    open: usize,
}

impl Lines {
    fn read(self: &Arc<Self>, pipe: impl Read + Send + 'static, echo: bool) {
        self.lock().open += 1;
        let lines = self.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if echo {
                    eprintln!("{line}");
                }
                lines.lock().lines.push(line);
                lines.added.notify_all();
            }
            lines.lock().open -= 1;
            lines.added.notify_all();
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A child process, killed when dropped. Its stdout lines (and its stderr
/// lines, unless they go to a file) are kept.
pub struct Process {
    /// In a mutex so that a shared `&Api` can ask whether its process
    /// exited; shared so that the test's environment can stop a process
    /// that outlives it ([`Process::survivor`]).
    child: Arc<Mutex<Child>>,
    lines: Arc<Lines>,
    /// Lines before this one were looked at by `wait_for_line*`.
    next_line: Mutex<usize>,
}

impl Process {
    /// Starts `path` with only `PATH` and `env` in its environment.
    pub fn spawn(path: &Path, env: &[(String, String)], stderr: Stderr) -> Self {
        Self::spawn_with_args(path, &[], env, stderr)
    }

    /// [`Process::spawn`] with arguments (an interpreter and its script).
    pub fn spawn_with_args(
        path: &Path,
        args: &[&str],
        env: &[(String, String)],
        stderr: Stderr,
    ) -> Self {
        let mut command = command(path, env);
        command.args(args);
        let echo = matches!(stderr, Stderr::Echo);
        command.stdout(Stdio::piped()).stderr(match stderr {
            Stderr::Echo => Stdio::piped(),
            Stderr::File(file) => Stdio::from(file),
        });
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", path.display()));
        let lines = Arc::new(Lines::default());
        lines.read(child.stdout.take().expect("stdout"), false);
        if echo {
            lines.read(child.stderr.take().expect("stderr"), true);
        }
        Process {
            child: Arc::new(Mutex::new(child)),
            lines,
            next_line: Mutex::new(0),
        }
    }

    /// The next line that starts with `starts_with`, within 60 s.
    pub fn wait_for_line(&self, starts_with: &str) -> String {
        self.wait_for_line_where(starts_with, |line| line.starts_with(starts_with))
    }

    /// The next line that holds `text` anywhere (a log line), within 60 s.
    pub fn wait_for_line_containing(&self, text: &str) -> String {
        self.wait_for_line_where(text, |line| line.contains(text))
    }

    /// The first line the process printed that starts with `starts_with`,
    /// waiting for it up to 60 s; it may have been looked at before.
    pub fn first_line(&self, starts_with: &str) -> String {
        let mut from_start = 0;
        self.find_line(&mut from_start, starts_with, |line| {
            line.starts_with(starts_with)
        })
    }

    fn wait_for_line_where(&self, what: &str, wanted: impl Fn(&str) -> bool) -> String {
        let mut next = self.next_line.lock().unwrap_or_else(|e| e.into_inner());
        self.find_line(&mut next, what, wanted)
    }

    /// The first line from `next` on that is `wanted`; `next` moves past it.
    fn find_line(&self, next: &mut usize, what: &str, wanted: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut seen = self.lines.lock();
        loop {
            while *next < seen.lines.len() {
                let line = &seen.lines[*next];
                *next += 1;
                if wanted(line) {
                    return line.clone();
                }
            }
            let last = seen.lines.len().saturating_sub(5);
            if seen.open == 0 {
                panic!(
                    "the process exited before printing {what:?}; its last lines: {:?}",
                    &seen.lines[last..]
                );
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                panic!(
                    "no line with {what:?} within 60 s; the last lines: {:?}",
                    &seen.lines[last..]
                );
            }
            seen = self
                .lines
                .added
                .wait_timeout(seen, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// How many of the lines printed so far hold `text`.
    pub fn count_lines_containing(&self, text: &str) -> usize {
        let seen = self.lines.lock();
        seen.lines.iter().filter(|line| line.contains(text)).count()
    }

    /// Waits (up to 60 s) until `n` of the lines printed so far hold
    /// `text` (a log line the process repeats: a retry, a failure).
    pub async fn wait_for_lines_containing(&self, text: &str, n: usize) {
        crate::wait::until_ok(
            &format!("{n} lines with {text:?}"),
            Duration::from_secs(60),
            async || match self.count_lines_containing(text) {
                seen if seen >= n => Ok(()),
                seen => Err(seen),
            },
        )
        .await;
    }

    fn child(&self) -> std::sync::MutexGuard<'_, Child> {
        self.child.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A handle that reaches the process while this `Process` lives: the
    /// owner of the resources it uses can kill it before removing them,
    /// whatever order the two are dropped in.
    pub fn survivor(&self) -> Survivor {
        Survivor(Arc::downgrade(&self.child))
    }

    pub fn pid(&self) -> u32 {
        self.child().id()
    }

    /// The most memory the process has held at once since it started
    /// (`VmHWM`, its peak resident set), in bytes.
    pub fn peak_rss_bytes(&self) -> u64 {
        peak_rss_bytes(self.pid()).expect("the process's VmHWM")
    }

    /// Sends a signal (`-STOP`, `-CONT`, `-TERM`) with `kill`.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.pid().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {signal} {}", self.pid());
    }

    /// SIGKILL: the process dies without any cleanup.
    pub fn kill_hard(&mut self) {
        kill_and_reap(&self.child);
    }

    /// SIGTERM, then waits (up to 30 s) for the exit status.
    pub fn terminate(&mut self) -> Option<ExitStatus> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        wait_for_exit(&mut self.child(), Duration::from_secs(30))
    }

    /// Waits (up to 30 s) for the process to exit by itself.
    pub fn wait_exit(&mut self) -> ExitStatus {
        wait_for_exit(&mut self.child(), Duration::from_secs(30))
            .expect("the process did not exit within 30 s")
    }

    /// The exit status, if the process has exited.
    pub fn exited(&self) -> Option<ExitStatus> {
        self.child().try_wait().ok().flatten()
    }

    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.exited()
    }
}

/// A [`Process`] seen from elsewhere, without keeping it alive.
pub struct Survivor(std::sync::Weak<Mutex<Child>>);

impl Survivor {
    /// SIGKILL and wait, if the process's `Process` is still held.
    pub fn kill(&self) {
        if let Some(child) = self.0.upgrade() {
            kill_and_reap(&child);
        }
    }
}

/// SIGKILL, then waits for the exit (a no-op for a child already reaped).
fn kill_and_reap(child: &Mutex<Child>) {
    let mut child = child.lock().unwrap_or_else(|e| e.into_inner());
    let _ = child.kill();
    let _ = child.wait();
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill_hard();
    }
}
