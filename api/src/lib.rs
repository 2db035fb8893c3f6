//! Receipt's HTTP API (actix-web). `main.rs` reads settings, then
//! [`Application::build`] binds and [`Application::run_until_stopped`]
//! serves; tests spawn the binary and talk HTTP to it.

pub mod api_keys;
pub mod auth;
pub mod background;
pub mod body;
pub mod dashboard;
pub mod deadline;
pub mod error;
pub mod idempotency;
pub mod key_commands;
pub mod limits;
pub mod metrics;
pub mod openapi;
pub mod request_id;
pub mod routes;
pub mod secret_commands;
pub mod startup;
pub mod state;
pub mod submits;
pub mod traces;

pub use startup::Application;
