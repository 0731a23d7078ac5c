//! Hot reload: the configuration file is watched (and `SIGHUP` reloads it).
//!
//! A file that does not load is logged with its location and counted
//! (`tollgate_server_config_loads_total{result="error"}`); the running
//! configuration stays. Limits whose policy is unchanged keep their state
//! (the store keys by descriptor and policy), and requests in flight finish
//! under the configuration they started with.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::{mpsc, watch};
use tollgate::Backend;

use crate::config::{Config, ConfigError};
use crate::engine::Engine;
use crate::listener::stopped;
use crate::metrics;

/// Editors write a file in several steps: events closer than this are one.
const SETTLE: Duration = Duration::from_millis(100);

/// Loads `path` into `engine`, or keeps the running configuration.
pub fn reload<B: Backend>(engine: &Engine<B>, path: &Path) -> Result<(), ConfigError> {
    match Config::load(path) {
        Ok(config) => {
            engine.replace_config(config);
            metrics::config_load(true);
            tracing::info!(file = %path.display(), "configuration reloaded");
            Ok(())
        }
        Err(e) => {
            metrics::config_load(false);
            tracing::error!(error = %e, "configuration not reloaded; the running one stays");
            Err(e)
        }
    }
}

/// Watches `path` and `SIGHUP` now, and returns the task that reloads the
/// file on each change until `shutdown`. The watch is in place when this
/// returns, so a change made afterwards is never missed. The directory is
/// watched, so a file replaced by a rename (editors, Kubernetes ConfigMaps)
/// is seen too.
pub fn watch_file<B: Backend + 'static>(
    engine: Arc<Engine<B>>,
    path: PathBuf,
    mut shutdown: watch::Receiver<bool>,
) -> Result<impl std::future::Future<Output = ()> + Send + 'static, notify::Error> {
    let (tx, mut rx) = mpsc::unbounded_channel::<()>();
    let name = path.file_name().map(|n| n.to_os_string());
    let on_event = {
        let tx = tx.clone();
        move |event: notify::Result<notify::Event>| {
            let ours = event.is_ok_and(|e| {
                !e.kind.is_access() && e.paths.iter().any(|p| p.file_name() == name.as_deref())
            });
            if ours {
                let _ = tx.send(());
            }
        }
    };
    let mut watcher = notify::recommended_watcher(on_event)?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    watcher.watch(&dir, RecursiveMode::NonRecursive)?;
    spawn_sighup(tx);
    Ok(async move {
        // Events stop when the watcher is dropped: it lives as long as this.
        let _watcher = watcher;
        loop {
            tokio::select! {
                _ = stopped(&mut shutdown) => return,
                got = rx.recv() => if got.is_none() { return },
            }
            tokio::time::sleep(SETTLE).await;
            while rx.try_recv().is_ok() {}
            let _ = reload(&engine, &path);
        }
    })
}

#[cfg(unix)]
fn spawn_sighup(tx: mpsc::UnboundedSender<()>) {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::hangup()) {
        Ok(mut hup) => {
            tokio::spawn(async move {
                while hup.recv().await.is_some() {
                    if tx.send(()).is_err() {
                        break;
                    }
                }
            });
        }
        Err(e) => tracing::warn!(error = %e, "SIGHUP will not reload"),
    }
}

#[cfg(not(unix))]
fn spawn_sighup(_tx: mpsc::UnboundedSender<()>) {}
