//! Reports are byte-identical from run to run and the charts are written.

use tollgate_sim::scenarios::{accuracy::Config, Name, Options};

fn options() -> Options {
    Options {
        accuracy: Config {
            keys: 40,
            runs: 1,
            ..Config::PUBLISHED
        },
    }
}

#[test]
fn the_same_run_writes_the_same_report() {
    let names = [Name::BoundaryBurst, Name::Batches, Name::Accuracy];
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    for dir in &dirs {
        let (report, charts) = tollgate_sim::simulate(&names, &options(), &());
        tollgate_sim::write(dir.path(), &report, &charts).unwrap();
    }
    for file in ["report.md", "report.json"] {
        let a = std::fs::read(dirs[0].path().join(file)).unwrap();
        let b = std::fs::read(dirs[1].path().join(file)).unwrap();
        assert!(!a.is_empty());
        assert!(a == b, "{file} differs between runs");
    }
    for stem in [
        "boundary-burst-per-second",
        "boundary-burst-worst-window",
        "boundary-burst-leaky-queue",
        "accuracy-by-rate",
    ] {
        let png = std::fs::read(dirs[0].path().join(format!("{stem}.png"))).unwrap();
        assert_eq!(&png[1..4], b"PNG", "{stem}");
        let svg = std::fs::read_to_string(dirs[0].path().join(format!("{stem}.svg"))).unwrap();
        assert!(svg.contains("<svg") && svg.contains("<text"), "{stem}");
    }
    let md = std::fs::read_to_string(dirs[0].path().join("report.md")).unwrap();
    assert!(md.contains("![boundary-burst-per-second](boundary-burst-per-second.png)"));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dirs[0].path().join("report.json")).unwrap())
            .unwrap();
    assert_eq!(json["scenarios"][0]["name"], "boundary-burst");
}

#[test]
fn an_unwritable_directory_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    let (report, charts) = tollgate_sim::simulate(&[Name::Batches], &options(), &());
    let err = tollgate_sim::write(&file, &report, &charts).unwrap_err();
    assert!(err.to_string().contains("not-a-dir"), "{err}");
}
