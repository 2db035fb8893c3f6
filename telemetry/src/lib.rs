//! How both binaries log: human-readable lines by default, coloured only
//! when they go to a terminal, or one JSON object per line for log
//! shippers (`LOG_FORMAT=json`); the metrics they export ([`metrics`]);
//! and their traces, exported over OTLP when an endpoint is set ([`trace`]).

pub mod metrics;
pub mod trace;

use std::io::IsTerminal;

pub use shared::settings::LogFormat;
use tracing_subscriber::{
    EnvFilter, Layer,
    filter::{FilterExt, filter_fn},
    fmt::MakeWriter,
    layer::SubscriberExt,
    util::SubscriberInitExt,
};

pub use trace::Telemetry;

/// Where a binary writes its log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogStream {
    Stdout,
    Stderr,
}

/// Installs the global logger, and the trace exporter when the standard
/// `OTEL_*` variables ask for one ([`trace::TraceConfig`]). `RUST_LOG` sets
/// the log's filter; `default_filter` applies when it is unset or invalid.
/// `service` names the process in its traces unless `OTEL_SERVICE_NAME` or
/// `OTEL_RESOURCE_ATTRIBUTES` does.
///
/// An `OTEL_*` variable that does not parse is an error: the logger is
/// installed all the same (without traces), so the caller can log it.
pub fn init(
    format: LogFormat,
    stream: LogStream,
    default_filter: &str,
    service: &'static str,
) -> Result<Telemetry, trace::ConfigError> {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let (telemetry, refused) = match trace::TraceConfig::from_env().and_then(|config| {
        config
            .map(|config| Telemetry::start(&config, service))
            .transpose()
    }) {
        Ok(telemetry) => (telemetry.unwrap_or_default(), None),
        Err(error) => (Telemetry::default(), Some(error)),
    };
    match stream {
        LogStream::Stdout => {
            let ansi = std::io::stdout().is_terminal();
            install(format, filter, std::io::stdout, ansi, &telemetry);
        }
        LogStream::Stderr => {
            let ansi = std::io::stderr().is_terminal();
            install(format, filter, std::io::stderr, ansi, &telemetry);
        }
    }
    match refused {
        None => Ok(telemetry),
        Some(error) => Err(error),
    }
}

fn install<W>(
    format: LogFormat,
    filter: EnvFilter,
    writer: W,
    terminal: bool,
    telemetry: &Telemetry,
) where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    // Colour codes are noise in a file or a log collector; NO_COLOR
    // (https://no-color.org) turns them off on a terminal too.
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    // Each layer has its own filter: `RUST_LOG` says what is logged, not
    // which spans are traced (a `warn` log still exports every span). Our
    // spans are the traces' alone: the log keeps its lines as they are, and
    // without traces no layer wants those spans, so they cost nothing.
    let filter = filter.and(filter_fn(|meta| {
        meta.is_event() || !trace::is_ours(meta.target())
    }));
    let traces = telemetry.layer();
    let traced = traces.is_some();
    let log = tracing_subscriber::fmt::layer().with_writer(writer);
    let log = match format {
        LogFormat::Text => log.with_ansi(terminal && !no_color).boxed(),
        LogFormat::Json if traced => log
            .json()
            .flatten_event(true)
            .with_ansi(false)
            .map_event_format(trace::WithTraceIds)
            .boxed(),
        LogFormat::Json => log.json().flatten_event(true).with_ansi(false).boxed(),
    };
    tracing_subscriber::registry()
        .with(traces)
        .with(log.with_filter(filter))
        .init();
}
