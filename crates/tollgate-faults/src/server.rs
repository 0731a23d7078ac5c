//! Signals to a running `redis-server`, found by the process id it reports.

use std::process::Command;

use tollgate_redis::harness::RedisServer;

/// A signal a test sends to a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// `SIGSTOP`: the process freezes, its connections stay open.
    Stop,
    /// `SIGCONT`: a stopped process carries on.
    Continue,
    /// `SIGKILL`: the process dies at once.
    Kill,
}

/// The server's process id, from its `INFO server`.
pub fn pid(server: &RedisServer) -> Result<u32, String> {
    let info = server.cli(&["info", "server"]).map_err(|e| e.to_string())?;
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|p| p.trim().parse().ok())
        .ok_or_else(|| "no process_id in INFO server".to_string())
}

/// Sends `signal` to process `pid` with `kill(1)`.
pub fn signal(pid: u32, signal: Signal) -> Result<(), String> {
    let name = match signal {
        Signal::Stop => "-STOP",
        Signal::Continue => "-CONT",
        Signal::Kill => "-KILL",
    };
    let status = Command::new("kill")
        .arg(name)
        .arg(pid.to_string())
        .status()
        .map_err(|e| format!("kill {name} {pid}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("kill {name} {pid}: {status}"))
    }
}
