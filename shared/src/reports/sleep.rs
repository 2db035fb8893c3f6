//! `sleep {"ms": N, "fail_times": K}`: a diagnostic kind, registered only
//! with `ENABLE_DIAGNOSTIC_KINDS=true`. Sleeps N ms checking for cancel,
//! then fails its first K attempts (retryably; with `"permanent": true`,
//! permanently).

use std::time::Duration;

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{JobContext, JobFailure, ParamsError, ReportKind, RunResult, decode_params};
use crate::ledger::FieldError;

pub struct Sleep;

/// The longest sleep accepted; attempts time out after [`Sleep::timeout`].
const MAX_MS: u64 = 600_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    #[serde(default)]
    ms: u64,
    #[serde(default)]
    fail_times: u32,
    /// Receipt addition: the failures are permanent (no retry).
    #[serde(default)]
    permanent: bool,
}

impl ReportKind for Sleep {
    fn name(&self) -> &'static str {
        "sleep"
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(60)
    }

    fn validate(&self, params: &Value) -> Result<(), ParamsError> {
        let params: Params = decode_params(params)?;
        if params.ms > MAX_MS {
            return Err(ParamsError::Invalid(vec![FieldError::new(
                "ms",
                format!("must be at most {MAX_MS}"),
            )]));
        }
        Ok(())
    }

    fn run<'a>(&'a self, ctx: &'a JobContext, params: Value) -> BoxFuture<'a, RunResult> {
        Box::pin(async move {
            let params: Params = decode_params(&params)
                .map_err(|e| JobFailure::permanent("invalid_params", format!("{e:?}")))?;
            let total = Duration::from_millis(params.ms);
            let started = tokio::time::Instant::now();
            ctx.checkpoint()?;
            while started.elapsed() < total {
                let left = total.saturating_sub(started.elapsed());
                tokio::time::sleep(left.min(Duration::from_millis(20))).await;
                ctx.progress(started.elapsed().as_secs_f64() / total.as_secs_f64())
                    .await?;
            }
            if ctx.attempt <= i64::from(params.fail_times) {
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
