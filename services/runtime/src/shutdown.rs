//! The shutdown signal `main` passes to a service's `run`; tests pass their own future.

/// Completes on Ctrl-C or SIGTERM.
pub async fn signal() {
    let ctrl_c = async {
        // If the handler cannot be installed the process still stops on SIGTERM below; the
        // error must not read as a Ctrl-C, which would stop the service as it starts.
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
