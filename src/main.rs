use std::io::Write;

use clap::Parser;

// The hot path allocates a little per request (bodies, keys); mimalloc
// keeps that off glibc's slower arena paths (measured: see docs/benchmarks.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use nodes_control::admin_cli::AdminCli;
use nodes_control::{telemetry, Application, Config};

fn main() -> anyhow::Result<()> {
    dotenvy::dotenv().ok();
    if std::env::args().nth(1).as_deref() == Some("admin") {
        let args = std::env::args().skip(2);
        return admin(AdminCli::parse_from(
            std::iter::once("nodes-control admin".to_owned()).chain(args),
        ));
    }
    let config = Config::parse();
    telemetry::init(config.log_format);
    runtime(config.worker_threads)?.block_on(async {
        let app = Application::build(config).await?;
        app.run_until_stopped(shutdown_signal()).await?;
        Ok(())
    })
}

/// `nodes-control admin ...`: one request to a running balancer.
fn admin(cli: AdminCli) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match runtime.block_on(cli.run()) {
        Ok((answer, warning)) => {
            if let Some(warning) = warning {
                eprintln!("warning: {warning}");
            }
            // A reader that stops early (`| head`) took all it wanted: not
            // an error (Rust ignores SIGPIPE, so the write says so instead).
            match writeln!(std::io::stdout().lock(), "{answer}") {
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                written => Ok(written?),
            }
        }
        Err(error) => {
            eprintln!("error: {error}");
            std::process::exit(1);
        }
    }
}

/// One thread: the current-thread scheduler (measured 15 % more presses
/// than a one-worker multi-thread runtime: no cross-thread wake-ups).
fn runtime(workers: usize) -> std::io::Result<tokio::runtime::Runtime> {
    let workers = match workers {
        0 => std::thread::available_parallelism().map_or(1, usize::from),
        n => n,
    };
    if workers == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
    }
}

/// Ctrl-C, or SIGTERM from docker / systemd.
async fn shutdown_signal() {
    let ctrl_c = async {
        tokio::signal::ctrl_c().await.ok();
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => tracing::info!("Ctrl-C received; shutting down"),
        _ = terminate => tracing::info!("SIGTERM received; shutting down"),
    }
}
