use clap::{Parser, Subcommand};
use shared::{
    settings::Settings,
    store::{Store, new_key},
};

/// Receipt's API: accepts report jobs with 202 and serves their status.
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
    /// Serve the API (the default).
    Serve,
    /// Apply the database migrations and exit.
    Migrate,
    /// Make a new API key for a tenant and print it.
    CreateKey {
        #[arg(long, default_value = "default")]
        tenant: String,
    },
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,sqlx=warn,apalis=warn,actix_server=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => api::run(cli.settings).await,
        Command::Migrate => migrate(&cli.settings).await,
        Command::CreateKey { tenant } => create_key(&cli.settings, &tenant).await,
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "api stopped");
            eprintln!("error: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn migrate(settings: &Settings) -> Result<(), worker::BoxError> {
    let store = Store::connect(&settings.database_url).await?;
    store.migrate().await?;
    Ok(())
}

async fn create_key(settings: &Settings, tenant: &str) -> Result<(), worker::BoxError> {
    let store = Store::connect(&settings.database_url).await?;
    store.migrate().await?;
    let key = new_key();
    store.add_api_key(tenant, &key).await?;
    println!("API key: {key}");
    Ok(())
}
