//! Tracing set-up for the binaries: human logs on stderr, filtered by `RUST_LOG`
//! (default `info`), one span per handled message with the W3C trace id as a field.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber; call once at the top of `main`.
pub fn init(service: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(std::io::stderr)
        .try_init();
    tracing::info!(service, "starting");
}
