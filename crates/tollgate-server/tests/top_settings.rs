//! The heavy-hitter summaries' shape: the file's `top` section and the
//! flags over it, one validation for `--check` (the parse), start and
//! reload; absurd values refused with the setting named.

mod support;

use serde_json::Value;
use support::get;
use tollgate_server::config::Config;
use tollgate_server::reload::reload;
use tollgate_server::server;
use tollgate_server::top_shape::TopSettings;

const LIMITS: &str = "
domain: api
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 10 }
";

fn with_top(top: &str) -> String {
    format!("top: {top}\n{LIMITS}")
}

#[test]
fn absurd_shapes_are_refused_naming_the_setting() {
    for (top, setting) in [
        ("{ keys: 0 }", "`keys` must be from 1 to 10000, not 0"),
        ("{ keys: 1000000000 }", "`keys` must be from 1 to 10000"),
        ("{ sub_window: 5ms }", "`sub_window` must be from 1s to 1h"),
        (
            "{ sub_window: 2days }",
            "`sub_window` must be from 1s to 1h",
        ),
        ("{ sub_windows: 0 }", "`sub_windows` must be from 1 to 1440"),
        ("{ keys: 10000, sub_windows: 1440 }", "at most 1000000"),
    ] {
        let error = Config::parse("limits.yaml", &with_top(top)).unwrap_err();
        let text = error.to_string();
        assert!(text.contains(setting), "{top}: {text}");
        assert_eq!(error.line, 1, "{top}: the value's line: {text}");
    }
    let error = Config::parse("limits.yaml", &with_top("{ sub_window: soon }")).unwrap_err();
    assert!(error.to_string().contains("invalid period"), "{error}");
    let error = Config::parse("limits.yaml", &with_top("{ k: 5 }")).unwrap_err();
    assert!(error.to_string().contains("unknown field"), "{error}");
}

async fn top_json(server: &support::TestServer, query: &str) -> (u16, Value) {
    let (status, body) = get(&server.http_url(&format!("/v1/top{query}"))).await;
    (status, serde_json::from_str(&body).unwrap())
}

#[tokio::test]
async fn the_files_shape_is_served_and_the_flags_win() {
    let file = with_top("{ keys: 7, sub_window: 2s, sub_windows: 15 }");
    let server = support::start(&file).await;
    assert_eq!(top_json(&server, "?n=8").await.0, 400);
    let (status, body) = top_json(&server, "?n=7").await;
    assert_eq!(status, 200, "{body}");
    server.running.shutdown().await;

    let server = support::start_with(&file, |o| {
        o.top = TopSettings {
            keys: Some(3),
            ..TopSettings::default()
        };
    })
    .await;
    assert_eq!(top_json(&server, "?n=4").await.0, 400);
    assert_eq!(top_json(&server, "?n=3").await.0, 200);
    // The windows still come from the file: 15 sub-windows of 2 s.
    let config = server.running.engine.top().config();
    assert_eq!(
        (config.sub_window_ns(), config.span_ns()),
        (2_000_000_000, 30_000_000_000)
    );
    server.running.shutdown().await;
}

#[tokio::test]
async fn absurd_flags_stop_the_start_and_a_bad_reload_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limits.yaml");
    std::fs::write(&path, LIMITS).unwrap();
    let mut options = support::options(path.clone(), "memory");
    options.top.sub_windows = Some(100_000);
    let error = server::start(options).await.err().expect("refused");
    assert!(
        error
            .to_string()
            .contains("`sub_windows` must be from 1 to 1440"),
        "{error}"
    );

    let server = support::start(LIMITS).await;
    let path = server.config_path();
    std::fs::write(&path, with_top("{ keys: 0 }")).unwrap();
    let error = reload(&server.running.engine, &path).unwrap_err();
    assert!(
        error.to_string().contains("`keys` must be from 1"),
        "{error}"
    );
    server.running.shutdown().await;
}

#[test]
fn a_directory_sets_the_shape_in_one_file_only() {
    use tollgate_server::config::Source;

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.yaml"), with_top("{ keys: 7 }")).unwrap();
    let other = "top: { sub_windows: 6 }\ndomain: b\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 1 }\n";
    std::fs::write(dir.path().join("b.yaml"), "domain: b\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 1 }\n").unwrap();
    let config = Source::new(dir.path()).load().unwrap();
    assert_eq!(config.top().keys, Some(7));
    std::fs::write(dir.path().join("b.yaml"), other).unwrap();
    let error = Source::new(dir.path()).load().unwrap_err();
    assert!(
        error
            .to_string()
            .contains("the `top` section is already defined in"),
        "{error}"
    );
}
