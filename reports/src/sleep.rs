//! `sleep {"ms": N, "fail_times": K}`: a diagnostic kind, registered only
//! with `ENABLE_DIAGNOSTIC_KINDS=true`. Sleeps N ms checking for cancel,
//! then fails its first K attempts (retryably; with `"permanent": true`,
//! permanently).

use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Number, json};
use shared::report_params::SleepParams;

use super::{JobContext, JobFailure, ParamsError, ReportKind, RunResult, whole_number};

pub struct Sleep;

/// The longest sleep accepted; attempts time out after [`Sleep::timeout`].
const MAX_MS: u64 = 600_000;

/// The parameters of `sleep` once checked.
pub struct SleepPlan {
    ms: u64,
    fail_times: u64,
    permanent: bool,
}

impl ReportKind for Sleep {
    type Body = SleepParams;
    type Params = SleepPlan;

    fn name(&self) -> &'static str {
        "sleep"
    }

    fn about(&self) -> &'static str {
        "Sleeps `ms` milliseconds, checking for a cancel, then fails its first `fail_times` attempts (for good with `permanent`): for trying the service out."
    }

    fn diagnostic(&self) -> bool {
        true
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(60)
    }

    // Numbers are decoded as JSON numbers and checked here, so `-1` or
    // `1.5` is a 422 that names its field, not a 400.
    fn check(&self, params: &SleepParams) -> Result<SleepPlan, ParamsError> {
        let zero = Number::from(0u8);
        let mut errors = Vec::new();
        let ms = whole_number(
            "ms",
            params.ms.as_ref().unwrap_or(&zero),
            MAX_MS,
            &mut errors,
        );
        let fail_times = whole_number(
            "fail_times",
            params.fail_times.as_ref().unwrap_or(&zero),
            u64::MAX,
            &mut errors,
        );
        if !errors.is_empty() {
            return Err(ParamsError::Invalid(errors));
        }
        Ok(SleepPlan {
            ms,
            fail_times,
            permanent: params.permanent.unwrap_or(false),
        })
    }

    fn run<'a>(&'a self, ctx: &'a JobContext, params: SleepPlan) -> BoxFuture<'a, RunResult> {
        Box::pin(async move {
            let total = Duration::from_millis(params.ms);
            let started = tokio::time::Instant::now();
            ctx.checkpoint()?;
            while started.elapsed() < total {
                let left = total.saturating_sub(started.elapsed());
                tokio::time::sleep(left.min(Duration::from_millis(20))).await;
                ctx.progress(started.elapsed().as_secs_f64() / total.as_secs_f64())
                    .await?;
            }
            // A test that must see a job running, however slowly it looks,
            // holds every `sleep` here until the file the point names exists.
            shared::failpoints::hold_until_file_exists("reports::sleep_held_until", || {
                ctx.checkpoint()
            })
            .await?;
            if u64::try_from(ctx.attempt).unwrap_or(0) <= params.fail_times {
                let message = format!(
                    "failing on purpose: attempt {} of the first {}",
                    ctx.attempt, params.fail_times
                );
                return Err(if params.permanent {
                    JobFailure::permanent("diagnostic_failure", message)
                } else {
                    JobFailure::retryable("diagnostic_failure", message)
                });
            }
            Ok(json!({"slept_ms": params.ms, "attempt": ctx.attempt}).into())
        })
    }
}
