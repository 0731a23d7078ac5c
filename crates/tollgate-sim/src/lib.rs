//! The simulator behind `tollgate simulate`: deterministic traffic, exact
//! metrics and the published rate-limiting experiments, rerun on the exact
//! core (`tollgate-core`) with the same semantics as `tollgate replay`.
//!
//! ```
//! use tollgate_sim::scenarios::{Name, Options};
//!
//! let report = tollgate_sim::simulate(&[Name::Batches], &Options::default(), &()).0;
//! let fixed = report.scenarios[0].rows.iter().find(|r| r.algorithm == "fixed_window").unwrap();
//! // 100 at 59.5 s and 100 at 60.5 s fall in different minutes: both pass.
//! assert_eq!(fixed.worst_60s, 200);
//! ```

pub mod charts;
pub mod metrics;
pub mod report;
pub mod rng;
pub mod run;
pub mod scenarios;
pub mod table;
pub mod traffic;

use std::fmt;
use std::path::{Path, PathBuf};

use charts::Chart;
use report::Report;
use scenarios::{Name, Options};

/// Receives progress as scenarios complete units of work (see
/// [`Name::work`]); called from several threads.
pub trait Progress: Sync {
    /// `units` more units are done.
    fn advance(&self, units: u64);
}

/// No progress reporting.
impl Progress for () {
    fn advance(&self, _units: u64) {}
}

/// Runs the named scenarios in order.
pub fn simulate(
    names: &[Name],
    options: &Options,
    progress: &dyn Progress,
) -> (Report, Vec<Chart>) {
    let mut scenarios = Vec::new();
    let mut charts = Vec::new();
    for name in names {
        let s = name.run(options, progress);
        scenarios.push(s.report);
        charts.extend(s.charts);
    }
    (Report { scenarios }, charts)
}

/// A report file that could not be written.
#[derive(Debug)]
pub struct WriteError {
    /// The file or directory.
    pub path: PathBuf,
    /// What went wrong.
    pub message: String,
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot write {}: {}", self.path.display(), self.message)
    }
}

impl std::error::Error for WriteError {}

/// Writes `report.md`, `report.json` and every chart as SVG and PNG into
/// `dir`, creating it if needed.
pub fn write(dir: &Path, report: &Report, charts: &[Chart]) -> Result<(), WriteError> {
    write_files(
        dir,
        &[
            ("report.md", report.to_markdown()),
            ("report.json", report.to_json()),
        ],
        charts,
    )
}

/// Writes each `(file name, text)` and every chart as SVG and PNG into
/// `dir`, creating it if needed: the layout of every report (the
/// simulator's, `tollgate what-if`'s).
pub fn write_files(
    dir: &Path,
    files: &[(&str, String)],
    charts: &[Chart],
) -> Result<(), WriteError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |e: std::io::Error| WriteError {
            path,
            message: e.to_string(),
        }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    for (file, text) in files {
        let path = dir.join(file);
        std::fs::write(&path, text).map_err(io(&path))?;
    }
    for chart in charts {
        charts::render(chart, dir).map_err(|message| WriteError {
            path: dir.join(&chart.stem),
            message,
        })?;
    }
    Ok(())
}
