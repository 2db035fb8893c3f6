use clap::{Parser, Subcommand};
use shared::settings::Settings;
use store::Store;
use telemetry::LogStream;

/// Receipt's worker: runs report jobs from the queue.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    settings: Settings,
}

#[derive(Subcommand)]
enum Command {
    /// Run the worker pool (the default).
    Run,
    /// Apply the database migrations and exit.
    Migrate,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    shared::failpoints::arm();
    let telemetry = match telemetry::init(
        cli.settings.log_format,
        LogStream::Stdout,
        "info,sqlx=warn,apalis=warn",
        "receipt-worker",
    ) {
        Ok(telemetry) => telemetry,
        Err(error) => {
            tracing::error!(%error, "worker stopped");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = match cli.command.unwrap_or(Command::Run) {
        Command::Run => worker::run_worker_process(cli.settings).await,
        Command::Migrate => migrate(&cli.settings).await,
    };
    // The last spans, sent before the exit (the exporter blocks).
    let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "worker stopped");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn migrate(settings: &Settings) -> worker::Result<()> {
    let store = Store::open(settings).await?;
    store.migrate().await?;
    Ok(())
}
