//! Signals to a running `redis-server`, found by the process id it reports.

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

/// Sends `signal` to process `pid` (with `kill(2)`: no `kill` binary
/// needed on the machine).
pub fn signal(pid: u32, signal: Signal) -> Result<(), String> {
    let number = match signal {
        Signal::Stop => libc::SIGSTOP,
        Signal::Continue => libc::SIGCONT,
        Signal::Kill => libc::SIGKILL,
    };
    let target = libc::pid_t::try_from(pid).map_err(|_| format!("no such process {pid}"))?;
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    if unsafe { libc::kill(target, number) } == 0 {
        Ok(())
    } else {
        Err(format!(
            "kill({pid}, {signal:?}): {}",
            std::io::Error::last_os_error()
        ))
    }
}
