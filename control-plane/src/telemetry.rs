//! Structured logging: JSON lines in production, readable lines for people.

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global subscriber at `level` (`log_level`: `error`, `warn`, `info`,
/// `debug`, or any `tracing` filter); `RUST_LOG`, when set, overrides it.
pub fn init(format: LogFormat, level: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        EnvFilter::try_new(format!("{level},sqlx=warn,tower_http=warn"))
            .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,tower_http=warn"))
    });
    // Colours only for a terminal: a file or a pipe gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi);
    let _ = match format {
        LogFormat::Json => builder.json().with_current_span(true).try_init(),
        LogFormat::Pretty => builder.compact().try_init(),
    };
}
