use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use super::JobFailure;
use store::{LeaseCheck, Store};

/// Progress is written at most this often, so a handler may report it per
/// row without a transaction per row; the first time once the attempt has
/// run this long, so a job that ends sooner writes none (its success sets
/// 1.0).
const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// What a running handler gets: who it runs for, its store, and the
/// checkpoint/progress calls. The worker's heartbeat sets the flags.
pub struct JobContext {
    pub store: Store,
    pub tenant_id: String,
    pub job_id: String,
    pub attempt: i64,
    pub settings: RunSettings,
    flags: ProgressSink,
    /// When progress was last written, or the attempt started.
    last_progress: Mutex<Instant>,
}

/// What of the process's settings a running kind may use.
#[derive(Debug, Clone)]
pub struct RunSettings {
    /// The backoff of retries inside an attempt (a saga's steps and
    /// compensations): `RETRY_BASE_DELAY` doubling to `RETRY_MAX_DELAY`.
    pub retry_base_delay: Duration,
    pub retry_max_delay: Duration,
    /// Calls to other systems (a filing endpoint): how long an answer may
    /// take (`WEBHOOK_TIMEOUT`), and whether private addresses may be
    /// called (`WEBHOOK_ALLOW_PRIVATE`), as for webhooks.
    pub http_timeout: Duration,
    pub allow_private_addresses: bool,
}

impl Default for RunSettings {
    fn default() -> Self {
        Self {
            retry_base_delay: Duration::from_secs(1),
            retry_max_delay: Duration::from_secs(300),
            http_timeout: Duration::from_secs(15),
            allow_private_addresses: false,
        }
    }
}

impl From<&shared::settings::Settings> for RunSettings {
    fn from(settings: &shared::settings::Settings) -> Self {
        Self {
            retry_base_delay: settings.retry_base_delay,
            retry_max_delay: settings.retry_max_delay,
            http_timeout: settings.webhook_timeout,
            allow_private_addresses: settings.webhook_allow_private,
        }
    }
}

/// The flags a heartbeat raises for its attempt.
#[derive(Clone, Default)]
pub struct ProgressSink {
    cancel_requested: Arc<AtomicBool>,
    superseded: Arc<AtomicBool>,
}

impl ProgressSink {
    pub fn observe(&self, check: LeaseCheck) {
        match check {
            LeaseCheck::Held { cancel_requested } => {
                if cancel_requested {
                    self.cancel_requested.store(true, Ordering::Relaxed);
                }
            }
            LeaseCheck::Lost => self.superseded.store(true, Ordering::Relaxed),
        }
    }
}

impl JobContext {
    pub fn new(
        store: Store,
        tenant_id: String,
        job_id: String,
        attempt: i64,
        flags: ProgressSink,
    ) -> Self {
        Self {
            store,
            tenant_id,
            job_id,
            attempt,
            settings: RunSettings::default(),
            flags,
            last_progress: Mutex::new(Instant::now()),
        }
    }

    /// The process's settings a kind may use, instead of the defaults.
    pub fn with_settings(mut self, settings: RunSettings) -> Self {
        self.settings = settings;
        self
    }

    /// A place where the handler may stop: returns `Err` when the attempt
    /// was superseded or a cancel was requested.
    pub fn checkpoint(&self) -> Result<(), JobFailure> {
        if self.flags.superseded.load(Ordering::Relaxed) {
            return Err(JobFailure::Superseded);
        }
        if self.flags.cancel_requested.load(Ordering::Relaxed) {
            return Err(JobFailure::Cancelled);
        }
        Ok(())
    }

    /// Writes chunk `seq` of this attempt's result, fenced by the attempt;
    /// also a checkpoint. A refused write means the attempt was superseded.
    pub async fn write_chunk(&self, seq: i64, body: &str) -> Result<(), JobFailure> {
        self.checkpoint()?;
        let written = self
            .store
            .write_result_chunk(&self.job_id, self.attempt, seq, body)
            .await?;
        if !written {
            self.flags.observe(LeaseCheck::Lost);
            return Err(JobFailure::Superseded);
        }
        Ok(())
    }

    /// Reports progress (0.0 to 1.0), written at most every 250 ms of the
    /// attempt's run, the first after 250 ms; also a checkpoint.
    pub async fn progress(&self, fraction: f64) -> Result<(), JobFailure> {
        self.checkpoint()?;
        let due = {
            let mut last = self.last_progress.lock().unwrap_or_else(|e| e.into_inner());
            let due = last.elapsed() >= PROGRESS_EVERY;
            if due {
                *last = Instant::now();
            }
            due
        };
        if due {
            let check = self
                .store
                .set_progress(&self.job_id, self.attempt, fraction)
                .await?;
            self.flags.observe(check);
            self.checkpoint()?;
        }
        Ok(())
    }
}
