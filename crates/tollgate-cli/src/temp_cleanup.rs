//! Temporary files removed when the process is interrupted.
//!
//! A path is registered before its file is created and unregistered once it
//! was renamed or removed. The first registration starts a thread that
//! waits for SIGINT, SIGTERM or SIGHUP, removes every registered file and
//! then ends the process the way the signal would have (so a parent still
//! sees "killed by SIGTERM"). Registering, unregistering with a rename, and
//! the cleanup share one lock, so a file is either renamed into place or
//! removed, never left half-way.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// Temporary files that exist, or are about to, and must not outlive us.
static PENDING: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Whether the signal thread could be started, decided once.
static WATCHING: OnceLock<Result<(), String>> = OnceLock::new();

fn pending() -> MutexGuard<'static, Vec<PathBuf>> {
    // A panic while holding the lock leaves the list itself intact.
    PENDING.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Registers `path` for removal on a signal, starting the signal thread on
/// first use; then runs `create`. `path` stays registered if it succeeds.
pub fn register<T>(path: &Path, create: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    watch()?;
    let mut list = pending();
    list.push(path.to_path_buf());
    let created = create();
    if created.is_err() {
        list.pop();
    }
    created
}

/// Runs `finish` (a rename or a removal of `path`) and, if it succeeds,
/// unregisters `path`, with no signal cleanup in between.
pub fn unregister<T>(path: &Path, finish: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    let mut list = pending();
    let finished = finish()?;
    list.retain(|p| p != path);
    Ok(finished)
}

/// Starts the signal thread once.
fn watch() -> io::Result<()> {
    WATCHING
        .get_or_init(|| {
            let mut signals = Signals::new([SIGINT, SIGTERM, SIGHUP]).map_err(|e| e.to_string())?;
            std::thread::Builder::new()
                .name("temp-cleanup".into())
                .spawn(move || {
                    if let Some(signal) = signals.forever().next() {
                        // Held until the process ends: no rename after this.
                        let list = pending();
                        for path in list.iter() {
                            let _ = fs::remove_file(path);
                        }
                        let _ = signal_hook::low_level::emulate_default_handler(signal);
                        std::process::exit(128 + signal);
                    }
                })
                .map(drop)
                .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|why| io::Error::other(format!("cannot watch for signals: {why}")))
}
