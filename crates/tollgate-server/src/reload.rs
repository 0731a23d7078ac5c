//! Hot reload: the configuration (a file or a directory, see
//! [`Source`]) is watched, and `SIGHUP` reloads it.
//!
//! Start, reload and `tollgate serve --check` accept the same files: a
//! configuration is parsed, then every policy is checked against the store
//! ([`load`]), so whatever is accepted serves. A configuration that does
//! not load is logged with its location and counted
//! (`tollgate_server_config_loads_total{result="error"}`); the running
//! configuration stays. So does it when the new one would limit nothing at
//! all while the running one limits something (a file emptied by a write
//! in progress, a directory briefly empty): restart to remove every limit.
//! Events closer than [`SETTLE`] are one change, so a file written in
//! several steps is read once, whole. Limits whose policy is unchanged keep
//! their state (the store keys by descriptor and policy), and requests in
//! flight finish under the configuration they started with.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::{mpsc, watch};
use tollgate::Backend;

use crate::config::{Config, ConfigError, Source};
use crate::engine::Engine;
use crate::listener::stopped;
use crate::metrics;

/// A change is read once no event came for this long: editors and `cp`
/// write a file in several steps.
pub const SETTLE: Duration = Duration::from_millis(200);

/// The longest a stream of events delays a reload.
const MAX_SETTLE: Duration = Duration::from_secs(2);

/// Reads `source` and checks every policy against `backend`: the one
/// validation of start, reload and `--check`.
pub fn load<B: Backend>(source: &Source, backend: &B) -> Result<Config, ConfigError> {
    let config = source.load()?;
    check_store(source, &config, backend)?;
    Ok(config)
}

/// Checks every policy of `config`, read from `source`, against `backend`
/// (the second half of [`load`], for a start that needs the configuration
/// to build its store).
pub fn check_store<B: Backend>(
    source: &Source,
    config: &Config,
    backend: &B,
) -> Result<(), ConfigError> {
    config
        .check_store(|policy| backend.prepare(policy).map(drop))
        .map_err(|message| ConfigError::unlocated(&source.path.display().to_string(), message))
}

/// Loads the file at `path` into `engine`, or keeps the running
/// configuration (see [`reload_source`]).
pub fn reload<B: Backend>(engine: &Engine<B>, path: &Path) -> Result<(), ConfigError> {
    reload_source(engine, &Source::new(path))
}

/// Loads `source` into `engine`, or keeps the running configuration: when
/// it does not load, and when it would limit nothing where the running one
/// limits something.
pub fn reload_source<B: Backend>(engine: &Engine<B>, source: &Source) -> Result<(), ConfigError> {
    let name = source.path.display().to_string();
    let loaded = load(source, engine.backend()).and_then(|config| {
        if config.limits_nothing() && !engine.config().limits_nothing() {
            Err(ConfigError::unlocated(
                &name,
                "the new configuration limits nothing, which would drop every running limit; restart to remove them all",
            ))
        } else {
            Ok(config)
        }
    });
    match loaded {
        Ok(config) => {
            let limits = config.entries().len();
            let rules = config.http_rules().len();
            engine.replace_config(config);
            metrics::config_load(true);
            tracing::info!(config = %name, limits, http_rules = rules, "configuration reloaded");
            Ok(())
        }
        Err(e) => {
            metrics::config_load(false);
            tracing::error!(error = %e, "configuration not reloaded; the running one stays");
            Err(e)
        }
    }
}

/// Handles `SIGHUP` (a reload where there is a configuration, a logged
/// no-op where there is none: never the signal's default, which ends the
/// process) and, with `watch`, changes to the configuration, until
/// `shutdown`. Both are in place when this returns, so a change or a signal
/// sent afterwards is never missed.
pub fn spawn<B: Backend + 'static>(
    engine: Arc<Engine<B>>,
    source: Option<Source>,
    watch: bool,
    mut shutdown: watch::Receiver<bool>,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<()>();
    spawn_sighup(tx.clone(), source.is_some());
    let Some(source) = source else { return };
    let mut watcher = if watch {
        match watch_source(&source, tx.clone()) {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::error!(error = %e, config = %source.path.display(), "cannot watch the configuration; SIGHUP still reloads");
                None
            }
        }
    } else {
        None
    };
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stopped(&mut shutdown) => return,
                got = rx.recv() => if got.is_none() { return },
            }
            settle(&mut rx, SETTLE, MAX_SETTLE).await;
            if watcher.is_some() {
                // Watched afresh before reading, so that nothing written
                // from here on is missed: a swapped directory or root link
                // is a new directory to watch.
                watcher = watch_source(&source, tx.clone()).ok().or(watcher);
            }
            let _ = reload_source(&engine, &source);
        }
    });
}

