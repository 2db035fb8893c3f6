use api::{Application, key_commands, secret_commands};
use clap::{Parser, Subcommand};
use shared::settings::Settings;
use store::Store;
use telemetry::{LogFormat, LogStream};

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
    /// Make a new API key for a tenant and print it (as `keys create`).
    CreateKey {
        #[arg(long, default_value = "default")]
        tenant: String,
    },
    /// Manage the stored API keys.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Manage the secrets stored sealed (webhook and filing endpoint
    /// secrets).
    #[command(subcommand)]
    Secrets(SecretsCommand),
}

#[derive(Subcommand)]
enum SecretsCommand {
    /// Seal every secret under the first key of RECEIPT_MASTER_KEYS and
    /// retire the data keys of the others, in batches, while the api and
    /// workers run. Run it after every process has been restarted with the
    /// new key first; then the older keys can be removed.
    Rotate {
        /// Secrets sealed anew per committed transaction.
        #[arg(long, default_value_t = secret_commands::BATCH)]
        batch_size: usize,
    },
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Make a new key for a tenant and print it, once.
    Create {
        #[arg(long)]
        tenant: String,
        /// The key's scopes, comma-separated: `read` (jobs, results,
        /// schedules, webhooks, periods), `submit` (reports, ledger
        /// imports, cancels and retries), `manage` (webhooks, schedules,
        /// the filing endpoint, registered kinds), `close` (period-close
        /// and reopening a month), `admin` (keys and the audit log),
        /// `work` (leasing and reporting attempts of registered kinds).
        /// Without it, a key of full rights: every scope but `work`.
        #[arg(long)]
        scope: Option<String>,
        /// With `work` among the scopes: the registered kinds the key may
        /// work on, comma-separated (all of the tenant's when absent).
        #[arg(long, requires = "scope", value_delimiter = ',')]
        kinds: Option<Vec<String>>,
    },
    /// List every stored key: id, tenant, visible prefix, created, last
    /// used, revoked. Never the key itself.
    List,
    /// Revoke a key by its id (from `keys list`): every running api
    /// refuses it within 2 s.
    Revoke { key_id: String },
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    shared::failpoints::arm();
    let json_log = cli.settings.log_format == LogFormat::Json;
    let telemetry = match telemetry::init(
        cli.settings.log_format,
        LogStream::Stderr,
        "info,sqlx=warn,apalis=warn,actix_server=warn",
        "receipt-api",
    ) {
        Ok(telemetry) => telemetry,
        Err(error) => {
            tracing::error!(%error, "api stopped");
            if !json_log {
                eprintln!("error: {error}");
            }
            return std::process::ExitCode::FAILURE;
        }
    };
    let command = cli.command.unwrap_or(Command::Serve);
    let serving = matches!(command, Command::Serve);
    let result = match command {
        Command::Serve => serve(cli.settings).await,
        Command::Migrate => migrate(&cli.settings).await,
        Command::CreateKey { tenant } => {
            key_commands::create(&cli.settings, &tenant, &store::KeyScope::full()).await
        }
        Command::Keys(KeysCommand::Create {
            tenant,
            scope,
            kinds,
        }) => match key_commands::scope_of(scope.as_deref(), kinds) {
            Ok(scope) => key_commands::create(&cli.settings, &tenant, &scope).await,
            Err(error) => Err(error),
        },
        Command::Keys(KeysCommand::List) => key_commands::list(&cli.settings).await,
        Command::Keys(KeysCommand::Revoke { key_id }) => {
            key_commands::revoke(&cli.settings, &key_id).await
        }
        Command::Secrets(SecretsCommand::Rotate { batch_size }) => {
            secret_commands::rotate(&cli.settings, batch_size).await
        }
    };
    // The last spans, sent before the exit (the exporter blocks).
    let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            if serving {
                tracing::error!(%error, "api stopped");
            }
            // A JSON log stays all JSON: the error is in its last line.
            if !(serving && json_log) {
                eprintln!("error: {error}");
            }
            std::process::ExitCode::FAILURE
        }
    }
}

async fn serve(settings: Settings) -> Result<(), api::error::BoxError> {
    Application::build(settings)
        .await?
        .run_until_stopped()
        .await
}

async fn migrate(settings: &Settings) -> Result<(), api::error::BoxError> {
    let store = Store::open(settings).await?;
    store.migrate().await?;
    Ok(())
}
