use clap::Parser;
use click_node::{Config, Node};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    dotenvy::dotenv().ok();
    let config = Config::parse();
    // Colour codes only where a person reads them: a log file gets plain text.
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    let node = Node::new(&config)?;
    let listener = tokio::net::TcpListener::bind((config.host.as_str(), config.port)).await?;
    tracing::info!(name = %config.name, addr = %listener.local_addr()?, "click-node listening");
    // Graceful, within a deadline: a client holding a half-sent request
    // must not keep the process alive past it.
    let (stopping, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = click_node::serve(listener, node, async move {
        shutdown_signal().await;
        let _ = stopping.send(());
    });
    let grace = std::time::Duration::from_secs(config.shutdown_grace_secs);
    tokio::select! {
        result = server => result?,
        _ = async {
            let _ = stopped.await;
            tokio::time::sleep(grace).await;
        } => tracing::warn!("connections still open after the grace period; exiting"),
    }
    Ok(())
}

/// Ctrl-C, or SIGTERM from docker / systemd.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                tokio::signal::ctrl_c().await.ok();
            }
        }
    }
    #[cfg(not(unix))]
    tokio::signal::ctrl_c().await.ok();
}
