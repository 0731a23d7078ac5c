//! `tollgate simulate`: reruns the published rate-limiting experiments on
//! the exact core and writes a report with charts.

use std::path::PathBuf;

use tollgate_sim::scenarios::{accuracy, Name, Options};

use crate::terminal::{print_summary, Bar};

/// Flags of `tollgate simulate`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Scenarios: boundary-burst, batches, adversarial, poisson, burst-after-idle,
boundary-attack, equivalence, accuracy, batching, retry-storm (all of them when none
is named).
The same command writes byte-identical report.md and report.json every time.")]
pub struct Args {
    /// Scenarios to run, in order; all of them when none is given.
    #[arg(value_name = "SCENARIO")]
    scenarios: Vec<Name>,
    /// Directory for report.md, report.json and the charts (SVG and PNG);
    /// created if missing.
    #[arg(long, value_name = "DIR", default_value = "tollgate-report")]
    out: PathBuf,
    /// Keys in the accuracy study.
    #[arg(long, value_name = "N", default_value_t = accuracy::Config::PUBLISHED.keys,
          value_parser = clap::value_parser!(u32).range(1..))]
    accuracy_keys: u32,
    /// Runs per traffic shape in the accuracy study (seeds 1 to N).
    #[arg(long, value_name = "N", default_value_t = accuracy::Config::PUBLISHED.runs,
          value_parser = clap::value_parser!(u32).range(1..))]
    accuracy_runs: u32,
}

/// Runs the scenarios, prints their tables and writes the report.
pub fn run(args: Args) -> anyhow::Result<()> {
    let mut names = args.scenarios;
    if names.is_empty() {
        names = Name::ALL.to_vec();
    }
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| seen.insert(*n));
    let options = Options {
        accuracy: accuracy::Config {
            keys: args.accuracy_keys,
            runs: args.accuracy_runs,
            ..accuracy::Config::PUBLISHED
        },
    };
    let total = names.iter().map(|n| n.work(&options)).sum();
    let bar = Bar::new("simulating", total)?;
    let (report, charts) = tollgate_sim::simulate(&names, &options, &bar);
    bar.0.finish_and_clear();
    tollgate_sim::write(&args.out, &report, &charts)?;
    let summary = format!(
        "{}Wrote {dir}/report.md, {dir}/report.json and {} charts (SVG and PNG).\n",
        report.to_text(),
        charts.len(),
        dir = args.out.display()
    );
    print_summary(&summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(argv: &[&str]) -> Result<Args, clap::Error> {
        crate::terminal::parse_args("simulate", argv)
    }

    #[test]
    fn defaults_run_everything_at_the_published_size() {
        let args = parse(&[]).unwrap();
        assert!(args.scenarios.is_empty());
        assert_eq!(args.out, PathBuf::from("tollgate-report"));
        assert_eq!(args.accuracy_keys, 10_000);
        assert_eq!(args.accuracy_runs, 5);
    }

    #[test]
    fn bad_input_is_refused_with_the_choices() {
        let err = parse(&["boundary-bust"]).unwrap_err().to_string();
        assert!(err.contains("boundary-burst"), "{err}");
        assert!(parse(&["--accuracy-keys", "0"]).is_err());
        assert!(parse(&["--accuracy-runs", "x"]).is_err());
    }

    #[test]
    fn writes_the_report_where_asked() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("nested/report");
        let args = parse(&["batches", "batches", "--out", out.to_str().unwrap()]).unwrap();
        run(args).unwrap();
        let json = std::fs::read_to_string(out.join("report.json")).unwrap();
        // Named twice, run once.
        assert_eq!(json.matches("\"name\": \"batches\"").count(), 1);
        assert!(out.join("report.md").exists());
    }
}
