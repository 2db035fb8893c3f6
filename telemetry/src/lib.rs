//! How both binaries log: human-readable lines by default, coloured only
//! when they go to a terminal, or one JSON object per line for log
//! shippers (`LOG_FORMAT=json`); and the metrics they export ([`metrics`]).

pub mod metrics;

use std::io::IsTerminal;

pub use shared::settings::LogFormat;
use tracing_subscriber::{EnvFilter, fmt::MakeWriter};

/// Where a binary writes its log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogStream {
    Stdout,
    Stderr,
}

/// Installs the global logger. `RUST_LOG` sets the filter; `default_filter`
/// applies when it is unset or invalid.
pub fn init(format: LogFormat, stream: LogStream, default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    match stream {
        LogStream::Stdout => {
            let ansi = std::io::stdout().is_terminal();
            install(format, filter, std::io::stdout, ansi);
        }
        LogStream::Stderr => {
            let ansi = std::io::stderr().is_terminal();
            install(format, filter, std::io::stderr, ansi);
        }
    }
}

fn install<W>(format: LogFormat, filter: EnvFilter, writer: W, terminal: bool)
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    // Colour codes are noise in a file or a log collector; NO_COLOR
    // (https://no-color.org) turns them off on a terminal too.
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    match format {
        LogFormat::Text => builder.with_ansi(terminal && !no_color).init(),
        LogFormat::Json => builder.json().flatten_event(true).with_ansi(false).init(),
    }
}
