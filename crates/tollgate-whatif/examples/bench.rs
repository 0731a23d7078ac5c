//! The what-if speed benchmark of `docs/PERFORMANCE.md`: generates a
//! combined log of N lines (10 million by default) into a temporary file,
//! then decides it with one policy and with a sweep of 20, timing each run
//! (the generation is not timed):
//!
//! ```sh
//! cargo run --release -p tollgate-whatif --example bench -- 10000000
//! ```

use std::time::Instant;

use tollgate_core::Algorithm;
use tollgate_http::{ClientIp, ForwardedHeader, Key, Routes};
use tollgate_whatif::engine::{self, Options};
use tollgate_whatif::format::FormatName;
use tollgate_whatif::policy::Candidates;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let lines: u64 = args.next().map_or(Ok(10_000_000), |a| a.parse())?;
    let threads: usize = args.next().map_or(Ok(2), |a| a.parse())?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("access.log");
    let started = Instant::now();
    {
        let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&path)?);
        tollgate_whatif::sample::generate(42, lines, &mut out)?;
        std::io::Write::flush(&mut out)?;
    }
    let bytes = std::fs::metadata(&path)?.len();
    eprintln!(
        "generated {lines} lines ({} MB) in {:.1} s",
        bytes / 1_000_000,
        started.elapsed().as_secs_f64()
    );
    let options = Options {
        format: FormatName::parse("combined-xff")?,
        client_ip: ClientIp::behind(["10.0.0.0/8".parse()?], ForwardedHeader::XForwardedFor),
        routes: Routes::default(),
        strict: false,
        workers: threads,
    };
    let minute = 60_000_000_000;
    let one = Candidates::sweep(Algorithm::Gcra, minute, &[120], &[30], Key::ip())?;
    let limits: Vec<u64> = (1..=10).map(|i| i * 30).collect();
    let twenty = Candidates::sweep(Algorithm::Gcra, minute, &limits, &[10, 60], Key::ip())?;
    for (name, candidates) in [("1 policy", &one), ("20 policies", &twenty)] {
        let cpu = cpu_seconds();
        let started = Instant::now();
        let outcome = engine::run(
            std::fs::File::open(&path)?,
            candidates,
            &options,
            &mut || {},
        )?;
        let secs = started.elapsed().as_secs_f64();
        let keys = outcome.lanes[0].keys.len();
        println!(
            "{name}: {lines} lines, {keys} keys, {threads} deciding threads: {secs:.2} s wall, {:.2} s CPU ({:.2} M lines/s); {} malformed",
            cpu_seconds() - cpu,
            lines as f64 / secs / 1e6,
            outcome.malformed.count
        );
    }
    Ok(())
}

/// User and system CPU seconds of this process so far (Linux; 0 elsewhere):
/// on a shared machine the wall time says how busy the others were, the CPU
/// time what the run cost.
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields 14 and 15 (utime, stime), counted after the command's `)`.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11..13).map_or(0.0, |f| {
        f.iter().filter_map(|v| v.parse::<f64>().ok()).sum()
    });
    ticks / 100.0
}