/// Waits until no event came for `quiet`, or `max` in all, whichever first.
pub async fn settle(rx: &mut mpsc::UnboundedReceiver<()>, quiet: Duration, max: Duration) {
    let deadline = tokio::time::Instant::now() + max;
    loop {
        let wait = quiet.min(deadline.saturating_duration_since(tokio::time::Instant::now()));
        match tokio::time::timeout(wait, rx.recv()).await {
            Ok(Some(())) if tokio::time::Instant::now() < deadline => continue,
            _ => return,
        }
    }
}

/// A watcher sending on `tx` when `source` changes: for a file, its
/// directory's events about it (an editor or a ConfigMap replaces it by a
/// rename); for a directory, any event under it; and a replaced root link.
fn watch_source(
    source: &Source,
    tx: mpsc::UnboundedSender<()>,
) -> Result<RecommendedWatcher, notify::Error> {
    let is_dir = source.path.is_dir();
    let file_name = (!is_dir)
        .then(|| source.path.file_name().map(|n| n.to_os_string()))
        .flatten();
    let link_name = source
        .directory
        .root_link
        .as_ref()
        .and_then(|l| l.file_name().map(|n| n.to_os_string()));
    let dir = source.path.clone();
    let on_event = move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else { return };
        if event.kind.is_access() {
            return;
        }
        let ours = event.paths.iter().any(|p| {
            let name = p.file_name();
            (is_dir && p.starts_with(&dir))
                || (file_name.is_some() && name == file_name.as_deref())
                || (link_name.is_some() && name == link_name.as_deref())
        });
        if ours {
            let _ = tx.send(());
        }
    };
    let mut watcher = notify::recommended_watcher(on_event)?;
    if is_dir {
        watcher.watch(&source.path, RecursiveMode::Recursive)?;
    } else {
        watcher.watch(&parent(&source.path), RecursiveMode::NonRecursive)?;
    }
    if let Some(link) = &source.directory.root_link {
        watcher.watch(&parent(link), RecursiveMode::NonRecursive)?;
    }
    Ok(watcher)
}

/// The directory holding `path` (`.` for a bare name).
fn parent(path: &Path) -> PathBuf {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

#[cfg(unix)]
fn spawn_sighup(tx: mpsc::UnboundedSender<()>, reloads: bool) {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::hangup()) {
        Ok(mut hup) => {
            tokio::spawn(async move {
                while hup.recv().await.is_some() {
                    if !reloads {
                        tracing::info!(
                            "SIGHUP: no configuration to reload (started without --config)"
                        );
                    } else if tx.send(()).is_err() {
                        break;
                    }
                }
            });
        }
        Err(e) => tracing::warn!(error = %e, "cannot handle SIGHUP"),
    }
}

#[cfg(not(unix))]
fn spawn_sighup(_tx: mpsc::UnboundedSender<()>, _reloads: bool) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn settling_waits_for_quiet_within_a_bound() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let start = tokio::time::Instant::now();
        // Events every 150 ms for 600 ms: read 200 ms after the last one.
        let sender = tokio::spawn(async move {
            for _ in 0..4 {
                tokio::time::sleep(Duration::from_millis(150)).await;
                tx.send(()).unwrap();
            }
            tx
        });
        settle(&mut rx, SETTLE, MAX_SETTLE).await;
        assert_eq!(start.elapsed(), Duration::from_millis(800));
        // A stream that never stops is read at the bound.
        let tx = sender.await.unwrap();
        let start = tokio::time::Instant::now();
        let flood = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(50)).await;
                if tx.send(()).is_err() {
                    return;
                }
            }
        });
        settle(&mut rx, SETTLE, MAX_SETTLE).await;
        assert_eq!(start.elapsed(), MAX_SETTLE);
        flood.abort();
    }
}
