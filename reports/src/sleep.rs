//! `sleep {"ms": N, "fail_times": K}`: a diagnostic kind, registered only
//! with `ENABLE_DIAGNOSTIC_KINDS=true`. Sleeps N ms checking for cancel,
//! then fails its first K attempts (retryably; with `"permanent": true`,
//! permanently).

use std::time::Duration;

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Number, json};
use utoipa::ToSchema;

use super::{
    JobContext, JobFailure, ParamsError, RawParams, ReportKind, RunResult, decode_params,
    whole_number,
};

pub struct Sleep;

/// The longest sleep accepted; attempts time out after [`Sleep::timeout`].
const MAX_MS: u64 = 600_000;

/// The parameters of `sleep`, a diagnostic kind (served only with
/// `ENABLE_DIAGNOSTIC_KINDS=true`).
// Numbers are decoded as JSON numbers and checked after (`Sleep::parse`),
// so `-1` or `1.5` is a 422 that names its field, not a 400.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SleepParams {
    /// Milliseconds to sleep, 0 to 600000.
    #[serde(default = "zero")]
    #[schema(value_type = u64, default = 0, maximum = 600_000, example = 50)]
    pub ms: Number,
    /// How many of the first attempts fail.
    #[serde(default = "zero")]
    #[schema(value_type = u64, default = 0)]
    pub fail_times: Number,
    /// The failures are permanent (no retry).
    #[serde(default)]
    #[schema(default = false)]
    pub permanent: bool,
}

fn zero() -> Number {
    Number::from(0u8)
}

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

    fn parse(&self, params: RawParams<'_>) -> Result<SleepPlan, ParamsError> {
        let params: Self::Body = decode_params(params)?;
        let mut errors = Vec::new();
        let ms = whole_number("ms", &params.ms, MAX_MS, &mut errors);
        let fail_times = whole_number("fail_times", &params.fail_times, u64::MAX, &mut errors);
        if !errors.is_empty() {
            return Err(ParamsError::Invalid(errors));
        }
        Ok(SleepPlan {
            ms,
            fail_times,
            permanent: params.permanent,
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
