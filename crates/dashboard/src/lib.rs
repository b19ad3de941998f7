//! `mozart dashboard`: a live web UI over the conductor's Unix socket, plus the conductor
//! operations ([`ops`]) and score validation ([`validate`]) the MCP server shares.
//!
//! Pages are rendered server-side with minijinja; the live parts (jobs table, job detail)
//! are Server-Sent Events carrying re-rendered HTML fragments, driven by the conductor's
//! `daemon.monitor.stream` subscription. A few lines of plain JS swap them in.

pub mod chart;
pub mod learning;
pub mod ops;
pub mod validate;
pub mod view;
mod web;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

pub use web::{render_jobs_page_for_bench, Dashboard};

/// How `mozart dashboard` was asked to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Address to bind.
    pub host: IpAddr,
    /// Port (0 = any free port).
    pub port: u16,
    /// Access token. Required to bind a non-loopback address; when given, every request
    /// needs it (a `?token=` visit sets a cookie). Without it a random per-process token
    /// still guards every state-changing request.
    pub token: Option<String>,
    /// The conductor's socket.
    pub socket: PathBuf,
    /// The global learning database.
    pub learning_db: PathBuf,
}

/// Why the dashboard could not start.
#[derive(Debug, thiserror::Error)]
pub enum DashboardError {
    /// A non-loopback address without a token.
    #[error("Binding the dashboard to {0} exposes it beyond this machine: pass --token <TOKEN> (or set MOZART_DASHBOARD_TOKEN), or bind 127.0.0.1.")]
    TokenRequired(IpAddr),
    /// A token too short to guard anything.
    #[error("The dashboard token must be at least 16 characters.")]
    WeakToken,
    /// The address could not be bound.
    #[error("Cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The server stopped with an I/O error.
    #[error("The dashboard server failed: {0}")]
    Serve(std::io::Error),
    /// The templates could not be loaded (a build defect).
    #[error("Dashboard templates are broken: {0}")]
    Template(String),
}

impl Options {
    /// Check the options before binding.
    pub fn check(&self) -> Result<(), DashboardError> {
        match &self.token {
            None if !self.host.is_loopback() => Err(DashboardError::TokenRequired(self.host)),
            Some(t) if t.len() < 16 => Err(DashboardError::WeakToken),
            _ => Ok(()),
        }
    }
}

/// Run the dashboard until the process is interrupted (Ctrl-C / SIGTERM). Prints the URL
/// it serves on stdout first.
pub async fn run(options: Options) -> Result<(), DashboardError> {
    let dashboard = Dashboard::bind(options).await?;
    println!("Mozart dashboard: {}", dashboard.url());
    if dashboard.token_required() {
        println!("Open it once with ?token=<TOKEN> to log in.");
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
    dashboard.serve_until(shutdown_signal()).await
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    match (term, int) {
        (Ok(mut t), Ok(mut i)) => {
            tokio::select! {
                _ = t.recv() => {}
                _ = i.recv() => {}
            }
        }
        _ => std::future::pending::<()>().await,
    }
}

/// Serve the dashboard on a thread of its own (the conductor's `dashboard:` setting): the
/// URL, or why it could not start, goes to the log.
pub fn spawn_background(options: Options) {
    let spawned = std::thread::Builder::new()
        .name("dashboard".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!(error = %e, "dashboard.not_started");
                    return;
                }
            };
            runtime.block_on(async move {
                // Bind once the conductor listens: its logging is set up by then.
                for _ in 0..600 {
                    if options.socket.exists() {
                        break;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                match Dashboard::bind(options).await {
                    Ok(d) => {
                        tracing::info!(url = %d.url(), "dashboard.listening");
                        if let Err(e) = d.serve_until(std::future::pending()).await {
                            tracing::error!(error = %e, "dashboard.stopped");
                        }
                    }
                    Err(e) => tracing::error!(error = %e, "dashboard.not_started"),
                }
            });
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "dashboard.not_started");
    }
}

/// Run [`run`] on a fresh multi-threaded runtime (for the synchronous CLI).
pub fn run_blocking(options: Options) -> Result<(), DashboardError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(DashboardError::Serve)?;
    runtime.block_on(run(options))
}
