//! `mozart dashboard`: a live web UI over the conductor's Unix socket, plus the conductor
//! score validation ([`validate`]) the MCP server shares; the conductor operations are
//! `mozart_client::conductor`.
//!
//! Pages are rendered server-side with minijinja; the live parts (jobs table, job detail)
//! are Server-Sent Events carrying re-rendered HTML fragments, driven by the conductor's
//! `daemon.monitor.stream` subscription. A few lines of plain JS swap them in.

pub mod chart;
pub mod learning;
pub mod session;
pub mod token;
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
    /// Access token given by the user (`--token`). Required to bind a non-loopback
    /// address. Without it the owner's token file in `home` ([`token`]) is used. Either
    /// way every request needs the token (a `?token=` visit exchanges it for a session
    /// cookie) or that session cookie.
    pub token: Option<String>,
    /// The Mozart home, where the owner's token file lives.
    pub home: PathBuf,
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
    /// The token file could not be read or created.
    #[error("Cannot read or create the dashboard token file {}: {source}", path.display())]
    TokenFileIo {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The token file is a symlink, directory or other non-file.
    #[error("The dashboard token file {} is not a regular file (a symbolic link or a directory): remove it and run mozart dashboard again to create a new one.", path.display())]
    TokenFileNotRegular {
        /// The file.
        path: PathBuf,
    },
    /// The token file belongs to another account.
    #[error("The dashboard token file {} belongs to uid {owner}, not to you (uid {you}): that account could know the token. Remove the file and run mozart dashboard again to create your own.", path.display())]
    TokenFileNotOwned {
        /// The file.
        path: PathBuf,
        /// Its owner's uid.
        owner: u32,
        /// This process's uid.
        you: u32,
    },
    /// The token file can be read or written by others.
    #[error("The dashboard token file {} has mode {mode:o}: other users can read or change it, so they may know the token. Delete it (rm {}) and run mozart dashboard again: a new token is made that only you can read.", path.display(), path.display())]
    TokenFileExposed {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The token file's content is no usable token.
    #[error("The dashboard token file {} holds no usable token ({why}): delete it and run mozart dashboard again to create a new one.", path.display())]
    TokenFileBad {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// No random bytes for a new token.
    #[error("Cannot make a dashboard token: reading /dev/urandom failed: {0}")]
    NoRandom(std::io::Error),
}

impl Options {
    /// Check the options before binding.
    pub fn check(&self) -> Result<(), DashboardError> {
        match &self.token {
            None if !self.host.is_loopback() => Err(DashboardError::TokenRequired(self.host)),
            Some(t) if t.len() < token::MIN_TOKEN_LEN => Err(DashboardError::WeakToken),
            _ => Ok(()),
        }
    }
}

/// Run the dashboard until the process is interrupted (Ctrl-C / SIGTERM). Prints the URL
/// it serves on stdout first.
pub async fn run(options: Options) -> Result<(), DashboardError> {
    let dashboard = Dashboard::bind(options).await?;
    match dashboard.token_file() {
        Some(file) => {
            println!("Mozart dashboard: {}", dashboard.login_url());
            println!(
                "Open that address to log in; its token is kept in {} (readable by you only). Anyone who has it can control your jobs.",
                file.display()
            );
        }
        None => {
            println!("Mozart dashboard: {}", dashboard.url());
            println!("Open it once with ?token=<TOKEN> to log in.");
        }
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
                        // The token stays out of the log: the log says where it is kept
                        // (under a name the log's redaction of `…token…` fields lets show).
                        let login_file = d
                            .token_file()
                            .map(|p| p.display().to_string())
                            .unwrap_or_else(|| "the dashboard.token setting".into());
                        tracing::info!(url = %d.url(), login_file = %login_file, "dashboard.listening");
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
