//! The memory store's `check` through the `Backend` seam, `N` times in one
//! task (the first argument, 1,000,000 by default): what the instruction
//! count of one decision through the seam is measured on
//! (docs/PERFORMANCE.md, "HTTP layer"). Run it under callgrind with two
//! values of `N`; the difference divided by the difference of `N` is one
//! check, without the start-up.

use tollgate::{Algorithm, Backend, BackendError, BackendExt, Limit, MemoryBackend, Policy, Quota};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = match std::env::args().nth(1) {
        Some(arg) => arg.parse()?,
        None => 1_000_000,
    };
    // Far above the traffic: every check admits, as on a layer's hot path.
    let quota = Quota::per_second(1_000_000_000)?;
    let policy = Policy::new(Limit::new(Algorithm::Gcra, quota));
    let memory = MemoryBackend::new();
    let prepared = memory.prepare(&policy)?;
    let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    let admitted = runtime.block_on(async {
        let mut admitted = 0u64;
        for _ in 0..n {
            admitted += u64::from(memory.check("key", &prepared, 1).await?.allowed);
        }
        Ok::<_, BackendError>(admitted)
    })?;
    println!("{admitted} of {n} checks admitted");
    Ok(())
}
